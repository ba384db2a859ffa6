"""Verdicts from repeats: equal work is never ranked, a real difference is named with an interval excluding 1,
chunked answers the seed's question, and the interval itself is right."""
import math

import pytest

from benchcore.results import stats
from commbench.cases.case import work_key
from commbench.cases.registry import CASES
from commbench.commands.compare import payload_rows
from tests.conftest import HOOKS_ON, read_records, run_tool

TINY = ["--nproc-per-node", 2, "-n", 5, "-w", 1]


def verdicts(recs, check="fastest"):
    return [r for r in recs if r.get("event") == "verdict" and r["check"] == check]


def test_t_quantiles_match_the_published_table():
    for df, want in ((1, 12.706), (2, 4.303), (4, 2.776), (10, 2.228), (30, 2.042)):
        assert stats.t_quantile(0.975, df) == pytest.approx(want, abs=1e-3)


def test_ratio_interval_is_the_welch_interval_of_log_times():
    a, b = [10.0, 11.0, 10.5], [20.0, 21.0, 19.0]
    r = stats.ratio_interval(a, b)
    la, lb = [math.log(v) for v in a], [math.log(v) for v in b]
    ma, mb = sum(la) / 3, sum(lb) / 3
    va = sum((v - ma) ** 2 for v in la) / 2 / 3
    vb = sum((v - mb) ** 2 for v in lb) / 2 / 3
    df = (va + vb) ** 2 / (va ** 2 / 2 + vb ** 2 / 2)
    half = stats.t_quantile(0.975, df) * math.sqrt(va + vb)
    assert r.ratio == pytest.approx(math.exp(ma - mb))
    assert (r.low, r.high) == pytest.approx((math.exp(ma - mb - half), math.exp(ma - mb + half)))
    assert r.beyond() and not stats.ratio_interval([10, 12, 11], [11, 10, 12]).beyond()
    assert stats.ratio_interval([10], [20, 21]) is None  # one value: no spread, no interval


def test_work_keys_tell_same_operations_from_different_ones():
    chunked, plain = CASES["chunked"], CASES["plain"]
    small = {"chunk_bytes": 1024, "threshold_bytes": 16384, "inflight": 1, "in_place": True, "dtype": "float32"}
    other = {**small, "chunk_bytes": 2048, "inflight": 4}
    assert work_key(chunked, small, 8192, 2, 4) == work_key(chunked, other, 8192, 2, 4) == \
        work_key(plain, {"in_place": True, "dtype": "float32"}, 8192, 2, 4)   # at or below the threshold
    assert work_key(chunked, small, 65536, 2, 4) != work_key(chunked, other, 65536, 2, 4)
    low = {**small, "threshold_bytes": 1024}   # 4096 B in 4 chunks of 1K: 8 in flight is 4 in flight
    assert work_key(chunked, {**low, "inflight": 4}, 4096, 2, 4) != work_key(chunked, low, 4096, 2, 4)
    assert work_key(chunked, {**low, "inflight": 8}, 4096, 2, 4) == work_key(chunked, {**low, "inflight": 4}, 4096, 2, 4)
    assert work_key(CASES["ring"], {"in_place": True, "dtype": "float32"}, 8192, 2, 4) != \
        work_key(plain, {"in_place": True, "dtype": "float32"}, 8192, 2, 4)


@pytest.mark.slow
def test_identical_configs_are_one_group_and_never_ranked_across_three_runs(tmp_path):
    """Two chunk sizes at or below the threshold run plain's single all_gather: three runs, no winner ever."""
    for run in range(3):
        out = tmp_path / f"v{run}.jsonl"
        proc = run_tool("commbench", "compare", "--strategies", "plain,chunked", "--baseline", "plain",
                        "--chunk-size", "1K,2K", "--threshold", "16K", "-b", "4K", "-e", "16K", "-f", 4,
                        "--repeats", 3, *TINY, "--out", out)
        assert proc.returncode == 0, proc.stderr
        found = verdicts(read_records(out))
        assert found and all(v["winner"] is None for v in found), found
        groups = {tuple(g) for v in found for g in v["equivalent"]}
        assert groups == {("plain", "chunked 1K x1 >16K", "chunked 2K x1 >16K")}
        assert "same operations" in proc.stdout and "nothing to rank" in proc.stdout


