"""How every plot of both tools draws (matplotlib, Agg): size axes in nccl-tests' units (1K, 1M, 1G), a series'
repeats as one line through their median with min-max error bars, thresholds as labelled dashed lines on the axis
of the field they bound, legends beside the axes (never over the data or the title), the values written on bars,
titles that name the command. Functions that make a figure return it (tests read its matplotlib objects); save()
writes one as a new file."""
import math

from benchcore.errors import UserError, printable
from benchcore.files import write_new
from benchcore.inputs import name
from benchcore.units import format_size

THRESHOLD = dict(color="tab:red", linestyle="--", linewidth=1.2)
LABEL = "threshold-label"          # the gid of a threshold's label on the plot (labels_inside moves it)
MAX_SIZE_TICKS = 12


def pyplot():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def size_label(x, _pos=None):
    """A size tick: 1K, 64M, 1G (binary units, as nccl-tests' -b/-e); 1.5G where it is no whole unit."""
    return format_size(int(round(x)), approx=True) if x >= 1 else ""


def size_axis(ax, what="size"):
    """ax's x axis: bytes on a log-2 scale, ticked 8, 1K, 1M, 1G (at most MAX_SIZE_TICKS ticks)."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullLocator
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(LogLocator(base=2, numticks=MAX_SIZE_TICKS))
    ax.xaxis.set_major_formatter(FuncFormatter(size_label))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(f"{what} (bytes; 1K = 1024)")


def spread(ax, points, label, style="-", **kw):
    """points: [(x, y)], several y per x (repeats, cycles, runs pooled): one line through each x's median, its
    min-max as error bars; returns the ErrorbarContainer (None when no point has a y)."""
    at = {}
    for x, y in points:
        if y is not None and math.isfinite(y):
            at.setdefault(x, []).append(y)
    if not at:
        return None
    xs = sorted(at)
    mid = [_median(at[x]) for x in xs]
    low = [max(0.0, m - min(at[x])) for x, m in zip(xs, mid)]
    high = [max(0.0, max(at[x]) - m) for x, m in zip(xs, mid)]
    return ax.errorbar(xs, mid, yerr=[low, high], fmt=style, marker="o", markersize=3, capsize=3, label=label, **kw)


def _median(values):
    values = sorted(values)
    n = len(values)
    return values[n // 2] if n % 2 else (values[n // 2 - 1] + values[n // 2]) / 2


def threshold(ax, text, value=None, points=()):
    """A threshold on ax's y axis as a dashed line, labelled on the plot and in the legend: one value (storage)
    across the axes, or [(size, bound)] as a dashed line over the sizes it bounds (one size: a short stretch
    around it)."""
    label = f"threshold: {text}"
    if not points:
        line = ax.axhline(value, label=label, **THRESHOLD)
        ax.annotate(label, xy=(1, value), xycoords=("axes fraction", "data"), xytext=(-4, 3),
                    textcoords="offset points", ha="right", va="bottom", fontsize="x-small", color="tab:red")
        return line
    xs, ys = zip(*sorted(points))
    if len(xs) == 1:
        xs, ys = (xs[0] / 1.5, xs[0] * 1.5), ys * 2
    (line,) = ax.plot(xs, ys, label=label, drawstyle="steps-mid", **THRESHOLD)
    ax.annotate(label, xy=(xs[-1], ys[-1]), xytext=(-4, 3), textcoords="offset points", ha="right", va="bottom",
                fontsize="x-small", color="tab:red", gid=LABEL)
    return line


def labels_inside(fig):
    """Each threshold's label (ending at its line's right end) that would cross its axes' left edge, cut there by
    the figure's edge or drawn over the tick labels (a threshold at the smallest sizes), starts at its line's left
    end instead; the figure is drawn once to know where its texts fall (only where it has such labels)."""
    labels = [t for ax in fig.axes for t in ax.texts if t.get_gid() == LABEL]
    if not labels:
        return fig
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for text in labels:
        if text.get_window_extent(renderer).x0 < text.axes.get_window_extent(renderer).x0:
            xs = next((ln.get_xdata() for ln in text.axes.get_lines() if ln.get_label() == text.get_text()), None)
            text.xy = (min(xs), text.xy[1]) if xs is not None and len(xs) else text.xy
            text.set_horizontalalignment("left")
            text.xyann = (4, 3)
    return fig


def legend_beside(ax, **kw):
    """ax's legend to the right of the axes, outside them (save with a tight bounding box to keep it whole)."""
    if ax.get_legend_handles_labels()[1]:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0, fontsize="small", frameon=False,
                  **kw)


def bar_values(ax, bars, unit=""):
    """Each bar's value written above it (a bar a log axis or its neighbours dwarf still says what it is); a bar
    of no value (nan) is 'n/a' at the axis' foot."""
    rotate = 90 if len(bars) > 6 else 0
    ax.bar_label(bars, labels=[value_text(b.get_height()) + unit if b.get_height() == b.get_height() else ""
                               for b in bars], fontsize="x-small", padding=2, rotation=rotate)
    for b in bars:
        if b.get_height() != b.get_height():
            ax.annotate("n/a", xy=(b.get_x() + b.get_width() / 2, 0), xycoords=("data", "axes fraction"),
                        xytext=(0, 2), textcoords="offset points", ha="center", va="bottom", fontsize="x-small",
                        rotation=rotate)


def value_text(v):
    """A bar's value as a person reads it: 1,234 / 56.7 / 0.0123, never an exponent; nan (no value): n/a."""
    if v != v:
        return "n/a"
    if not v:
        return "0"
    return f"{v:,.0f}" if abs(v) >= 100 else f"{v:.3g}" if abs(v) >= 1e-4 else f"{v:.6f}".rstrip("0")


def line_figure(series, xlabel, ylabel, title, log_y=False, size_x=True):
    """series: {label: [(x, y), ...]}, an x given several times (repeats) drawn as its median and min-max bars;
    x as sizes (size_axis) unless size_x is False."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(11, 5.5))
    for label, points in series.items():
        spread(ax, points, label)
    if size_x:
        size_axis(ax, xlabel)
    else:
        ax.set_xlabel(xlabel)
    if log_y:
        ax.set_yscale("log")
    ax.set(ylabel=ylabel, title=title)
    ax.grid(True, which="both", alpha=0.3)
    legend_beside(ax)
    return fig


def printable_texts(fig):
    """Every text of fig (titles, labels, legends, ticks) through errors.printable: a record's run id or env holding
    an escape sequence draws as spaces, never as a glyph matplotlib warns it lacks."""
    from matplotlib.text import Text
    for text in fig.findobj(Text):
        shown = printable(text.get_text())
        if shown != text.get_text():
            text.set_text(shown)
    return fig


def save(fig, path, dpi=110):
    """fig as a new file at path (a --plot), in the format its suffix names, legends beside the axes kept whole;
    nothing there is replaced or followed (benchcore.files)."""
    import os
    labels_inside(printable_texts(fig))
    fmt = os.path.splitext(str(path))[1].lstrip(".").lower() or "png"
    try:
        write_new(path, lambda f: fig.savefig(f, format=fmt, dpi=dpi, bbox_inches="tight"), "--plot", binary=True)
    except OSError as exc:
        raise UserError(f"--plot {name(path)}: {exc.strerror or exc}") from None
    finally:
        pyplot().close(fig)
