"""overlap's figure as the user sees it (issue 49 item 3): the figure's title and panel (a)'s title do not print on
top of each other (their bounding boxes, from matplotlib's renderer, are apart), and one stall far above the rest is
clipped at the top of panel (a) and said in its title, so the other lines keep their height."""
import pytest

from commbench.cases.case import TOTAL
from commbench.commands.overlap import overlap_figure

pytest.importorskip("matplotlib")
SIZES = [1 << 20, 2 << 20, 4 << 20, 8 << 20]


# one traced iteration of 2 ranks (4 kernels, 4 operations each): with eight configs, eight timeline panels (b)
# below (a); tight_layout then put the figure's title over (a)'s
TIMELINE = [[{"what": "kernel", "step": i, "start_us": i * 100.0, "end_us": i * 100 + 80.0} for i in range(4)]
            + [{"what": "comm", "step": i, "start_us": i * 100 + 80.0, "end_us": i * 100 + 150.0}
               for i in range(4)]] * 2


def total(label, size, exposed, **cfg):
    buckets = {"case": "ddp", "buckets": int(label)}
    return {**buckets, "compute_ratio": 1.0, "gemm": None, "compute_kernel": "gemm", "dtype": "float32",
            "phase": TOTAL, "size_bytes": size, "exposed_comm_us": exposed, "comm_us": 2 * exposed, **cfg}


def boxes(fig):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    return fig._suptitle.get_window_extent(renderer), fig.axes[0].title.get_window_extent(renderer), renderer


def test_the_titles_are_apart_and_an_outlier_is_clipped_and_said():
    # eight lines of 1,000-11,000 us, as the run drew them
    records = [total(b, s, 1000.0 * (j + 1) + 500 * i + r, timeline=TIMELINE)
               for j, b in enumerate((1, 2, 4, 8, 16, 32, 64, 128)) for i, s in enumerate(SIZES) for r in (0, 50)]
    records.append(total(4, 4 << 20, 420_000.0))   # one stalled repeat
    fig = overlap_figure(records)
    assert len(fig.axes) == 9   # (a) and eight timelines
    sup, panel, renderer = boxes(fig)
    assert not sup.overlaps(panel), (sup, panel)
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    assert high < 420_000 / 3, high           # the stall does not set the scale: the rest keep their height
    assert 8000 + 1500 + 50 <= high            # every other value still shows
    title = ax.get_title()
    assert "1 value(s) above" in title and "clipped" in title and "420,000 us: ddp B=4 R=1 at 4M" in title, title
    # the clipped point is drawn at the top edge (a triangle), inside the figure
    tops = [line for line in ax.get_lines() if line.get_marker() == "^"]
    assert tops and all(y == high for line in tops for y in line.get_ydata())
    # every text of the figure lies apart from every other (titles, labels), the legend beside the axes included
    texts = [t for t in [fig._suptitle, ax.title, ax.xaxis.label, ax.yaxis.label] if t.get_text()]
    extents = [t.get_window_extent(renderer) for t in texts]
    for i, a in enumerate(extents):
        for b in extents[i + 1:]:
            assert not a.overlaps(b), (a, b)


def test_nothing_clipped_where_no_value_stands_out():
    records = [total(b, s, 1000.0 * b + r) for b in (1, 4) for s in SIZES for r in (0, 30)]
    fig = overlap_figure(records)
    sup, panel, _ = boxes(fig)
    assert not sup.overlaps(panel)
    assert "clipped" not in fig.axes[0].get_title()
    assert fig.axes[0].get_ylim()[1] >= 4030
