"""commbench across two real nodes (network namespaces, 1gbit tbf link): the run, the fidelity check, faults.

Each fault is injected into real processes once the first measurement is on disk, and each case
asserts the exit code, the message, how long after the fault commbench ended, and the records
measured before it.
"""
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, read_records, run_tool
from tests.netns.conftest import errors, needs_netns, wait_all, wait_records

pytestmark = [pytest.mark.slow, pytest.mark.root, needs_netns]

TIMEOUT = 12  # process-group timeout of the fault runs (the hang watchdog: 0.8 x)
# 1M, 4M, 16M, 64M, 256M: about 25 s on the 1gbit link, so a fault after the first record is mid-run
LONG = ["-b", "1M", "-e", "256M", "-f", 4, "-n", 5, "-w", 1, "--timeout", TIMEOUT, "--rdzv-timeout", 30]
observed = {}


@pytest.fixture(scope="module", autouse=True)
def report_times():
    yield
    if observed:
        print("\n[fault times, s after the fault: node 0 / node 1] " +
              "; ".join(f"{k} {a:.1f} / {b:.1f}" for k, (a, b) in observed.items()))


def start_long(pair, port, out):
    p1 = pair.ring(1, port, *LONG)
    p0 = pair.ring(0, port, *LONG, "--out", out)
    wait_records(out, 1, timeout=90)
    return p0, p1


def check_survivors(out, hang=False):
    """The measurements before the fault, kept; a hang report too when rank 0's watchdog saw one."""
    recs = read_records(out)
    assert [r["event"] for r in recs if r.get("event")] == (["hang"] if hang else [])
    recs = [r for r in recs if not r.get("event")]
    assert 1 <= len(recs) < 5, recs  # measured before the fault, and the run did not finish
    assert [r["size_bytes"] for r in recs] == [1 << 20, 4 << 20, 16 << 20, 64 << 20][:len(recs)]
    assert all(r["wrong"] == 0 and r["nodes"] == 2 for r in recs)


def gone(pid, timeout=10):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and Path(f"/proc/{pid}").exists():
        time.sleep(0.1)
    return not Path(f"/proc/{pid}").exists()


def test_ring_across_namespaces(fresh, tmp_path):
    out = tmp_path / "ring.jsonl"
    args = ["-b", "1M", "-e", "4M", "-f", 4, "-n", 3, "-w", 1, "--timeout", 30, "--rdzv-timeout", 30]
    p1 = fresh.ring(1, 29510, *args)
    p0 = fresh.ring(0, 29510, *args, "--out", out, "--format", "json")
    (r0, e0, _), (r1, e1, _) = wait_all([p0, p1], time.monotonic(), 120)
    assert r0 == 0 and r1 == 0, e0 + e1
    recs = read_records(out)
    assert [r["size_bytes"] for r in recs] == [1 << 20, 4 << 20]
    for rec in recs:
        assert rec["env"]["GLOO_SOCKET_IFNAME"] == "eth0" and rec["env"]["NCCL_SOCKET_IFNAME"] == "eth0"
        assert rec["hosts"] == [fresh.host(0), fresh.host(1)] and rec["nodes"] == 2 and rec["world_size"] == 2
        assert rec["launcher"] == "torchrun" and rec["wrong"] == 0 and rec["busbw_gbps"] > 0


def test_killed_rank_is_named_with_its_host(fresh, tmp_path):
    out = tmp_path / "r.jsonl"
    p0, p1 = start_long(fresh, 29511, out)
    pid = fresh.worker_pid(1)
    t0 = time.monotonic()
    os.kill(pid, signal.SIGKILL)
    (r0, e0, t_0), (r1, e1, t_1) = wait_all([p0, p1], t0, 60)
    observed["SIGKILL"] = (t_0, t_1)
    assert r0 != 0 and r1 != 0 and t_0 < 15 and t_1 < 15, (t_0, t_1)
    assert f"rank 1 on {fresh.host(1)} ({fresh.addr(1)}, pid {pid}) died" in errors(e0)[0], e0
    assert errors(e1)[0] == f"error: rank 1 on {fresh.host(1)} (pid {pid}) was killed by SIGKILL", e1
    assert "Traceback" not in e0 + e1
    check_survivors(out)


def test_stopped_rank_is_named_and_cleaned_up(fresh, tmp_path):
    out = tmp_path / "r.jsonl"
    p0, p1 = start_long(fresh, 29512, out)
    pid = fresh.worker_pid(1)
    t0 = time.monotonic()
    os.kill(pid, signal.SIGSTOP)
    (r0, e0, t_0), (r1, e1, t_1) = wait_all([p0, p1], t0, 90)
    observed["SIGSTOP"] = (t_0, t_1)
    # node 0's watchdog reports the hang after --hang-timeout (0.8 x --timeout here), exit code 4
    assert r0 == 4 and r1 != 0 and t_0 < TIMEOUT * 0.8 + 10 and t_1 < TIMEOUT + 15, (t_0, t_1)
    assert errors(e0)[0].startswith("error: hang: no progress for"), e0
    # node 0 sees the heartbeat stop while the process still holds its probe port; torchrun would blame rank 0
    assert any(f"rank 1 on {fresh.host(1)} ({fresh.addr(1)}, pid {pid}) stopped responding" in ln
               for ln in errors(e0)), e0
    assert errors(e1)[0].startswith(f"error: rank 1 on {fresh.host(1)} (pid {pid}) was stopped (SIGSTOP"), e1
    assert gone(pid), "the stopped worker was left behind"
    check_survivors(out, hang=True)


