"""Hang diagnosis: a rank that stops participating is named within --hang-timeout + 10 s, with where every rank
is; the run ends with exit code 4, the records measured before are kept, a stopped process is cleaned up."""
import datetime
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import BIN, HOOKS_ON, read_records

pytestmark = [pytest.mark.slow, pytest.mark.alone]
HANG_S = 4
# per size: 1 warm-up + 3 timed operations, so timed operation 7 is in the second size (2K)
ARGS = ["run", "--nproc-per-node", "3", "-b", "1K", "-e", "4K", "-n", "3", "-w", "1", "--hang-timeout", str(HANG_S)]


def start(tmp_path, out, env=None):
    return subprocess.Popen([str(BIN / "commbench"), *ARGS, "--out", str(out)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, "TMPDIR": str(tmp_path), **(env or {})})


def stop_after_first_record(proc, tmp_path, out, rank):
    """SIGSTOP rank's worker once a record is on disk; (its pid, commbench's stderr, seconds from the stop to
    commbench's end)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (out.exists() and out.read_text().strip()):
        time.sleep(0.1)
    (status,) = list(Path(tmp_path).glob(f"commbench-logs-*/rank{rank}.json"))
    pid = json.loads(status.read_text())["pid"]
    os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    _, stderr = proc.communicate(timeout=120)
    return pid, stderr, time.monotonic() - t0


def errors(stderr):
    return [line[len("error: "):] for line in stderr.splitlines() if line.startswith("error: ")]


def test_a_rank_that_never_enters_the_collective_is_told_from_those_waiting_inside(tmp_path):
    out = tmp_path / "h.jsonl"
    t0 = time.monotonic()
    proc = start(tmp_path, out, {**HOOKS_ON, "COMMBENCH_TEST_STALL": "1:7"})
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 4, stderr
    lines = errors(stderr)
    assert lines[0].startswith(f"hang: no progress for {HANG_S} s (--hang-timeout) in all_reduce at 2048 B"), lines
    assert "rank 1 on" in lines[2] and "never entered operation 7: alive" in lines[2], lines
    assert all("inside timed operation 7" in lines[i] and "waiting on a peer" in lines[i] for i in (1, 3)), lines
    assert lines[4].startswith("environment in effect:")
    recs = read_records(out)
    assert [r["size_bytes"] for r in recs if not r.get("event")] == [1024]  # measured before the hang: kept
    (event,) = [r for r in recs if r.get("event") == "hang"]
    assert [r["state"] for r in event["ranks"]] == ["inside", "outside", "inside"]
    assert time.monotonic() - t0 < 60   # start-up (~10 s here) + the first size + HANG_S, not the 300 s timeout


def test_a_stopped_rank_is_named_and_cleaned_up(tmp_path):
    out = tmp_path / "h.jsonl"
    proc = start(tmp_path, out, {**HOOKS_ON, "COMMBENCH_TEST_SLOW_RANK": "0:0.2"})   # slow enough to stop rank 2 mid-run
    pid, stderr, took = stop_after_first_record(proc, tmp_path, out, 2)
    assert proc.returncode == 4 and took < HANG_S + 10, (took, stderr)
    lines = errors(stderr)
    assert lines[0].startswith("hang: no progress"), lines
    assert any(f"rank 2 on" in ln and f"pid {pid}) stopped responding" in ln for ln in lines), lines
    assert not Path(f"/proc/{pid}").exists(), "the stopped worker was left behind"
    (event,) = [r for r in read_records(out) if r.get("event") == "hang"]
    assert event["ranks"][2]["state"] == "silent"


def test_rank_zero_stopped_is_reported_by_the_launcher(tmp_path):
    """Rank 0 runs the watchdog; stopped, it cannot: the launcher names it after --hang-timeout + 5 s."""
    out = tmp_path / "h.jsonl"
    proc = start(tmp_path, out, {**HOOKS_ON, "COMMBENCH_TEST_SLOW_RANK": "1:0.2"})
    pid, stderr, took = stop_after_first_record(proc, tmp_path, out, 0)
    assert proc.returncode == 4 and took < HANG_S + 5 + 10, (took, stderr)
    assert errors(stderr)[0].startswith(f"rank 0 on") and f"(pid {pid}) was stopped (SIGSTOP" in errors(stderr)[0]
    assert not Path(f"/proc/{pid}").exists()
    assert [r["size_bytes"] for r in read_records(out)][:1] == [1024]


PEER = """
import sys, time
from commbench.launch.liveness import Liveness
live = Liveness("peer-host")
print("ready", flush=True)
if sys.argv[1] == "ends":
    time.sleep(1.5)
    live.close(0)
time.sleep(120)
"""


@pytest.mark.parametrize("how", ["killed", "ends"])
def test_rank_zero_waiting_on_a_peer_that_died_names_it_within_seconds(how, monkeypatch):
    """Gloo does not always notice a killed peer before its timeout: rank 0's watchdog, stuck, probes the peers
    that stopped beating and ends the run on one whose process is gone; a peer that said it ended is not one."""
    import torch.distributed as dist

    from commbench.launch.liveness import BEAT_S, DEAD_WAIT_BEATS, Liveness

    store = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    env = {"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(store.port),
           "COMMBENCH_LOCAL_ADDR": "127.0.0.1"}
    peer = subprocess.Popen([sys.executable, "-c", PEER, how], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, **env})
    try:
        assert peer.stdout.readline() == "ready\n"
        for key, value in {**env, "RANK": "0"}.items():
            monkeypatch.setenv(key, value)
        seen = []
        live = Liveness("rank0-host", hang_timeout=60, on_hang=seen.append, on_dead=seen.append)
        store.wait(["commbench/hb/1"], datetime.timedelta(seconds=60))   # the peer beats (torch imported)
        if how == "killed":
            peer.kill()
        t0 = time.monotonic()
        limit = DEAD_WAIT_BEATS * BEAT_S + 3 * BEAT_S + 4   # stale past 3 beats, then a beat and a probe
        while not seen and time.monotonic() - t0 < limit:
            time.sleep(0.1)
        live.close(0)
        if how == "killed":
            assert seen == [[f"rank 1 on peer-host (127.0.0.1, pid {peer.pid}) died: its heartbeat stopped and its "
                             "process is gone"]], seen
        else:
            assert seen == [] and peer.poll() is None   # ended its run, not dead: nothing to report
    finally:
        peer.kill()
        peer.wait()
