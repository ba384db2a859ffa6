"""Figures a user can act on (issue 25): sizes rounded as nccl-tests rounds them, what was requested kept in the
records, tables that fit 100 columns when piped. (MPI's out-of-place reductions: tests/commbench/transports.)"""
import io
from contextlib import redirect_stdout

import pytest

from commbench.commands import verdict
from commbench.commands.compare import payload_rows, print_compare
from commbench.output.nccltests import nccl_tests_text
from tests.conftest import read_records, run_tool

PIPE_WIDTH = 100   # issue 25: tables piped to a file fit 100 columns


def widest(text):
    """The widest line of the tables in text (lines of text, '# ...' and 'note: ...', are never wrapped)."""
    return max(len(line) for line in text.splitlines() if not line.startswith(("#", "note:")))


@pytest.mark.slow
def test_sizes_round_down_as_nccl_tests_does_and_the_records_say_what_ran(tmp_path):
    """all_gather on 2 ranks takes multiples of 8 B (2 x float32): -b 4 -e 1K -f 9 runs 32 and 320 for 36 and
    324, and skips 4 (one note says so); all_reduce runs every size as asked. The records keep -b/-e/-f and each
    requested size, --format nccl-tests prints minBytes/maxBytes as requested (1024, not 324), and the tables
    piped to a file fit 100 columns."""
    out = tmp_path / "r.jsonl"
    proc = run_tool("commbench", "run", "--collective", "all_gather,all_reduce", "--nproc-per-node", 2, "-b", 4,
                    "-e", "1K", "-f", 9, "-n", 2, "-w", 1, "--out", out, env={"COLUMNS": ""})
    assert proc.returncode == 0, proc.stderr
    recs = read_records(out)
    ran = {(r["collective"], r["requested_bytes"], r["size_bytes"], r["in_place"]) for r in recs}
    assert ran == {("all_gather", asked, asked - asked % 8, place) for asked in (36, 324) for place in (False, True)} \
        | {("all_reduce", asked, asked, True) for asked in (4, 36, 324)}
    for rec in recs:
        assert rec["wrong"] == 0 and rec["count"] * 4 == rec["size_bytes"], rec
        assert (rec["min_bytes"], rec["max_bytes"], rec["step_factor"]) == (4, 1024, 9)
    notes = [line for line in proc.stderr.splitlines() if "rounded down" in line]
    assert len(notes) == 1 and "all_gather: multiples of 8 B, 4 B is below and skipped" in notes[0], proc.stderr
    assert widest(proc.stdout) <= PIPE_WIDTH and "\u2026" not in proc.stdout, proc.stdout   # piped: not a terminal
    text = nccl_tests_text(recs)
    assert text.count("# nThread 1 nGpus 1 minBytes 4 maxBytes 1024 step: 9(factor)") == 2, text
    gathered = text.split("all_gather_perf")[1]
    assert [line.split()[:2] for line in gathered.splitlines() if line and not line.startswith("#")] == \
        [["32", "4"], ["320", "40"]]   # the size run; nccl-tests' count column: the per-rank piece


def compare_record(strategy, time_us, repeat, **cfg):
    return {"tool": "commbench", "case": strategy, "strategy": strategy, "phase": "total", "size_bytes": 1 << 20,
            "world_size": 2, "nodes": 1, "dtype": "float32", "op": "sum", "in_place": True, "backend": "gloo",
            "time_us": time_us, "busbw_gbps": 0.3, "link_utilization": 0.38, "predicted_time_us": 1810.7,
            "wrong": 0, "repeat": repeat, "run_id": "r", **cfg}


def test_compares_table_piped_fits_100_columns_with_every_figure_whole(monkeypatch):
    """compare's default strategies as a pipe gets them (it was 124 columns wide at a console of 200)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    recs = [compare_record(s, t, i) for s, times in (("ring", (3526.5, 4009.3)), ("rs-ag", (7884.6, 6446.6)),
                                                        ("plain", (4179.8, 2654.7))) for i, t in enumerate(times)]
    recs += [compare_record("chunked", t, i, chunk_bytes=2 << 20, threshold_bytes=16 << 20, inflight=1)
             for i, t in enumerate((2975.2, 7225.4))]
    printed = io.StringIO()
    with redirect_stdout(printed):
        print_compare(recs)
    text = printed.getvalue()
    assert widest(text) <= PIPE_WIDTH and "\u2026" not in text, text
    assert "0 wrong" in text and "#wrong" not in text   # every row exact: said once, in the title
    rows = payload_rows(recs, verdict.judge(recs), "ring")[1 << 20]
    for row in rows:   # every name, time and speed-up on one line, none wrapped
        assert any(row["label"] in line and f"{row['time_us']:.1f}" in line and row["vs"] in line
                   for line in text.splitlines()), (row, text)
    assert {r["vs"].split()[-1] for r in rows if r["vs"]} == {"slower", "same", "work)"}
