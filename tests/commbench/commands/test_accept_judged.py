"""The acceptance report draws what `commbench judge` computes for a check's records on its topology, as `commbench
report --topology` draws it (issue 49 items 4 and 8): the model per algorithm, the link peak util is over, the
published references with their sources (or "no published reference for this topology"), the large messages'
busbw on a linear axis, util/ceiling/model/judged columns and the judge's verdict; threshold labels inside their
axes; sizes that are no whole unit read 21.4M. Real public logs (tests/fixtures/gpu_logs/SOURCES.md) are a check's
records, written by accept's own report writer (outputs._report) and read in Chromium: nothing is launched (the
accept runs of test_accept.py measure on Gloo, which judge does not judge; their report says so, checked there)."""
from matplotlib.container import ErrorbarContainer

from benchcore.report import figures, plots
from benchcore.results import read, schema, thresholds
from commbench.commands.accept import outputs
from commbench.commands.accept.command import Result, judge
from commbench.commands.accept.spec import load_spec
from tests.browser import render
from tests.conftest import ROOT

LOGS = ROOT / "tests" / "fixtures" / "gpu_logs"
A3 = LOGS / "h100-2node-gcp-a3mega.md"
P5 = LOGS / "h100-1node-aws-p5-batch-all_reduce.log"
SPEC = """{top}
checks:
  - name: ar
    kind: commbench
    collective: all_reduce
    nodes: {nodes}
    nproc_per_node: 8
    thresholds:
      - busbw >= 300 GB/s at >= 4G
      - time <= 100 us at 8
"""


def report(tmp_path, monkeypatch, log, topology, nodes, fix=dict):
    """Accept's report of log's records as the check 'ar' on topology (None: the spec names none): (what Chromium
    read of report.html, the busbw figure drawn, report.md's text)."""
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(SPEC.format(top=f"topology: {topology}" if topology else "", nodes=nodes))
    spec = load_spec(spec_path)
    recs = [dict(r, accept_check="ar") if r.get("event") else fix(dict(r, accept_check="ar"))
            for r in read.load(str(log)).records]
    drawn = []

    def spied(*args):            # the figure accept's report draws, kept to read its lines and labels
        drawn.append(busbw_figure(*args))
        return drawn[-1]
    busbw_figure = plots.busbw_figure
    monkeypatch.setattr(plots, "busbw_figure", spied)
    (tmp_path / "out").mkdir()
    outputs._report(tmp_path / "out", spec, [judge(Result(spec.checks[0], [], recs), None)], recs, [], "PASS", [],
                    None)
    (fig,) = drawn
    fig.canvas.draw()
    return render(tmp_path / "out" / "report.html", tmp_path), fig, (tmp_path / "out" / "report.md").read_text()


def labels(ax):
    return {ln.get_label() for ln in ax.get_lines()}


def test_a_check_on_a_topology_without_references_draws_the_judges_model_and_link_peak(tmp_path, monkeypatch):
    seen, fig, md = report(tmp_path, monkeypatch, A3, "gcp-a3-mega", 2)
    log, large, time = fig.axes
    assert log.get_yscale() == "log" and large.get_yscale() == "linear"
    assert large.get_title() == "all_reduce: busbw from 128M (linear)"
    for ax in (log, large):      # the same lines report --topology draws for this file
        assert {f"model {a} (gcp-a3-mega; as judge)" for a in ("Ring", "Tree", "NVLSTree")} <= labels(ax)
        assert "link peak: NVLSTree 375 GB/s busbw (gcp-a3-mega, datasheet; util is over it)" in labels(ax)
        assert "threshold: busbw >= 300 GB/s at >= 4G" in labels(ax)
    assert large.get_ylim()[1] >= 375
    for ax in fig.axes:          # every threshold label inside its axes (the 8 B one crossed the left edge)
        box = ax.get_window_extent()
        marks = [t for t in ax.texts if t.get_gid() == figures.LABEL]
        assert all(box.x0 <= t.get_window_extent().x0 and t.get_window_extent().x1 <= box.x1 for t in marks)
    assert [t.get_text() for t in time.texts] == ["threshold: time <= 100 us at 8"]
    (caption,) = seen["figcaptions"]
    assert "busbw from 128M on a linear axis; dotted: the model per algorithm on gcp-a3-mega, dash-dot: the link " \
           "peak util is over (as commbench judge); no published reference for this topology" in caption
    said = [p for p in seen["paragraphs"] if "judge" in p]
    assert said[0] == ("commbench judge on gcp-a3-mega (as report --topology; drawn and tabled, not a threshold of "
                       "this check): verdict: every judged measurement is what gcp-a3-mega delivers")
    assert "judge: no published reference for this topology (gcp-a3-mega): the levels are the model's" in said
    table = next(t for t in seen["tables"] if t["caption"].startswith("commbench: all_reduce"))
    assert table["headers"][-4:] == ["util", "of ceiling", "model GB/s per algorithm", "judged"]
    col = {h: i for i, h in enumerate(table["headers"])}
    row = next(r for r in table["rows"] if r[col["size"]] == "8G" and r[col["place"]] == "out")
    assert row[col["of ceiling"]] == "NVLSTree 375" and row[col["judged"]] == "nvls"
    assert "dotted: the model per algorithm on gcp-a3-mega" in md


def test_published_references_are_drawn_with_their_sources(tmp_path, monkeypatch):
    """The p5 log, whose device list does not say its layout, with what its source says (8 GPUs on 1 node)."""
    seen, fig, _ = report(tmp_path, monkeypatch, P5, "dgx-h100", 1, lambda r: dict(r, world_size=8, nodes=1))
    large = fig.axes[1]
    refs = {c.get_label() for c in large.containers if isinstance(c, ErrorbarContainer)}
    assert {"published Ring 365-370 GB/s at 4G [1]", "published NVLS 480 GB/s at 16G [2]"} <= refs
    (caption,) = seen["figcaptions"]
    assert "[2] https://github.com/NVIDIA/nccl-tests/issues/212 (2024-05-06)" in caption
    assert "no published reference" not in caption


def test_a_check_of_no_topology_says_what_one_would_draw(tmp_path, monkeypatch):
    seen, fig, _ = report(tmp_path, monkeypatch, A3, None, 2)
    assert not any(label.startswith(("model ", "link peak")) for ax in fig.axes for label in labels(ax))
    assert "no topology (the spec's or the check's): no model, link peak or published reference drawn" in \
        seen["paragraphs"]


def test_a_size_that_is_no_whole_unit_reads_as_a_person_reads_it_in_a_thresholds_message():
    rec = schema.measurement("commbench", run_id="r", collective="all_reduce", size_bytes=22484704, count=5621176,
                             dtype="float32", op="sum", in_place=False, time_us=100.0, world_size=2, nodes=1,
                             algbw_gbps=0.2, busbw_gbps=0.2, wrong=0)
    outcome = thresholds.judge(thresholds.parse("busbw >= 1 GB/s", "commbench"), [rec])
    assert "expected >= 1 GB/s at 21.4M (22,484,704 B) (all_reduce 21.4M (22,484,704 B) float32" in outcome.message
    assert "22484704" not in outcome.message
