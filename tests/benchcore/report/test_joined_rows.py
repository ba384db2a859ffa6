"""report --baseline (issue 39 item 5): the table and the plots show the same joined rows, the rows diff joins. The
baseline is a real nccl-tests log format (tests/fixtures/foreign/nccl-tests-1.x.log, nccl-tests 1.x's printf formats)
whose 8-byte rows print algbw and busbw 0.00; the results are that log's rows as `commbench run` writes them (a
launcher and a topology the log does not know, 10 % slower), so they join loosely, as diff joins them."""
import json

import matplotlib
import matplotlib.pyplot

from benchcore.report import page, plots
from benchcore.results import diff, read
from tests.benchcore.results.test_diff import FOREIGN
from tests.conftest import run_tool

matplotlib.use("Agg")
LOG = FOREIGN / "nccl-tests-1.x.log"
RUN_ONLY = ("source_file", "source_format", "source_line", "check_error", "iters", "warmup", "agg_iters")


def measured():
    """(the log's records, the results): each row 10 % slower, with algbw/busbw as commbench computes them."""
    base = [r for r in read.load(str(LOG)).records if not r.get("event")]
    factor = next(r["busbw_gbps"] / r["algbw_gbps"] for r in base if r["algbw_gbps"])
    new = []
    for r in base:
        time_us = r["time_us"] * 1.1
        algbw = r["size_bytes"] / time_us / 1e3
        new.append(dict({k: v for k, v in r.items() if k not in RUN_ONLY}, run_id="new", launcher="mpirun",
                        topology="dgx-a100", time_us=time_us, algbw_gbps=algbw, busbw_gbps=algbw * factor))
    return base, new


def baseline_points(ax):
    """{size: y} of the baseline series drawn on ax (error-bar containers labelled 'baseline ...')."""
    out = {}
    for c in ax.containers:
        if c.get_label().startswith("baseline"):
            line = c.lines[0]
            out.update(zip(line.get_xdata(), line.get_ydata()))
    return out


def test_the_table_and_the_plots_show_the_rows_diff_joins_with_an_imported_0_00_baseline(tmp_path):
    base, new = measured()
    assert {r["busbw_gbps"] for r in base if r["size_bytes"] == 8} == {0.0}          # what the log prints
    lines, only_base, _ = diff.compare(base, new, 0.05)
    assert len(lines) == len(new) == 6 and not only_base                             # diff joins every row
    done = run_tool("commbench", "report", _write(tmp_path / "new.jsonl", new), "--baseline", LOG,
                    "--out", tmp_path / "rep", timeout=120)
    assert done.returncode == 0, done.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    head = next(ln for ln in md.splitlines() if ln.startswith("| size |"))
    assert head.endswith("| baseline time us | baseline busbw GB/s | new/baseline |"), head
    cells = [[c.strip() for c in ln.strip("|").split("|")] for ln in md.splitlines() if ln.startswith("| 8 |")]
    assert len(cells) == 2 and all("n/a" not in row[-3:] for row in cells), cells     # the log's 0.00 rows too
    assert "2 imported rows printed algbw/busbw 0.00" in md
    rows, drawn, drawn_base = page.compared(new, base)
    table = [r for sec in page.sections(rows) for _, _, data in sec.tables for r in data]
    assert len(table) == 6 and all(r["baseline_time_us"] and r["baseline_busbw_gbps"] for r in table)
    assert all(abs(r["vs_baseline"] - 1.1) < 1e-9 for r in table)
    eight = [r for r in table if r["size_bytes"] == 8]
    # 8 B / 34 us x the log's bus factor (busbw / algbw of its other rows, 1.75 to 2 decimals): 1.1 x new's busbw
    assert len(eight) == 2 and all(abs(r["baseline_busbw_gbps"] / 1.1 / r["busbw_gbps"] - 1) < 2e-3 for r in eight)
    fig = plots.busbw_figure("all_reduce", drawn, drawn_base)
    busbw_ax, time_ax = fig.axes[0], fig.axes[-1]     # between them: the large sizes' busbw, linear
    for ax, field in ((busbw_ax, "baseline_busbw_gbps"), (time_ax, "baseline_time_us")):
        drawn_at = baseline_points(ax)
        assert sorted(drawn_at) == sorted({r["size_bytes"] for r in table}), field
        for r in table:      # in- and out-of-place are one line each: the point is one of the two rows' values
            assert any(abs(drawn_at[r["size_bytes"]] - t[field]) < 1e-9 * t[field] for t in table
                       if t["size_bytes"] == r["size_bytes"]), (field, r["size_bytes"])
    matplotlib.pyplot.close(fig)


def _write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path