def test_link_down_says_the_peer_became_unreachable(fresh, tmp_path):
    out = tmp_path / "r.jsonl"
    p0, p1 = start_long(fresh, 29513, out)
    pid = fresh.worker_pid(1)
    t0 = time.monotonic()
    fresh.set_link(1, "down")
    (r0, e0, t_0), (r1, e1, t_1) = wait_all([p0, p1], t0, 90)
    observed["link down"] = (t_0, t_1)
    assert r0 == 4 and r1 != 0 and t_0 < TIMEOUT + 15 and t_1 < TIMEOUT + 15, (t_0, t_1)
    assert any(f"rank 1 on {fresh.host(1)} ({fresh.addr(1)}) became unreachable" in ln for ln in errors(e0)), e0
    assert f"rank 0 on {fresh.host(0)} ({fresh.addr(0)}), which holds the rendezvous store, became " \
           f"unreachable from {fresh.host(1)}" in errors(e1)[0], e1
    assert gone(pid)
    # node 0's watchdog: rank 0 waits inside the collective. Its report probes the unreachable peer (2 s), so Gloo's
    # timeout comes meanwhile: the main thread waits for the watchdog, and the hang record is kept
    check_survivors(out, hang=True)


def test_peer_node_never_starts(fresh):
    """Node 0 waits for a node 1 that never comes; node 1 (elsewhere) finds no node 0: both within --rdzv-timeout."""
    rdzv = 10
    t0 = time.monotonic()
    p0 = fresh.ring(0, 29514, "-e", "1M", "--rdzv-timeout", rdzv)
    p1 = fresh.ring(1, 29515, "-e", "1M", "--rdzv-timeout", rdzv)
    (r0, e0, t_0), (r1, e1, t_1) = wait_all([p0, p1], t0, 90)
    observed["never starts"] = (t_0, t_1)
    assert errors(e0) == [f"error: rendezvous at {fresh.addr(0)}:29514 timed out after {rdzv} s: not all 2 nodes "
                          "joined (is the peer node started?)"], e0
    assert errors(e1) == [f"error: rendezvous store at {fresh.addr(0)}:29515: nothing listens there (checked from "
                          f"{fresh.host(1)}): node rank 0 is not started, has ended, or uses another port"], e1
    # the clock starts before torchrun does: its start-up costs 6-9 s here, more on a loaded machine
    assert r0 != 0 and r1 != 0 and t_0 < rdzv + 20 and t_1 < rdzv + 20, (t_0, t_1)


def test_unreachable_rendezvous_host_is_told_from_one_not_started(fresh):
    """Node 0's link is down: node 1 gets no answer at all (not a refusal) and says so."""
    fresh.set_link(0, "down")
    t0 = time.monotonic()
    p1 = fresh.ring(1, 29516, "-e", "1M", "--rdzv-timeout", 10)
    ((r1, e1, t_1),) = wait_all([p1], t0, 90)
    assert r1 != 0 and t_1 < 40, t_1
    assert errors(e1) == [f"error: rendezvous store at {fresh.addr(0)}:29516: no answer from {fresh.addr(0)} within "
                          f"2 s (checked from {fresh.host(1)}): a wrong address, a firewall or a link down"], e1


def test_selftest_link_passes_at_1gbit(tmp_path):
    out = tmp_path / "link.jsonl"
    proc = run_tool("commbench", "selftest", "link", "--rate", "1gbit", "-e", "64M", "-n", 3, "-w", 1, "--out", out,
                    timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "selftest link: PASS" in proc.stdout and "/ TCP ceiling" in proc.stdout
    recs = read_records(out)
    verdict = recs[-1]
    assert verdict["event"] == "verdict" and verdict["passed"] is True and verdict["rate_bps"] == 10 ** 9
    assert [r["size_bytes"] for r in verdict["rows"]] == [64 << 20]   # 256M, the default's other size: 20 s more
    for row in verdict["rows"]:
        assert 0.90 <= row["of_ceiling"] <= 1.0 and row["of_rate"] == pytest.approx(row["of_ceiling"] * 1448 / 1514)
    # the first cycle that passes ends them (-N 2 at most)
    assert verdict["cycles"] in (1, 2)
    assert sorted((r["size_bytes"], r["cycle"]) for r in recs[:-1]) == [(64 << 20, c) for c in range(verdict["cycles"])]
    for rec in recs[:-1]:
        assert rec["collective"] == "all_reduce" and rec["nodes"] == 2 and len(rec["hosts"]) == 2
        assert rec["env"]["GLOO_SOCKET_IFNAME"] == "eth0" and rec["wrong"] == 0
    best = max(r["busbw_gbps"] for r in recs[:-1] if r["size_bytes"] == 64 << 20)
    assert verdict["rows"][0]["busbw_gbps"] == best  # judged on the best pass
    left = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "cbst" not in left, left  # always torn down


def test_selftest_bad_rate_is_one_line():
    assert_one_line_error(run_tool("commbench", "selftest", "link", "--rate", "fast", timeout=60), "is not a rate")
    assert_one_line_error(run_tool("commbench", "selftest", "model", "--port", 65533, "-N", 2, timeout=60),
                          "give one from 1 to 65532")
