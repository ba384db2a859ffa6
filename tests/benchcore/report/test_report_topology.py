"""`commbench report --topology` shows what `judge` computes for the same file (issue 49 item 4): the model per
algorithm, the link peak util is over and the published references with their sources, in the plots and in util,
ceiling, model and class columns; the large messages' busbw on a linear axis beside the log one; values with the
decimals they were measured with; captions true to the data. On real public logs (tests/fixtures/gpu_logs/
SOURCES.md): the 2-node A3 Mega log (a topology without references) and the p5 log (references on dgx-h100)."""
import json

import pytest
from matplotlib.container import ErrorbarContainer

from benchcore.report import judged as judged_rows
from benchcore.report import plots
from benchcore.results import read
from commbench.commands.judge import report_verdict
from tests.browser import render
from tests.conftest import ROOT, run_tool

LOGS = ROOT / "tests" / "fixtures" / "gpu_logs"
A3 = LOGS / "h100-2node-gcp-a3mega.md"
P5 = LOGS / "h100-1node-aws-p5-batch-all_reduce.log"


def figure(records, topology):
    """The busbw figure report --topology draws, built as the report builds it (the judge hook's events)."""
    recs = read.measurements(records)
    rows = judged_rows.of_group(judged_rows.rows_of(report_verdict(records, topology)), recs)
    fig = plots.busbw_figure("all_reduce", recs, [], (), rows)
    fig.canvas.draw()
    return fig, rows


def labels(ax):
    return {ln.get_label(): ln for ln in ax.get_lines()}


def p5_records():
    """The p5 log, whose device list does not say its layout, with what its source says (8 GPUs on 1 node)."""
    return [r if r.get("event") else dict(r, world_size=8, nodes=1) for r in read.load(str(P5)).records]


def test_the_plot_draws_the_judges_model_link_peak_and_a_linear_view_of_the_qualifying_region():
    fig, rows = figure(read.load(str(A3)).records, "gcp-a3-mega")
    log, large, time = fig.axes
    assert log.get_yscale() == "log" and large.get_yscale() == "linear" and time.get_ylabel() == "time (us)"
    for ax in (log, large):      # the same model and link peak judge uses, labelled with the topology
        named = labels(ax)
        for algo in ("Ring", "Tree", "NVLSTree"):
            assert f"model {algo} (gcp-a3-mega; as judge)" in named, sorted(named)
        peak = named["link peak: NVLSTree 375 GB/s busbw (gcp-a3-mega, datasheet; util is over it)"]
        assert set(peak.get_ydata()) == {375.0}
    nvls = labels(large)["model NVLSTree (gcp-a3-mega; as judge)"]
    assert min(nvls.get_xdata()) == 128 << 20 and max(nvls.get_ydata()) == pytest.approx(
        max(r["model_gbps"]["NVLSTree"] for r in rows))
    low, high = large.get_xlim()         # the region that qualifies a cluster: 128M-8G, 100-375 GB/s
    assert low <= 128 << 20 and high >= 8 << 30 and large.get_ylim()[0] <= 100 and large.get_ylim()[1] >= 375
    y = large.transData.transform([(1 << 30, 300.0), (1 << 30, 338.0)])[:, 1]
    assert y[1] - y[0] > 20          # 300 and 338 GB/s at least 20 pixels apart (on the log axis: a few)
    for ax in (log, time):           # a log with no repeats: no error-bar caption
        assert "no repeats, no bars" in ax.get_title() and "min-max" not in ax.get_title()
    assert large.get_title() == "all_reduce: busbw from 128M (linear)"


def test_published_references_are_drawn_with_their_sources_numbered_in_the_caption():
    fig, rows = figure(p5_records(), "dgx-h100")
    large = fig.axes[1]
    refs = {c.get_label(): c for c in large.containers if isinstance(c, ErrorbarContainer)
            and c.get_label().startswith("published")}
    caption = judged_rows.caption(rows)
    assert "published NVLS 480 GB/s at 16G [2]" in refs and "published threshold >= 460 GB/s at 16G [3]" in refs
    assert list(refs["published Ring 365-370 GB/s at 4G [1]"].lines[0].get_xdata()) == [4 << 30]
    assert "[2] https://github.com/NVIDIA/nccl-tests/issues/212 (2024-05-06)" in caption
    assert "triangles: a provider's pass mark" in caption and large.get_ylim()[1] >= 700


