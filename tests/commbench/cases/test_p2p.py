"""commbench p2p: what the latency loop costs per iteration (one clock read, MPI called directly), its statistics,
and --time-budget's calibration. Timings here are only what the tests make (sleeps); the comparison with
mpi4py.bench's ping-pong is a benchmark script (scripts/bench-mpi), not a timed assertion."""
import json
import subprocess
import time
from types import SimpleNamespace

import pytest
import torch

from commbench import rankstats, timing
from commbench.commands.p2p import p2p_table
from commbench.launch.liveness import Position
from tests.conftest import BIN, ROOT, assert_one_line_error, read_records, run_tool


def one_rank_ctx(**plan):
    """What time_loop reads of a context, for one rank (nobody to wait for at the barrier)."""
    return SimpleNamespace(plan=SimpleNamespace(agg_iters=1, cuda_graph=0, cpu_time=False, **plan),
                           device=torch.device("cpu"), barrier=lambda: None, position=Position(), rank=0)


def test_without_departures_the_loop_reads_the_clock_once_per_iteration(monkeypatch):
    """p2p's loop marks arrivals only (a ping-pong's wait is the peer's turn, not lateness): at 1 us per message
    every clock read shows. The marks still give every iteration's time."""
    reads = []
    real = time.perf_counter
    monkeypatch.setattr(timing.time, "perf_counter", lambda: reads.append(1) or real())
    samples = []
    timing.time_loop(one_rank_ctx(), lambda a: time.sleep(0.001), 50, True, samples, departures=False)
    assert len(samples) == 51                   # each arrival, then the loop's end
    assert len(reads) == 50 + 3                 # those, the start, the end for the loop's own time
    fields = rankstats.summarize([samples], ["h"], departures=False)
    assert 1000 <= fields["time_us_p50"] <= fields["time_us_p99"] and "slowest_rank" not in fields
    arrivals = [0.0, 0.010, 0.030, 0.035]       # iterations of 10, 20 and 5 ms
    assert rankstats.summarize([arrivals, arrivals], ["a", "b"], departures=False)["time_us_p50"] == pytest.approx(1e4)


ONE_MPI_RANK = """
import json, sys, time, torch
from types import SimpleNamespace
from mpi4py import MPI
from commbench.launch.liveness import Position
from commbench.timing import fit_budget, time_loop
from commbench.transports import mpi

comm = mpi.primitives(MPI, MPI.COMM_WORLD, torch.device("cpu"))
out, back = comm.p2p_calls(comm.buffer(torch.zeros(8, dtype=torch.uint8)),
                           comm.buffer(torch.zeros(8, dtype=torch.uint8)), 0)

def ctx(iters, started):   # 4 measurements to share a budget of 2 s
    plan = SimpleNamespace(agg_iters=1, cuda_graph=0, cpu_time=False, iters=iters, time_budget=2.0,
                           launched_at=started, cycles=1, repeats=1, sizes=[1, 2, 3, 4], configs=[{}],
                           steps=lambda: [SimpleNamespace(run=1)] * 4)
    return SimpleNamespace(plan=plan, device=torch.device("cpu"), barrier=comm.barrier, position=Position(), rank=0,
                           comm=comm, measured=0, overhead_s=0.0)

op = lambda a: time.sleep(0.002)   # an operation of 2 ms or more
c = ctx(10000, time.time())
t0 = time.perf_counter()
warm, iters = fit_budget(c, op, True, 1, 1)
t1 = time.perf_counter()
time_loop(c, op, iters, True)
print(json.dumps({"calls": [out.func == MPI.COMM_WORLD.Send, back.func == MPI.COMM_WORLD.Recv,
                            out.args[0][1] == MPI.BYTE and back.args[0][1] == MPI.BYTE],
                  "fill": [warm, iters, t1 - t0, time.perf_counter() - t1],
                  "cap": fit_budget(ctx(16, time.time()), op, True, 1, 1),
                  "gone": fit_budget(ctx(10000, time.time() - 10), op, True, 1, 1)}))
"""


def test_mpi_latency_calls_mpi_directly_and_a_time_budget_is_filled_by_calibration():
    """On one real MPI rank: p2p's bound calls are mpi4py's Send/Recv on [memory, MPI.BYTE] (as mpi4py.bench passes
    them: nothing of commbench between the loop and MPI). fit_budget: a measurement's share of the budget (2 s over
    4 measurements) filled by calibration plus timed iterations of a 2 ms operation; never more than the plan's
    iterations; 1 once the launch's time is gone."""
    done = subprocess.run([str(BIN / "python"), "-c", ONE_MPI_RANK], capture_output=True, text=True, timeout=120,
                          cwd=ROOT)
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    assert got["calls"] == [True, True, True]
    warm, iters, calibrating, timed = got["fill"]
    assert warm >= 1 and 10 <= iters <= 250, got   # ~(0.5 s - calibration) / 2 ms, fewer when sleeps overshoot
    assert 0.3 <= calibrating + timed <= 1.5, got   # the share, 0.5 s
    assert got["cap"] == [15, 16]                   # runs of 1, 2, 4, 8 (at most half of 16 in all), then 16
    assert got["gone"] == [1, 1]


@pytest.mark.slow
def test_time_budget_run_records_the_fitted_iterations(tmp_path, capsys):
    """One launch whose start-up eats most of a small budget: every size still measured and checked, the iterations
    run (fitted, at most OSU's 10000) and the calibration runs (the warm-up) recorded with the budget. Its records
    as a budget spent before measuring leaves them (1 calibration run, 1 iteration): the table says so on stderr;
    with more iterations it says nothing."""
    out = tmp_path / "p.jsonl"
    proc = run_tool("commbench", "p2p", "-b", "1K", "-e", "2K", "--time-budget", 6, "--out", out)
    assert proc.returncode == 0, proc.stderr
    recs = read_records(out)
    assert [r["size_bytes"] for r in recs] == [1024, 2048]
    for rec in recs:
        assert rec["wrong"] == 0 and rec["time_budget_s"] == 6 and 1 <= rec["iters"] <= 10000 and rec["warmup"] >= 1
        assert rec["time_us_p50"] > 0
    assert "p50" in proc.stdout and "p99" in proc.stdout
    p2p_table([dict(r, iters=1, warmup=1) for r in recs])
    assert "note: --time-budget: 2 of 2 measurements found their share of the budget spent" in capsys.readouterr().err
    p2p_table([dict(r, iters=2, warmup=1) for r in recs])
    assert "note" not in capsys.readouterr().err


@pytest.mark.parametrize("value", ["0", "soon"])
def test_bad_time_budget_is_one_line(value):
    assert_one_line_error(run_tool("commbench", "p2p", "--time-budget", value, timeout=60), "--time-budget")
