"""The report's PNG plots (drawn as benchcore.report.figures draws every plot): busbw and time vs size per
collective/strategy group, and storage bars per mount and profile. Every line says what it is (run, phase,
placement, type, config) and holds its repeats (median, min-max bars); the model, the link peak and each threshold
are labelled and drawn on the axis of the field they bound; bars carry their values; legends sit outside the axes,
so they never cover data. The *_figure functions return the matplotlib Figure (tests read it)."""
import os
import re

from benchcore.errors import WriteFailed
from benchcore.files import write_new
from benchcore.inputs import name as shown_path
from benchcore.report import figures
from benchcore.report import judged as judged_rows
from benchcore.results import stats, usable
from benchcore.results.read import env_config, group_of, measurements
from benchcore.units import format_size

MAX_PLOTS = 12          # a report of 1,000 groups draws 12 plots, not 1,000 (each costs ~0.3 s and 50 KB)
MAX_SERIES = 12         # lines per side of a plot: 5,000 runs drew 5,000 lines and an 80,590-pixel-tall legend
# y axes of a commbench plot: busbw and time always, another field's panel only where a threshold bounds it
AXES = {"busbw_gbps": "busbw (GB/s)", "time_us": "time (us)", "algbw_gbps": "algbw (GB/s)"}
LARGE = "busbw_large"   # a panel: the large messages' busbw on a linear axis (the region that qualifies a cluster)
LARGE_SHARE = 64        # its sizes: from the largest measured / LARGE_SHARE up (8G: 128M-8G)
FIELD = {LARGE: "busbw_gbps"}
LATENCIES = (("lat_mean_us", "mean"), ("lat_p50_us", "P50"), ("lat_p99_us", "P99"), ("lat_p999_us", "P99.9"))
BASELINE_HATCH = "//"


def saved(directory, name, write_file, binary=False):
    """write_file(f) into the new file DIR/name (benchcore.files: nothing there is replaced or followed); an
    OSError (a full disk) is one line naming the file, whose partial copy is removed; the files written before
    it stay."""
    path = directory / name
    try:
        write_new(path, write_file, "report file", binary=binary)
    except OSError as exc:
        raise WriteFailed(f"cannot write {shown_path(path)}: {exc.strerror or exc}; the files written before it "
                          "are kept", path.name, exc.strerror or str(exc)) from None
    return name


def slug(text, taken=None):
    """A file name part for text; with taken (a set), one not in it yet ('x_y' and 'X-Y' get two names)."""
    base = re.sub(r"[^A-Za-z0-9]+", "-", text).strip("-").lower() or "plot"
    found, n = base, 1
    while taken is not None and found in taken:
        n += 1
        found = f"{base}-{n}"
    if taken is not None:
        taken.add(found)
    return found


def run_of(rec):
    """The run a record belongs to: its source file's name (imported) or its run id."""
    source = rec.get("source_file")
    return str(isinstance(source, str) and os.path.basename(source) or rec.get("run_id") or "?")


def series_name(rec, several_runs):
    """What one line of a busbw/time plot is: run (when several), phase, placement, type, chunk, environment; a
    line holds the repeats and cycles of that config (their min-max its error bars)."""
    place = {True: "in-place", False: "out-of-place"}.get(rec.get("in_place"))
    parts = [run_of(rec) if several_runs else None, rec.get("phase"), place, rec.get("dtype"),
             f"chunk {format_size(rec['chunk_bytes'])}" if rec.get("chunk_bytes") else None, env_config(rec) or None]
    return " ".join(str(p) for p in parts if p not in (None, "")) or "measured"


def _series(recs, several, tag):
    """{label: records}, a line each: per run, phase, placement, type and config (repeats and cycles pooled: their
    range the bars); beyond MAX_SERIES lines the runs of each config pooled into one line as well, and beyond
    MAX_SERIES of those the first MAX_SERIES drawn and a last label saying how many were not."""
    recs = [r for r in recs if usable.usable(r.get("size_bytes"))]
    series = {}
    for r in recs:
        series.setdefault(tag + series_name(r, several), []).append(r)
    if len(series) <= MAX_SERIES:
        return series
    pooled = {}
    for r in recs:
        pooled.setdefault(tag + series_name(r, False), []).append(r)
    runs = {k: len({run_of(r) for r in rs}) for k, rs in pooled.items()}
    shown = {f"{k} ({runs[k]} runs pooled: their range)": rs for k, rs in pooled.items()}
    left = len(shown) - MAX_SERIES
    return dict(list(shown.items())[:MAX_SERIES] + ([(f"{tag}{left} more lines not drawn (in the tables)", [])]
                                                    if left > 0 else []))


