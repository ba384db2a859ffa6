"""accept's history and Pushgateway as the round-5 reproductions attacked them, in one real accept run (an iobench
check on this test's own directory): a history whose earlier line is nested 200,000 deep and whose last line is
torn, and a Pushgateway that is not there. The verdict's outputs are all written, the exit status is the verdict's
(0), the push failure is one warning line, and the run's verdict is its own line of the history. Then the Slurm
healthcheck's history entries name reports that stay."""
import json
import os
import socket
import subprocess
from pathlib import Path

import pytest

from tests.commbench.commands.test_accept_hostile import write_io_spec
from tests.conftest import BIN, ROOT, run_tool

pytestmark = pytest.mark.host_mount   # runs iobench on a host file system (its lock: one at a time)


@pytest.mark.slow
def test_a_deep_line_a_torn_line_and_an_unreachable_pushgateway_cost_nothing_of_the_verdict(tmp_path):
    path = tmp_path / "h.jsonl"
    path.write_text('{"history":1,"node":"n1","result":"pass","failed":' + "[" * 200_000 + "]" * 200_000 + "}\n"
                    '{"history":1,"node":"vm","result":"fail","failed":["torn')
    out = tmp_path / "out"
    done = run_tool("commbench", "accept", "--spec", write_io_spec(tmp_path), "--out", out, "--history", path,
                    "--pushgateway", "http://127.0.0.1:1", timeout=120)
    assert done.returncode in (0, 1) and "Traceback" not in done.stderr, done.stderr   # 1: another iobench ran
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["exit_code"] == done.returncode and (out / "junit.xml").exists() and (out / "report.html").exists()
    warnings = [ln for ln in done.stderr.splitlines() if ln.startswith("warning: --pushgateway")]
    assert warnings == ["warning: --pushgateway http://127.0.0.1:1: Connection refused; not pushed (the exit status "
                        "is the run's)"], done.stderr
    last = path.read_text().splitlines()[-1]
    assert json.loads(last)["node"] == socket.gethostname() and json.loads(last)["run_id"] == verdict["run_id"]
    assert verdict["history"]["nodes"][0]["runs"] == 1 and not verdict["history"]["nodes"][0]["partial"]
    shown = run_tool("commbench", "health", path, "--format", "json", timeout=60)
    assert shown.returncode == 0 and json.loads(shown.stdout)["node"] == socket.gethostname(), shown.stderr


@pytest.mark.slow
def test_the_healthchecks_history_names_a_report_that_stays(tmp_path):
    """scripts/slurm/healthcheck as slurmd runs it (SLURMD_NODENAME; DRAIN=0: nothing to drain, no scontrol): its
    history entry names REPORTS/<time>-<node>-<pid>/report.html, which is there after the script ends (it named a
    temporary directory the script deleted); with KEEP=1 the next run removes the older run's outputs."""
    reports, hist = tmp_path / "reports", tmp_path / "h.jsonl"
    env = {"SLURMD_NODENAME": "n1", "SLURM_JOB_ID": "", "COMMBENCH": str(BIN / "commbench"), "PYTHON": str(BIN / "python"),
           "SPEC": str(write_io_spec(tmp_path)), "HISTORY": str(hist), "REPORTS": str(reports), "DRAIN": "0"}
    done = [subprocess.run([str(ROOT / "scripts/slurm/healthcheck")], capture_output=True, text=True, timeout=120,
                           env={**os.environ, **env, "KEEP": keep}) for keep in ("5", "1")]
    assert all(d.returncode in (0, 2) for d in done), [d.stderr for d in done]   # 2: another iobench held the mount
    first, second = (json.loads(ln) for ln in hist.read_text().splitlines())
    assert Path(second["report"]).is_file() and Path(second["report"]).parent.parent == reports
    assert Path(second["report"]).parent.name.endswith(f"-n1-{Path(second['report']).parent.name.split('-')[-1]}")
    assert not Path(first["report"]).exists() and [p.name for p in reports.iterdir()] == \
        [Path(second["report"]).parent.name]
    verdict = json.loads((Path(second["report"]).parent / "verdict.json").read_text())
    assert verdict["run_id"] == second["run_id"]
