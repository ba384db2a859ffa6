"""scripts/demo (issue 39 item 10): it waits, saying so, while another iobench measures the disk it writes to, keeps
the topology it uses in its results, and names where its results and report are at the end."""
import os
import signal
import subprocess
import threading

import pytest

from iobench.mounts import mount_of
from iobench.safety import MountLock
from tests.conftest import BIN, ROOT, read_records

WAIT_S = 120     # the demo's bound on the wait (DEMO_WAIT); the test holds the lock far less


@pytest.mark.slow
@pytest.mark.host_mount
def test_demo_waits_for_another_iobench_and_says_where_it_kept_everything(tmp_path):
    topo, out = tmp_path / "mine.yaml", tmp_path / "demo"
    topo.write_text((ROOT / "topologies" / "localhost.yaml").read_text())   # a calibration made before
    env = {**os.environ, "COMMBENCH_VENV": str(BIN.parent), "DEMO_WAIT": str(WAIT_S)}
    lines = []
    with MountLock(mount_of("/var/tmp"), "held-by-the-test"):   # the disk the demo's checkpoint run writes to
        proc = subprocess.Popen([ROOT / "scripts" / "demo", "--no-setup", "--quick", "--topology", topo, "--out", out],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                start_new_session=True)
        watchdog = threading.Timer(300, os.killpg, (proc.pid, signal.SIGKILL))
        watchdog.start()
        try:
            for line in proc.stdout:       # until iobench says it waits; then the lock is let go
                lines.append(line)
                if "iobench: waiting up to" in line:
                    break
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    try:
        lines += proc.stdout.readlines()
        proc.wait()
    finally:
        watchdog.cancel()
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = "".join(lines)
    assert proc.returncode == 0, text[-3000:]
    assert f"iobench: waiting up to {WAIT_S} s for" in text and "held-by-the-test" in text
    said = next(ln for ln in lines if ln.startswith("demo: checkpoint I/O on"))   # the demo claims no wait itself:
    assert "wait" not in said                                                   # iobench says when it waits
    assert (out / "topology.yaml").read_text() == topo.read_text()         # kept, and said where
    assert f"demo: done; results in {out}/" in text and f"{out}/topology.yaml" in text
    assert f"open {out}/report/report.html" in text and (out / "report" / "report.html").is_file()
    assert {r["collective"] for r in read_records(out / "ring.jsonl") if not r.get("event")} == {"all_reduce"}
    assert {r["profile"] for r in read_records(out / "io.jsonl") if not r.get("event")} == {"metadata"}
    scratch = said.split(" on ", 1)[1].strip()
    assert scratch.startswith("/var/tmp/commbench-demo.") and not os.path.exists(scratch)   # its temporary dir is gone