def _peak_name(rec):
    """'link peak 0.8 GB/s busbw of all_gather (localhost, intra-node)': the busbw the link allows, its source."""
    what = ", ".join(str(rec[k]) for k in ("topology", "link_tier") if rec.get(k))
    return (f"link peak {rec['link_peak_gbps']:.3g} GB/s busbw" + (f" of {rec['phase']}" if rec.get("phase") else "")
            + (f" ({what})" if what else ""))


def large_from(recs):
    """The smallest size of the large-message panel: the largest size measured / LARGE_SHARE (None where fewer than
    2 sizes are that large)."""
    sizes = sorted({r["size_bytes"] for r in recs if usable.usable(r.get("size_bytes"))
                    and usable.usable(r.get("busbw_gbps"))})
    cut = sizes[-1] / LARGE_SHARE if sizes else None
    return cut if cut and sum(s >= cut for s in sizes) >= 2 else None


def _repeated(recs, several):
    """Whether some line holds several values at one size (repeats, cycles, pooled runs): its bars mean something."""
    seen = set()
    for r in recs:
        at = (series_name(r, several), r.get("size_bytes"))
        if at in seen:
            return True
        seen.add(at)
    return False


def busbw_figure(title, recs, base_recs, marks=(), judged=()):
    """busbw and time vs size (sizes 1K, 1M, 1G; log-log), and the large messages' busbw on a linear axis (sizes
    from the largest / LARGE_SHARE up: 300 and 338 GB/s told apart), one line per run, phase, placement, type and
    config through its repeats' median, their min-max as error bars where a line has repeats (the baseline
    dashed); the model's prediction per phase and the link peak, labelled; judged: the judge's verdict rows of
    these records (benchcore.report.judged: the model per algorithm, the link peak, published references);
    marks: [(field, label, [(size, value)])] thresholds, each a labelled dashed line on its field's axis (a panel
    of its own for a field other than busbw and time)."""
    plt = figures.pyplot()
    cut = large_from(recs)
    fields = list(dict.fromkeys(["busbw_gbps"] + ([LARGE] if cut else []) + ["time_us"]
                                + [f for f, _, _ in marks if f in AXES]))
    fig, axes = plt.subplots(1, len(fields), figsize=(6.5 * len(fields), 6), squeeze=False)
    axes = dict(zip(fields, axes[0]))
    several = len({run_of(r) for r in list(recs) + list(base_recs)}) > 1

    def shown(field, size):
        return field != LARGE or size >= cut
    tops = [0.0]
    for recs_, style, tag in ((recs, "-", ""), (base_recs, "--", "baseline ")):
        for key, rs in _series(recs_, several, tag).items():
            if not rs:      # the lines not drawn, said in the legend
                axes["busbw_gbps"].plot([], [], " ", label=key)
            for field, ax in axes.items():
                points = [(r["size_bytes"], r[FIELD.get(field, field)]) for r in rs
                          if usable.usable(r.get(FIELD.get(field, field))) and shown(field, r["size_bytes"])]
                figures.spread(ax, points, key, style)
                tops += [y for _, y in points] if field == LARGE else []
    models = {}
    for r in recs:          # the model per phase, placement, type and topology: the same for every run and repeat
        if usable.usable(r.get("predicted_time_us")) and usable.usable(r.get("time_us")):
            name = " ".join(str(p) for p in ("model", r.get("phase"), series_name(dict(r, phase=None), False)) if p) \
                + f" ({r.get('topology') or 'alpha-beta'})"                         # one per topology, not run
            models.setdefault(name, set()).add((r["size_bytes"], r["predicted_time_us"], r.get("busbw_gbps") and
                                                r["busbw_gbps"] * r["time_us"] / r["predicted_time_us"]))
    busbw_axes = [(f, axes[f]) for f in ("busbw_gbps", LARGE) if f in axes]
    for name, points in models.items():
        points = sorted(points)
        axes["time_us"].plot([p[0] for p in points], [p[1] for p in points], ":", label=name)
        for field, ax in busbw_axes:
            if all(p[2] for p in points):
                mine = [p for p in points if shown(field, p[0])]
                ax.plot([p[0] for p in mine], [p[2] for p in mine], ":", label=name)
                tops += [p[2] for p in mine] if field == LARGE else []
    peaks = {(r["link_peak_gbps"], r.get("phase"), r.get("topology"), r.get("link_tier")): r for r in recs
             if usable.usable(r.get("link_peak_gbps"))}
    for rec in peaks.values():
        for _, ax in busbw_axes:
            ax.axhline(rec["link_peak_gbps"], color="grey", linestyle="-.", linewidth=1, label=_peak_name(rec))
        tops.append(rec["link_peak_gbps"])
    for field, ax in busbw_axes:
        top = judged_rows.draw(ax, judged, cut if field == LARGE else 0)
        tops.append(top)
    for field, text, points in marks:
        for f in (field, LARGE) if field == "busbw_gbps" else (field,):
            mine = [p for p in points if f in axes and shown(f, p[0])]   # no linear panel: no large messages
            if mine:
                figures.threshold(axes[f], text, points=mine)
                tops += [p[1] for p in mine] if f == LARGE else []
    bars = ("median, bars: min-max of repeats" if _repeated(list(recs) + list(base_recs), several) else
            "one value per size and line: no repeats, no bars")
    for field, ax in axes.items():
        figures.size_axis(ax)
        if field == LARGE:
            sizes = [r["size_bytes"] for r in recs if usable.usable(r.get("size_bytes")) and r["size_bytes"] >= cut]
            ax.set_xlim(min(sizes) / 1.25, max(sizes) * 1.25)
            ax.set_ylim(0, max(tops) * 1.08)
            ax.set_title(f"{title}: busbw from {format_size(int(cut))} (linear)", fontsize="medium")
        else:
            ax.set_yscale("log")
            ax.set_title(f"{title}: {AXES[field].split(' (')[0]} vs size ({bars})", fontsize="medium")
        ax.set_ylabel(AXES.get(field, "busbw (GB/s, linear)"))
        ax.grid(True, which="both", alpha=0.3)
    _legends_below(fig, list(axes.values()))
    return fig


