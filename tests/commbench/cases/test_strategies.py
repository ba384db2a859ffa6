"""Strategies end to end on real Gloo process groups: exact results, chunk counts, in-flight depth."""
import json

import pytest

from benchcore.results import schema
from commbench.cases.chunked import chunk_layout
from tests.conftest import assert_one_line_error, read_records, run_tool


def test_chunk_layout_covers_the_payload_with_padded_last_chunk():
    layout = chunk_layout(count=1000, n=3, elt=4, chunk_bytes=400, threshold_bytes=800)
    assert [s for s, _ in layout] == list(range(0, 1000, 99))   # 99 = 3 x floor(100 / 3) elements
    assert all(ln % 3 == 0 for _, ln in layout) and layout[-1] == (990, 12)
    assert chunk_layout(count=200, n=3, elt=4, chunk_bytes=400, threshold_bytes=800) == [(0, 201)]


def strategies_run(tmp_path, nproc, size, *extra):
    out = tmp_path / f"s{nproc}.jsonl"
    proc = run_tool("commbench", "compare", "--strategies", "ring,rs-ag,plain,chunked,compressed", "--nproc-per-node",
                    nproc, "-b", size, "-e", size * 4, "-f", 4, "--threshold", "16K", "--chunk-size", "4K",
                    "--inflight", "1,3", "--place", "both", "-n", 2, "-w", 1, "--repeats", 1, "--out", out, *extra)
    return proc, [r for r in read_records(out) if not r.get("event")]


@pytest.mark.slow
@pytest.mark.parametrize("nproc, size", [(2, 96 * 1024), (3, 100004)])   # even, and not divisible by 3 or 4K
def test_every_strategy_exact_in_and_out_of_place(tmp_path, nproc, size):
    proc, recs = strategies_run(tmp_path, nproc, size)
    assert proc.returncode == 0, proc.stderr
    sizes = [size, size * 4]
    totals = [r for r in recs if r["phase"] == "total"]
    # per size: ring, rs-ag x2 places, plain x2 places, chunked x (2 in-flight x 2 places), compressed
    assert len(totals) == 2 * (1 + 2 + 2 + 4 + 1) and len(recs) == 2 * (1 + 6 + 2 + 4 + 1)
    for rec in recs:
        assert rec["world_size"] == nproc and rec["size_bytes"] in sizes
        assert rec["wrong"] == 0, rec
    chunked = [r for r in totals if r["strategy"] == "chunked"]
    assert {(r["in_place"], r["inflight"]) for r in chunked} == {(True, 1), (True, 3), (False, 1), (False, 3)}
    for rec in chunked:  # payloads above the 16K threshold: 4K chunks, really issued one op each
        assert rec["chunks"] == rec["chunk_ops"] > 1
        assert rec["max_inflight"] <= rec["inflight"]
    comp = [r for r in totals if r["strategy"] == "compressed"]
    assert all(r["wire_bytes"] == r["size_bytes"] // 2 and 0 < r["max_abs_error"] < 0.1 for r in comp)
    plain = [r for r in totals if r["strategy"] == "plain"]
    assert all(r["chunks"] == r["chunk_ops"] == 1 for r in plain)
    assert "verdicts" in proc.stdout and "time to the same final tensor" in proc.stdout


@pytest.mark.slow
@pytest.mark.alone
def test_inflight_really_overlaps_and_compare_runs_on_two_nodes(tmp_path):
    """2 emulated nodes; K=4 in-flight reaches more than one outstanding chunk op."""
    out = tmp_path / "c.jsonl"
    plot = tmp_path / "c.png"
    proc = run_tool("commbench", "compare", "--nodes", 2, "--strategies", "ring,rs-ag,chunked,compressed",
                    "-b", "1M", "-e", "4M", "-f", 4, "--threshold", "512K", "--chunk-size", "64K",
                    "--inflight", "4", "--compress", "fp8", "-n", 3, "-w", 1, "--repeats", 1, "--out", out,
                    "--plot", plot)
    assert proc.returncode == 0, proc.stderr
    recs = [r for r in read_records(out) if not r.get("event")]
    assert {(r["strategy"], r["size_bytes"]) for r in recs} == {
        (s, b) for s in ("ring", "rs-ag", "chunked", "compressed") for b in (1 << 20, 4 << 20)}
    assert all(r["wrong"] == 0 and r["nodes"] == 2 for r in recs)
    chunked = [r for r in recs if r["strategy"] == "chunked"]
    assert all(r["chunk_ops"] == r["chunks"] >= 16 for r in chunked)
    assert max(r["max_inflight"] for r in chunked) >= 2
    assert plot.stat().st_size > 10_000
    assert "verdicts" in proc.stdout and "speed-up vs ring" in proc.stdout


@pytest.mark.parametrize("args, needle", [
    (["--chunk-size", "0"], "must be positive"),
    (["--chunk-size", "32M"], "larger than --threshold"),
    (["--chunk-size", "1M", "--threshold", "512K"], "larger than --threshold"),
    (["--chunk-size", "1002"], "not a multiple of the 4 B"),
    (["--inflight", "0"], "at least 1"),
    (["--inflight", "two"], "whole numbers"),
    (["--strategies", "ring,tree"], "unknown strategy 'tree'"),
    (["--strategies", "rs-ag,chunked"], "--baseline ring is not one of --strategies"),
    (["--strategies", "compressed", "--baseline", "compressed", "--dtype", "bfloat16"], "use --dtype float32"),
])
def test_bad_strategy_input_is_refused_before_launch(args, needle):
    assert_one_line_error(run_tool("commbench", "compare", *args, timeout=60), needle)


def test_plot_with_json_output_and_no_records_file(tmp_path):
    """--plot works with every --format; --out /dev/null means no file; the records still come back."""
    plot = tmp_path / "p.png"
    proc = run_tool("commbench", "compare", "--strategies", "ring,rs-ag", "--nproc-per-node", 2, "-b", "4K",
                    "-e", "16K", "-f", 4, "-n", 2, "-w", 1, "--repeats", 2, "--format", "json", "--plot", plot,
                    "--out", "/dev/null")
    assert proc.returncode == 0, proc.stderr
    printed = [json.loads(line) for line in proc.stdout.splitlines()]
    assert all(not schema.problems(r) for r in printed)
    measured = [r for r in printed if not r.get("event")]
    assert [(r["strategy"], r["phase"], r["repeat"]) for r in measured[:8]] == [  # repeat 1 starts one config later
        ("ring", "total", 0), ("rs-ag", "reduce_scatter", 0), ("rs-ag", "all_gather", 0), ("rs-ag", "total", 0),
        ("rs-ag", "reduce_scatter", 1), ("rs-ag", "all_gather", 1), ("rs-ag", "total", 1), ("ring", "total", 1)]
    assert len(measured) == 16 and all(r["wrong"] == 0 for r in measured)
    assert {r["event"] for r in printed if r.get("event")} == {"verdict"}
    assert plot.stat().st_size > 10_000
