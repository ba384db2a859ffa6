"""Per-rank, per-iteration statistics: the rank the others wait for is named, and only a real straggler."""
import pytest

from commbench import rankstats
from tests.conftest import HOOKS_ON, read_records, run_tool


def marks(arrivals, departures, skew=0.0):
    """One rank's samples: arrival at and departure from each iteration, in turn, on a clock started skew late."""
    return [t - skew for pair in zip(arrivals, departures) for t in pair]


def test_lateness_and_excess_from_marks():
    """Three ranks, iterations of 10 ms with 1 ms of transfer; rank 1 arrives 3 ms after the others."""
    on_time = marks([0.0, 0.010, 0.020], [0.004, 0.014, 0.024])
    samples = [on_time, marks([0.003, 0.013, 0.023], [0.004, 0.014, 0.024]), on_time]
    fields = rankstats.summarize(samples, ["a", "b", "c"])
    assert fields["slowest_rank"] == 1 and fields["slowest_host"] == "b"
    assert fields["slowest_excess"] == pytest.approx(0.010 / (0.010 - 0.003), rel=1e-6)
    assert fields["outlier_ranks"] == [1]
    assert fields["time_us_p50"] == pytest.approx(10000, rel=1e-6) and 0 < fields["time_cv"] < 0.6


def test_a_rank_that_left_the_barrier_late_is_not_a_straggler():
    """Ranks alike to microseconds, but rank 0's clock started 2 ms late (it left the barrier a scheduler slice
    after the others): comparing arrivals across clocks would name it; comparing time inside does not."""
    arrive, leave = [0.0, 0.010, 0.020], [0.001, 0.011, 0.021]
    samples = [marks(arrive, leave, skew=0.002), marks(arrive, [t + 1e-5 for t in leave]), marks(arrive, leave)]
    fields = rankstats.summarize(samples, ["a", "b", "c"])
    assert fields["outlier_ranks"] == [] and fields["slowest_excess"] < 1.01


def measured(rank, excess=1.5, **extra):
    return {"collective": "all_reduce", "size_bytes": 1024, "backend": "gloo", "world_size": 3, "hosts": ["h"],
            "outlier_ranks": [rank] if rank is not None else [], "slowest_rank": rank, "slowest_host": "h",
            "slowest_excess": excess, **extra}


def test_notes_say_consistent_only_for_most_measurements_never_nan_and_name_nobody_when_oversubscribed():
    most = [measured(2), measured(2), measured(None)]
    assert rankstats.notes(most, cores=8) == [
        "note: rank 2 on h is a consistent straggler in 2 of 3 measurements (robust z > 3.5 over ranks): the others "
        "wait for it; worst: the median rank would take 1/1.50 of the time (all_reduce at 1024 B)"]
    (line,) = rankstats.notes([measured(2, excess=None)] + [measured(None)] * 89, cores=8)
    assert "is a straggler in 1 of 90 measurements" in line and "consistent" not in line
    assert "nan" not in line and "worst" not in line          # no excess measured: no figure made up
    assert rankstats.notes(most, cores=2) == [
        "note: oversubscribed (3 ranks per host on 2 cores): ranks wait for the scheduler, so no rank is named a "
        "straggler"]
    assert rankstats.notes([dict(r, backend="nccl") for r in most], cores=2)[0].startswith("note: rank 2 on h")


@pytest.mark.slow
@pytest.mark.alone
def test_a_rank_slowed_by_a_hook_is_named_and_nothing_is_named_without_it(tmp_path):
    """COMMBENCH_TEST_SLOW_RANK makes rank 2 of 3 sleep 8 ms before each timed iteration."""
    slow, plain = tmp_path / "slow.jsonl", tmp_path / "plain.jsonl"
    args = ["run", "--nproc-per-node", 3, "-b", "96K", "-e", "96K", "-n", 20, "-w", 2, "--stats"]
    proc = run_tool("commbench", *args, "--out", slow, env={**HOOKS_ON, "COMMBENCH_TEST_SLOW_RANK": "2:0.008"})
    assert proc.returncode == 0, proc.stderr
    (rec,) = read_records(slow)
    assert rec["slowest_rank"] == 2 and rec["outlier_ranks"] == [2] and rec["slowest_host"]
    assert rec["slowest_excess"] > 1.3 and rec["time_us"] > 8000
    lateness_us = rec["time_us_p50"] * (1 - 1 / rec["slowest_excess"])   # L from excess = T / (T - L)
    assert 6000 < lateness_us < 12000, lateness_us   # the 8 ms sleep, give or take the scheduler
    assert rec["time_us_p50"] <= rec["time_us_p99"] and rec["time_cv"] >= 0
    assert "per-iteration statistics" in proc.stdout
    assert ("note: rank 2 on" in proc.stdout) != ("note: oversubscribed" in proc.stdout)  # 3 ranks on 2 cores here
    proc = run_tool("commbench", *args, "--out", plain)
    assert proc.returncode == 0, proc.stderr
    (rec,) = read_records(plain)
    assert rec["outlier_ranks"] == [] and "straggler" not in proc.stdout
    assert rec["slowest_excess"] < 1.3


def test_no_iter_stats_leaves_the_fields_out(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = run_tool("commbench", "run", "--nproc-per-node", 2, "-b", "1K", "-e", "1K", "-n", 2, "-w", 0,
                    "--no-iter-stats", "--out", out)
    assert proc.returncode == 0, proc.stderr
    (rec,) = read_records(out)
    assert "time_us_p50" not in rec and "slowest_rank" not in rec