def storage_figure(recs, base_recs, marks=()):
    """Left: MB/s per profile, one bar per mount; right: latency mean/P50/P99/P99.9 (log); baseline bars hatched
    in both; marks: [(axis 0 or 1, label, value)], thresholds drawn as red lines."""
    plt = figures.pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(13, 6.5))
    bars = [(r, "") for r in recs] + [(r, "baseline ") for r in base_recs]
    profiles = list(dict.fromkeys(f"{r.get('profile')} {r.get('direction')}" for r, _ in bars))
    mounts = list(dict.fromkeys(f"{tag}{r.get('mount')}" for r, tag in bars))
    width = 0.8 / max(1, len(mounts))

    def pick(profile, mount, key):
        found = [r.get(key) for r, tag in bars if f"{r.get('profile')} {r.get('direction')}" == profile
                 and f"{tag}{r.get('mount')}" == mount and usable.usable(r.get(key))]
        return (stats.geometric_mean(found) or 0) if found else float("nan")    # nan: no bar, labelled n/a

    def hatch(mount):
        return BASELINE_HATCH if mount.startswith("baseline ") else None

    for i, mount in enumerate(mounts):
        axes[0].bar([x + i * width for x in range(len(profiles))], [pick(p, mount, "bw_mbps") for p in profiles],
                    width, label=mount, hatch=hatch(mount), edgecolor="black" if hatch(mount) else None)
    axes[0].set_ylabel("MB/s")
    axes[0].set_title("bandwidth per profile and mount")
    lat_w = 0.8 / max(1, len(mounts) * len(LATENCIES))
    for i, mount in enumerate(mounts):
        for j, (key, name) in enumerate(LATENCIES):
            k = i * len(LATENCIES) + j
            axes[1].bar([x + k * lat_w for x in range(len(profiles))], [pick(p, mount, key) for p in profiles],
                        lat_w, label=f"{mount} {name}", alpha=1.0 - 0.18 * j, hatch=hatch(mount),
                        edgecolor="black" if hatch(mount) else None)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("I/O latency (us)")
    axes[1].set_title("latency per I/O (mean, percentiles) per profile and mount")
    for ax, w, n in ((axes[0], width, len(mounts)), (axes[1], lat_w, len(mounts) * len(LATENCIES))):
        ax.set_xticks([x + w * (n - 1) / 2 for x in range(len(profiles))])
        ax.set_xticklabels(profiles, rotation=20, fontsize="small")
        ax.grid(True, axis="y", alpha=0.3)
    for ax in axes:
        for bars in ax.containers:
            figures.bar_values(ax, bars)
    for axis, text, value in marks:
        figures.threshold(axes[axis], text, value)
    _legends_below(fig, axes, ncol=2, labels=1.2)
    return fig


