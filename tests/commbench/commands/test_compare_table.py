"""compare's table: a group of configs that run the same operations shows its pooled speed-up once (its other
members point at it), and a row's name is never wrapped or cut, however narrow the terminal."""
import io
from contextlib import redirect_stdout

from rich.console import Console

from benchcore.report.render import print_table
from benchcore.results import stats
from commbench.commands import verdict
from commbench.commands.compare import payload_rows, print_compare


def rec(strategy, time_us, repeat, **cfg):
    return {"tool": "commbench", "case": strategy, "strategy": strategy, "phase": "total", "size_bytes": 1 << 20,
            "world_size": 2, "nodes": 1, "dtype": "float32", "op": "sum", "in_place": True, "backend": "gloo",
            "time_us": time_us, "busbw_gbps": 1.0, "wrong": 0, "repeat": repeat, "run_id": "r", **cfg}


def test_a_groups_speed_up_is_shown_once():
    """chunked at or below its threshold runs plain's one all_gather: one group, one figure (it was copied onto
    both rows, each with the group's pooled ratio)."""
    chunked = dict(chunk_bytes=256 << 10, threshold_bytes=16 << 20, inflight=1)
    recs = [rec("ring", t, i) for i, t in enumerate((200.0, 210.0))]
    recs += [rec("plain", t, i) for i, t in enumerate((100.0, 104.0))]
    recs += [rec("chunked", t, i, **chunked) for i, t in enumerate((150.0, 156.0))]
    outcomes = verdict.judge(recs)
    assert [g.labels for g in outcomes[0].groups] == [["plain", "chunked 256K x1 >16M"], ["ring"]]
    rows = {r["label"]: r["vs"] for r in payload_rows(recs, outcomes, "ring")[1 << 20]}
    assert rows["ring"] == ""
    pooled = stats.ratio_interval([200.0, 210.0], [100.0, 104.0, 150.0, 156.0])
    assert rows["plain"] == f"{pooled.ratio:.2f} [{pooled.low:.2f}, {pooled.high:.2f}] faster"
    assert rows["chunked 256K x1 >16M"] == "= plain (same work)"


def test_a_rows_name_never_wraps_mid_name():
    columns = [("label", "strategy", None), ("time_us", "time us", ".1f"), ("spread", "spread %", ".1f"),
               ("busbw_gbps", "busbw GB/s", ".3f"), ("vs", "speed-up vs ring [95% CI]", None)]
    names = ["rs-ag (reduce_scatter)", "chunked 256K x1 >16M", "ring"]
    rows = [{"label": n, "time_us": 7391.7, "spread": 106.6, "busbw_gbps": 0.025, "vs": "2.23 [1.44, 3.46] faster"}
            for n in names]
    for width in (50, 70, 120):
        console = Console(width=width, record=True, highlight=False, markup=False, soft_wrap=False)
        print_table(rows, columns, out=console)
        text = console.export_text()
        for name in names:
            assert any(f"│ {name} " in line for line in text.splitlines()), (width, text)


def test_an_interval_too_wide_to_conclude_is_said_to_be_none():
    """Issue 49 item 8: '1.59 [0.00, 11990.84]' read like a result; repeats that far apart print 'no conclusion'
    and no interval, in compare's table (its user-facing cell) and sweep's ranking; a narrow one keeps its
    numbers."""
    recs = [rec("ring", t, i) for i, t in enumerate((100.0, 9000.0))] + [rec("plain", t, i)
                                                                         for i, t in enumerate((150.0, 160.0))]
    outcomes = verdict.judge(recs)
    cell = {r["label"]: r["vs"] for r in payload_rows(recs, outcomes, "ring")[1 << 20]}["plain"]
    ratio = stats.ratio_interval([100.0, 9000.0], [150.0, 160.0])
    assert cell == f"{ratio.ratio:.2f}, no conclusion" and ratio.high / ratio.ratio > 2, cell
    printed = io.StringIO()
    with redirect_stdout(printed):
        print_compare(recs)
    text = printed.getvalue()
    assert cell in text and "[0.00," not in text
    assert ("no conclusion: the 95% interval reaches under 1/2 or over 2x its ratio: the repeats disagree too much "
            "to say either way (more repeats, a quieter machine)") in text
    narrow = stats.ratio_interval([200.0, 210.0], [100.0, 104.0])
    assert verdict.interval_text(narrow, 3) == f"{narrow.ratio:.3f} [{narrow.low:.3f}, {narrow.high:.3f}]"
