"""How compare, chunked, overlap and p2p end a run that does not finish: a rank stalled at its first operation is a
hang report (exit 4), not a traceback; SIGTERM, as Slurm sends it (some processes twice), stops the run at once and
still writes the tables, the plot and the records measured (exit 143). Real torchrun launches, Gloo ranks."""
import os
import signal
import subprocess
import time

import pytest

from commbench.cases.case import TOTAL
from tests.conftest import BIN, HOOKS_ON, read_records, run_tool

pytestmark = pytest.mark.slow
SMALL = ["--nproc-per-node", 2, "-n", 2, "-w", 1]
# every case these commands measure, slowed so that a SIGTERM finds the run going
SLOW = ",".join(f"{case}:0.05" for case in ("ring", "rs-ag", "plain", "chunked", "ddp", "pipelined", "pipelined-rs"))


@pytest.mark.parametrize("command", ["compare", "chunked", "overlap", "p2p"])
def test_a_rank_stalled_at_its_first_operation_is_a_hang_report(command, tmp_path):
    """Nothing measured: compare, chunked and overlap ended in StopIteration, p2p in 'max() arg is an empty
    sequence' (exit 1, a traceback); now the hang report of run and sweep, exit 4."""
    out = tmp_path / "h.jsonl"
    args = [command, "-b", "64K", "-e", "64K", *SMALL, *(["--repeats", 1] if command != "p2p" else [])]
    proc = run_tool("commbench", *args, "--hang-timeout", 4, "--out", out, *(["--plot", tmp_path / "p.png"]
                    if command != "p2p" else []), env={**HOOKS_ON, "COMMBENCH_TEST_STALL": "1:1"}, timeout=180)
    assert proc.returncode == 4 and "Traceback" not in proc.stderr, proc.stderr
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("error: ")]
    assert errors[0].startswith("error: hang: no progress for 4 s (--hang-timeout)"), errors
    assert any("never entered operation 1: alive" in ln for ln in errors), errors
    assert proc.stdout.strip() == "no measurements" and not (tmp_path / "p.png").exists()   # nothing to draw
    # the hang, after what the plan said it measures once for another (compare's and chunked's chunked at 64K runs
    # plain's operations), written before anything ran
    assert [r["event"] for r in read_records(out)] == ["same_operations"] * (command in ("compare", "chunked")) + \
        ["hang"]


def until_exit_send_sigterm(proc, out):
    """SIGTERM once out holds a whole measurement (its total phase: what the tables show), then every 50 ms until
    proc exits (Slurm signals every process of a job, some twice); (stdout, stderr, the records on disk when the
    first one was sent)."""
    def whole():
        return [r for r in read_records(out) if r.get("phase") == TOTAL] if out.exists() else []
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and not whole():
        time.sleep(0.05)
    assert whole(), "nothing measured in 180 s"
    before = read_records(out)
    while proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        time.sleep(0.05)
    stdout, stderr = proc.communicate()
    return stdout, stderr, before


@pytest.mark.parametrize("command", ["compare", "chunked", "overlap"])
def test_sigterm_again_and_again_still_writes_the_tables_and_the_plot(command, tmp_path):
    """The first SIGTERM stops the run; the ones after it used to end commbench before its tables and plot were
    written (exit 143, neither shown): now they wait until both are, and the records measured are kept."""
    out, plot = tmp_path / "t.jsonl", tmp_path / "t.png"
    args = [command, "-b", "16K", "-e", "4M", "-f", 4, *SMALL, "--repeats", 1, "--out", out, "--plot", plot]
    proc = subprocess.Popen([str(BIN / "commbench"), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **HOOKS_ON, "COMMBENCH_TEST_SLOW": SLOW})
    try:
        stdout, stderr, before = until_exit_send_sigterm(proc, out)
    finally:
        proc.kill()
    assert proc.returncode == 143 and "Traceback" not in stderr, stderr
    assert "error: terminated by SIGTERM (a time limit, scancel or kill) after" in stderr and "they are kept" in stderr
    assert "payload 16K: " in stdout and plot.stat().st_size > 0   # the first payload's table
    assert read_records(out)[:len(before)] == before