def _legends_below(fig, axes, ncol=1, labels=0.8):
    """Each axis' legend below it, under its tick labels (labels: inches they take), the figure grown to hold the
    longest: legends never cover data, and the figure is drawn once (no tight bounding box)."""
    rows = max(-(-sum(label.count("\n") + 1 for label in ax.get_legend_handles_labels()[1]) // ncol)
               for ax in axes)
    legend, plot = 0.2 + 0.16 * rows, 4.5                  # inches: legend lines of x-small text; the axes
    height = plot + labels + legend + 0.4
    fig.set_figheight(height)
    fig.subplots_adjust(bottom=(legend + labels) / height, top=1 - 0.4 / height, left=0.07, right=0.98, wspace=0.22)
    for ax in (ax for ax in axes if ax.get_legend_handles_labels()[1]):   # an axis with nothing labelled has none
        ax.legend(fontsize="x-small", loc="upper left", bbox_to_anchor=(ax.get_position().x0, legend / height),
                  bbox_transform=fig.transFigure, frameon=False, ncol=ncol)


def _save(figure, f):
    """figure() saved into f as PNG; a time of 1e308 us read back from a record is drawn off the axis, not warned
    about."""
    import numpy
    with numpy.errstate(over="ignore"):
        fig = figures.labels_inside(figures.printable_texts(figure()))
        fig.savefig(f, format="png", dpi=100)
    figures.pyplot().close(fig)


def _by_group(records):
    out = {}
    for r in records:
        if r["tool"] == "commbench":
            out.setdefault(group_of(r), []).append(r)
    return out


def plots(directory, records, baseline=(), marks=None, taken=None, judged=None):
    """Draw at most MAX_PLOTS plots into directory: ([(title, file name)], a note when groups were left out).
    The busbw plots are of the groups with most measurements; marks: thresholds to draw, {group: busbw_figure's
    marks} and {"storage": storage_figure's}; taken: file names already used (several calls into one directory);
    judged: the judge's verdict rows (benchcore.report.judged.rows_of), drawn on the groups they judged."""
    judged = judged or {}
    marks, out, taken = marks or {}, [], set() if taken is None else taken
    recs, base = measurements(records), measurements(baseline)
    io = [r for r in recs if r["tool"] == "iobench"]
    groups, base_groups = _by_group(recs), _by_group(base)
    room = MAX_PLOTS - bool(io)
    chosen = sorted(groups, key=lambda g: -len(groups[g]))[:room]
    for group in [g for g in groups if g in chosen]:
        mine = judged_rows.of_group(judged, groups[group])
        name = saved(directory, f"busbw-{slug(group, taken)}.png", lambda f: _save(lambda: busbw_figure(
            group, groups[group], base_groups.get(group, []), marks.get(group, ()), mine), f), binary=True)
        large = large_from(groups[group])
        out.append((f"{group}: busbw and time vs size" + (f", busbw from {format_size(int(large))} on a linear axis"
                                                          if large else "") + judged_rows.caption(mine), name))
    if io:
        name = saved(directory, f"{slug('storage', taken)}.png", lambda f: _save(lambda: storage_figure(
            io, [r for r in base if r["tool"] == "iobench"], marks.get("storage", ())), f), binary=True)
        out.append(("storage: MB/s and latency percentiles per mount and profile", name))
    note = (f"plots: {len(chosen)} of {len(groups)} collective/strategy groups (those with most measurements, at "
            f"most {MAX_PLOTS} plots); the other {len(groups) - len(chosen)} are in the tables only"
            if len(chosen) < len(groups) else None)
    return out, note
