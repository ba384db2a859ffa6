"""commbench's own plots (issue 39 item 8): the overlap plot's legend beside its axes (it covered the title), its
sizes 1M/2M/4M and repeats as bars; the pairs heat map's numbers in its cells; a plot titled after the command
that ran (chunked's said "commbench compare").

overlap-ddp-pipelined-gloo.jsonl: the total records of `commbench overlap --patterns ddp,pipelined --compute-ratio 1
-b 1M -e 4M` on this machine (2 Gloo ranks, 3 repeats), the timelines of the first repeat at 4M kept."""
import json
from pathlib import Path

from matplotlib.container import ErrorbarContainer
from matplotlib.transforms import Bbox

from commbench.commands.overlap import overlap_figure
from commbench.commands.pairs import matrix_figure
from tests.conftest import run_tool

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "overlap-ddp-pipelined-gloo.jsonl"


def test_overlap_plot_has_its_legend_beside_the_axes_and_repeats_as_bars():
    recs = [json.loads(line) for line in FIXTURE.read_text().splitlines()]
    fig = overlap_figure(recs, "chunked --overlap")
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    exposed = fig.axes[0]
    assert fig._suptitle.get_text().startswith("commbench chunked --overlap: ")
    low, high = exposed.get_xlim()
    assert [t.get_text() for t in exposed.get_xticklabels() if low <= t.get_position()[0] <= high] == \
        ["1M", "2M", "4M"]
    bars = [c for c in exposed.containers if isinstance(c, ErrorbarContainer)]
    assert sorted(c.get_label() for c in bars) == ["ddp B=4 R=1", "pipelined 2048K x1 R=1"]
    legend = exposed.get_legend().get_window_extent(renderer)
    for what in (exposed, exposed.title, fig._suptitle):
        assert not Bbox.intersection(legend, what.get_window_extent(renderer)), what
    assert len(fig.axes) == 3              # (b): one timeline per pattern config


def test_pairs_heat_map_writes_each_cells_number():
    links = {("vm:0", "vm:1"): 0.211, ("vm:0", "vm:2"): 0.528, ("vm:1", "vm:2"): 0.327}   # a 3-node run here
    recs = [{"collective": "sendrecv", "host": a, "peer_host": b, "busbw_gbps": bw, "round": 0}
            for (a, b), bw in links.items()]
    fig = matrix_figure(recs)
    cells = {(round(t.get_position()[1]), round(t.get_position()[0])): t.get_text() for t in fig.axes[0].texts}
    assert cells == {(0, 0): "-", (0, 1): "0.211", (0, 2): "0.528", (1, 0): "0.211", (1, 1): "-",
                     (1, 2): "0.327", (2, 0): "0.528", (2, 1): "0.327", (2, 2): "-"}
    assert fig.axes[0].get_title().startswith("commbench pairs: ")


def test_chunked_plot_is_titled_chunked_with_sizes_in_binary_units(tmp_path):
    plot = tmp_path / "chunks.svg"                      # matplotlib's SVG keeps each text as a comment
    proc = run_tool("commbench", "chunked", "--nproc-per-node", 2, "-b", "4K", "-e", "16K", "-f", 4, "-n", 2,
                    "-w", 1, "--repeats", 2, "--threshold", "8K", "--chunk-size", "4K", "--out", "/dev/null",
                    "--plot", plot)
    assert proc.returncode == 0, proc.stderr
    svg = plot.read_text()
    assert "<!-- commbench chunked: " in svg and "commbench compare" not in svg
    assert "<!-- 4K -->" in svg and "<!-- 16K -->" in svg and "2^" not in svg
