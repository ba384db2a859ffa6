"""A rank imports neither click nor rich: options are parsed once, by the command line, and a rank gets a plan (JSON
in, records out). Checked on what a rank holds: the agent's modules (torchrun forks ranks from it), the worker's,
and whatever one measurement imports on the way."""
import json
import socket
import subprocess
import sys
from pathlib import Path

from commbench.launch.liveness import CHANNEL, STATUS_ENV
from commbench.plan import Plan

ROOT = Path(__file__).resolve().parents[2]
RANK = """
import json, sys
import benchcore.processes.torchrun, torch.distributed.run, torch.distributed.launcher.api   # the agent's
from commbench import worker
try:
    worker.main(["--plan-file", sys.argv[1]])
except SystemExit as exc:
    print(json.dumps({"code": exc.code, "cli": sorted(m for m in ("click", "rich") if m in sys.modules)}))
"""


def test_a_rank_imports_neither_click_nor_rich(tmp_path):
    plan = tmp_path / "plan.json"
    Plan(run_id="t", sizes=[8], configs=[{"case": "all_reduce", "in_place": True, "dtype": "float32", "op": "sum",
                                          "root": None}], iters=1, warmup=0, backend="gloo").write(plan)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {"RANK": "0", "WORLD_SIZE": "1", "LOCAL_RANK": "0", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port),
           "GLOO_SOCKET_IFNAME": "lo", STATUS_ENV: str(tmp_path), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-c", RANK, str(plan)], capture_output=True, text=True, cwd=ROOT, env=env,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {"code": 0, "cli": []}, done.stderr
    measured = [json.loads(line) for line in (tmp_path / CHANNEL).read_text().splitlines()]
    assert [(r["collective"], r["size_bytes"], r["wrong"]) for r in measured] == [("all_reduce", 8, 0)]
