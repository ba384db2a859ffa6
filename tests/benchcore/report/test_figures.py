"""Every plot draws the same way (issue 39 item 8), checked on the matplotlib objects: size axes read 1K/1M/1G,
thresholds are labelled dashed lines on the axis they bound (commbench's and storage's alike), repeats are one
line with min-max error bars, phases are separate labelled series, legends sit outside the axes, bars carry their
values on a linear axis (iobench --plot), and the pairs heat map writes each cell's number."""
import math

from matplotlib.colors import to_hex
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.transforms import Bbox

from benchcore.report import figures, plots
from iobench.output import bar_figure
from tests.benchcore.report.test_labels import PHASES, SIZES, io, rsag

RED_DASHED = ("--", to_hex("tab:red"))


def drawn(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def size_ticks(ax):
    """The size tick labels inside the axes' view."""
    low, high = ax.get_xlim()
    return [t.get_text() for t in ax.get_xticklabels() if t.get_text() and low <= t.get_position()[0] <= high]


def errorbars(ax):
    return {c.get_label(): c for c in ax.containers if isinstance(c, ErrorbarContainer)}


def thresholds(ax):
    return {ln.get_label(): (ln.get_linestyle(), to_hex(ln.get_color())) for ln in ax.get_lines()
            if ln.get_label().startswith("threshold: ")}


def test_report_plot_sizes_phases_repeats_and_thresholds():
    fig = plots.busbw_figure("rs-ag", rsag(repeats=3), [], [("time_us", "time <= 2 ms at 1M", [(1 << 20, 2000.0)])])
    drawn(fig)
    busbw, large, time = fig.axes                # large: the largest sizes' busbw on a linear axis
    assert large.get_yscale() == "linear" and busbw.get_yscale() == "log"
    assert "(median, bars: min-max of repeats)" in busbw.get_title()           # 3 repeats: the bars say something
    for ax in (busbw, large, time):
        assert size_ticks(ax) == ["256K", "512K", "1M", "2M", "4M"]            # not 2^18 ... 2^22
        assert ax.get_xlabel() == "size (bytes; 1K = 1024)"
        bars = errorbars(ax)
        assert sorted(bars) == sorted(f"{p} in-place float32" for p in PHASES)  # one line per phase, repeats pooled
        for container in bars.values():
            low, high = container.lines[2][0].get_segments()[0][:, 1]            # the first size's bar: min to max
            assert high > low and list(container.lines[0].get_xdata()) == list(SIZES)
    assert thresholds(time) == {"threshold: time <= 2 ms at 1M": RED_DASHED} and thresholds(busbw) == {} == \
        thresholds(large)
    assert "threshold: time <= 2 ms at 1M" in [t.get_text() for t in time.texts]   # labelled on the plot too


def test_storage_thresholds_are_drawn_the_same_way_and_bars_say_their_values():
    fig = plots.storage_figure([io("/mnt/a", 900.0, 300.0), io("/mnt/b", 6.5, 310.0)], [],
                               [(0, "shard-write MB/s >= 800", 800.0), (1, "P99 <= 2 ms", 2000.0)])
    drawn(fig)
    bandwidth, latency = fig.axes
    assert thresholds(bandwidth) == {"threshold: shard-write MB/s >= 800": RED_DASHED}
    assert thresholds(latency) == {"threshold: P99 <= 2 ms": RED_DASHED}
    assert bandwidth.get_yscale() == "linear"
    texts = [t.get_text() for t in bandwidth.texts]
    assert "900" in texts and "6.5" in texts and "threshold: shard-write MB/s >= 800" in texts


def test_line_plots_pool_repeats_into_bars_and_keep_the_legend_outside():
    series = {"ring": [(1 << 10, 10.0), (1 << 10, 14.0), (1 << 20, 100.0), (1 << 20, 120.0)],
              "rs-ag": [(1 << 10, 20.0), (1 << 20, 90.0)]}
    fig = figures.line_figure(series, "payload", "time (us)", "commbench chunked: time", log_y=True)
    renderer = drawn(fig)
    (ax,) = fig.axes
    assert ax.get_title() == "commbench chunked: time" and size_ticks(ax)[0] == "1K" and "1M" in size_ticks(ax)
    ring = errorbars(ax)["ring"]
    assert list(ring.lines[0].get_ydata()) == [12.0, 110.0]                  # medians; bars 10-14 and 100-120
    assert [tuple(seg[:, 1]) for seg in ring.lines[2][0].get_segments()] == [(10.0, 14.0), (100.0, 120.0)]
    legend = ax.get_legend().get_window_extent(renderer)
    assert not Bbox.intersection(legend, ax.get_window_extent(renderer))       # beside the axes, not over them


def test_iobench_bars_are_linear_and_labelled_so_a_small_profile_is_not_zero(tmp_path):
    recs = [{"profile": p, "mount": "/nvme", "bw_mbps": bw, "lat_p99_us": lat}
            for p, bw, lat in (("shard-write", 3000.0, 210764.0), ("metadata", 6.68, None))]
    fig = bar_figure(recs, title="iobench ckpt r1")
    drawn(fig)
    bandwidth, latency = fig.axes
    assert bandwidth.get_yscale() == latency.get_yscale() == "linear"
    assert [t.get_text() for t in bandwidth.texts] == ["3,000", "6.68"]
    assert [t.get_text() for t in latency.texts] == ["210,764", "", "n/a"]    # no P99: said, not drawn as 0
    assert fig._suptitle.get_text().startswith("iobench ckpt r1: ")
    assert all(isinstance(c, BarContainer) for c in bandwidth.containers)
    assert math.isnan(latency.containers[0].patches[1].get_height())