@pytest.mark.slow
@pytest.mark.alone
def test_a_real_difference_is_named_with_an_interval_excluding_one(tmp_path):
    """A test-only sleep of 5 ms inside every ring run: plain wins, the interval lies below 1, and the
    speed-up column says faster."""
    out = tmp_path / "v.jsonl"
    proc = run_tool("commbench", "compare", "--strategies", "ring,plain", "-b", "4K", "-e", "4K", "--repeats", 4,
                    *TINY, "--out", out, env={**HOOKS_ON, "COMMBENCH_TEST_SLOW": "ring:0.005"})
    assert proc.returncode == 0, proc.stderr
    recs = read_records(out)
    ring = [r for r in recs if r.get("strategy") == "ring"]
    assert sorted(r["repeat"] for r in ring) == [0, 1, 2, 3] and min(r["time_us"] for r in ring) >= 5000
    (found,) = verdicts(recs)
    assert found["winner"] == "plain" and found["versus"] == "ring" and found["sizes"] == [4096]
    assert found["ratio_low"] <= found["ratio"] <= found["ratio_high"] < 1
    assert "faster" in proc.stdout and "plain is faster than ring" in proc.stdout


@pytest.mark.slow
@pytest.mark.alone
def test_chunked_answers_which_settings_and_from_which_size(tmp_path):
    """ring and plain slowed by 30 ms per run (test hook): chunking (threshold 4K, so every payload is chunked)
    must be recommended from the smallest payload, with its intervals; the answer is a verdict record."""
    out = tmp_path / "v.jsonl"
    proc = run_tool("commbench", "chunked", "-b", "8K", "-e", "16K", "--threshold", "4K", "--chunk-size", "4K",
                    "--repeats", 4, *TINY, "--out", out, env={**HOOKS_ON, "COMMBENCH_TEST_SLOW": "ring:0.03,plain:0.03"})
    assert proc.returncode == 0, proc.stderr
    (answer,) = verdicts(read_records(out), "chunked")
    assert answer["winner"] == "chunked 4K x1 >4K" and answer["beats_from_bytes"] == 8192
    assert answer["ratio_high"] < 1 and answer["sizes"] == [8192, 16384]
    assert "Answer: use chunked with threshold 4K, chunk size 4K, in-flight 1" in " ".join(proc.stdout.split())


def test_a_threshold_list_is_swept_and_a_chunk_above_the_smallest_is_refused():
    proc = run_tool("commbench", "chunked", "--threshold", "8M,16M", "--chunk-size", "1M,2M", "--inflight", "1,2",
                    "-b", "4M", "-e", "4M", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    plan = proc.stdout
    for threshold in (8 << 20, 16 << 20):
        assert f'"threshold_bytes":{threshold}' in plan
    assert plan.count('"case":"chunked"') == 8 and '"case":"plain"' in plan and '"repeats":3' in plan
    proc = run_tool("commbench", "chunked", "--threshold", "8M,16M", "--chunk-size", "12M", "--dry-run")
    assert proc.returncode != 0 and "larger than --threshold 8M" in proc.stderr


def test_the_spread_of_one_repeat_is_not_known_not_zero():
    """compare --repeats 1 printed spread 0.0: one value has no spread (n/a in the table)."""
    rec = {"case": "ring", "strategy": "ring", "phase": "total", "size_bytes": 1024, "busbw_gbps": 1.0, "wrong": 0,
           "backend": "gloo", "run_id": "r"}
    one = payload_rows([dict(rec, time_us=100.0, repeat=0)], [], "ring")
    two = payload_rows([dict(rec, time_us=100.0, repeat=0), dict(rec, time_us=110.0, repeat=1)], [], "ring")
    assert one[1024][0]["spread"] is None and one[1024][0]["repeats"] == 1
    assert two[1024][0]["spread"] == pytest.approx(10 / 105 * 100)