def test_the_report_page_in_a_browser_has_the_judges_columns_measured_precision_and_true_captions(tmp_path):
    done = run_tool("commbench", "report", A3, "--topology", "gcp-a3-mega", "--out", tmp_path / "rep")
    assert done.returncode == 0, done.stderr
    seen = render(tmp_path / "rep" / "report.html", tmp_path)
    (table,) = seen["tables"]
    assert table["headers"][-4:] == ["util", "of ceiling", "model GB/s per algorithm", "judged"]
    assert table["caption"].endswith("util, of ceiling, model and judged: commbench judge's, of each size's busbw as "
                                     "judge takes it (the median of its records: out-of-place and in-place alike)")
    col = {h: i for i, h in enumerate(table["headers"])}
    row = next(r for r in table["rows"] if r[col["size"]] == "8G" and r[col["place"]] == "out")
    # the log's row: 47535 us, 180.71 and 338.82 GB/s (2 decimals, as printed: not padded to 4)
    assert [row[col["time us"]], row[col["algbw GB/s"]], row[col["busbw GB/s"]]] == ["47535", "180.71", "338.82"]
    verdict = json.loads(run_tool("commbench", "judge", A3, "--topology", "gcp-a3-mega", "--format", "json").stdout)
    judged_8g = next(r for r in verdict["rows"] if r["size"] == "8G")
    assert row[col["util"]] == f"{judged_8g['link_utilization']:.2f}" and row[col["judged"]] == "nvls"
    assert row[col["of ceiling"]] == "NVLSTree 375" and row[col["model GB/s per algorithm"]] == judged_8g["model"]
    (caption,) = seen["figcaptions"]
    assert "busbw from 128M on a linear axis" in caption and "dotted: the model per algorithm on gcp-a3-mega" in \
        caption and "no published reference for this topology" in caption
    assert seen["images"][0][1] > 1500         # three panels drawn
    assert any(n.startswith("verdict: every judged measurement is what gcp-a3-mega delivers") for n in seen["notes"])
    assert "judge: not judged, all_reduce 16 ranks on 2 nodes: 32M to 2G (7 sizes; the largest: 1G at 0.88 of the " \
           "best, 2G at 0.94 of the best): the busbw still rises: under 0.95 of the best measured, 338.1 GB/s at 8G " \
           "(judged from 321.2 GB/s)" in seen["notes"]
    assert "judge: no published reference for this topology (gcp-a3-mega): the levels are the model's" in seen["notes"]


def test_verdict_rows_read_back_from_a_file_are_checked_before_they_are_drawn(tmp_path):
    """A verdict file handed to report is read like any file: a row whose figures are not of their types is left
    out, a NaN model value dropped, a text cut; the report is written, never a traceback."""
    records = read.load(str(A3)).records
    good = report_verdict(records, "gcp-a3-mega")[0]
    bad = dict(good, topology="t" * 5000, rows=[dict(good["rows"][-1], model_gbps={"Ring": float("nan"), "NVLS": 1.0},
                                                      references=[{"low": 1, "high": 2, "size_bytes": 1 << 30,
                                                                   "source": "s" * 5000}])]
               + [dict(good["rows"][0], size_bytes="8"), dict(good["rows"][1], references=[{"low": "x"}]), "junk"])
    rows = judged_rows.rows_of([bad])
    (row,) = rows.values()
    assert row["model_gbps"] == {"NVLS": 1.0} and len(row["topology"]) == len(row["references"][0]["source"]) == 200
    verdicts = tmp_path / "verdict.jsonl"
    verdicts.write_text(json.dumps(bad, allow_nan=True) + "\n")
    done = run_tool("commbench", "report", A3, verdicts, "--out", tmp_path / "rep")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
