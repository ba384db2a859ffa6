"""`report RESULTS... --out DIR`: Markdown, a self-contained HTML page, PNG plots and the data (CSV or Parquet)
for any results of either tool, imported or not, with an optional --baseline overlay.

The data path is one pandas frame of the records (benchcore.results); tables list every measurement as
recorded, plots draw from the same frame. Nothing in DIR is overwritten: DIR must be new or empty. At most
MAX_PLOTS plots (the groups with most measurements; the report says so, every group is in the tables).
A measurement whose metric is not a finite positive number, and a baseline row missing from the results, are
named in the report's notes. A file that cannot be written is named in one line; the files before it stay.
"""
import base64
import html
import os
import re
from pathlib import Path

from benchcore import diff, stats, values
from benchcore.errors import UserError, WriteFailed
from benchcore.inputs import name as shown_path
from benchcore.report import csv_frame
from benchcore.results import TOOL, group_of, identity, label, measurements
from benchcore.units import format_size

EXPORTS = ("csv", "parquet")
NUMERIC = ' class="n"'
MAX_PLOTS = 12          # a report of 1,000 groups draws 12 plots, not 1,000 (each costs ~0.3 s and 50 KB)
NAMED = 5               # rows named in a note before "and N more"


def _size(v):
    return format_size(int(v)) if v is not None else "n/a"


def _place(v):
    return {True: "in", False: "out"}.get(v, "n/a")


# (field, header, format spec or function) per tool: the tables' columns
COLUMNS = {
    "commbench": [("size_bytes", "size", _size), ("dtype", "type", None), ("op", "op", None),
                  ("in_place", "place", _place), ("world_size", "ranks", "d"), ("nodes", "nodes", "d"),
                  ("time_us", "time us", ".2f"), ("algbw_gbps", "algbw GB/s", ".4f"),
                  ("busbw_gbps", "busbw GB/s", ".4f"), ("wrong", "#wrong", "d"), ("run", "run", None)],
    "iobench": [("profile", "profile", None), ("direction", "dir", None), ("bs_bytes", "bs", _size),
                ("iodepth", "qd", "d"), ("numjobs", "jobs", "d"), ("bw_mbps", "MB/s", ".1f"), ("iops", "IOPS", ".0f"),
                ("lat_mean_us", "lat mean us", ".1f"), ("lat_p50_us", "P50 us", ".1f"),
                ("lat_p99_us", "P99 us", ".1f"), ("lat_p999_us", "P99.9 us", ".1f"), ("run", "run", None)],
}
SECTION = {"commbench": lambda r: group_of(r),
           "iobench": lambda r: f"{r.get('mount')} ({r.get('storage_class') or 'n/a'})"}
ORDER = {"commbench": ("dtype", "op", "in_place", "world_size", "size_bytes", "run", "cycle"),
         "iobench": ("profile", "direction", "run")}
LATENCIES = (("lat_mean_us", "mean"), ("lat_p50_us", "P50"), ("lat_p99_us", "P99"), ("lat_p999_us", "P99.9"))


def cell(value, fmt):
    if value is None or (isinstance(value, float) and value != value):
        return "n/a"
    try:
        if callable(fmt):
            return fmt(value)
        if fmt and isinstance(value, (int, float)) and not isinstance(value, bool):
            return format(value, fmt)
    except (TypeError, ValueError, OverflowError):   # a record read back with a field of another type
        pass
    return str(value)


def _run(rec):
    source = rec.get("source_file")
    return str(isinstance(source, str) and os.path.basename(source) or rec.get("run_id") or "?")


def out_dir(path):
    """DIR for the report: created, or existing, empty and writable (nothing there is overwritten)."""
    p = Path(path)
    if p.exists() and (not p.is_dir() or any(p.iterdir())):
        raise UserError(f"--out {path} exists and is not an empty directory: give a new one (nothing is overwritten)")
    try:
        p.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {path}: {exc.strerror}") from None
    if not os.access(p, os.W_OK | os.X_OK):
        raise UserError(f"--out {path} is not writable")
    return p


def saved(directory, name, write_file):
    """write_file(path) for DIR/name; an OSError (a full disk) is one line naming the file, whose partial copy
    is removed; the files written before it stay."""
    path = directory / name
    try:
        write_file(path)
    except OSError as exc:
        path.unlink(missing_ok=True)
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


def _baseline_metric(baseline):
    """identity -> geometric mean of the baseline's metric."""
    by = {}
    for rec in measurements(baseline):
        value = rec.get(TOOL[rec["tool"]].metric)
        if values.usable(value):
            by.setdefault(identity(rec), []).append(value)
    return {k: stats.geometric_mean(v) for k, v in by.items()}


def sections(records, baseline=()):
    """[(tool, title, columns, rows)]: one table per collective/strategy or mount; rows are records' values."""
    base = _baseline_metric(baseline)
    out = []
    for tool in TOOL:
        by_title = {}
        for r in measurements(records):
            if r["tool"] == tool:
                by_title.setdefault(SECTION[tool](r), []).append(dict(r, run=_run(r)))
        for title, rows in by_title.items():
            rows.sort(key=lambda r: tuple(str(r.get(k)) if not isinstance(r.get(k), (int, float)) else
                                          f"{r.get(k):020.6f}" for k in ORDER[tool]))
            columns = list(COLUMNS[tool])
            if any(r.get("cycle") is not None for r in rows):      # repeats within a run (nccl-tests -N)
                columns.insert(-1, ("cycle", "cycle", "d"))
            if any(k[0] == tool for k in base):
                metric = TOOL[tool].metric
                for r in rows:
                    b, why = base.get(identity(r)), values.flaw(r.get(metric))
                    r["baseline"], r["vs_baseline"] = b, (f"{metric} {why}" if why else r[metric] / b if b else None)
                columns += [("baseline", f"baseline {TOOL[tool].unit}", ".2f"), ("vs_baseline", "new/baseline", ".3f")]
            out.append((tool, title, columns, rows))
    return out


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def busbw_plot(path, title, recs, base_recs, marks=()):
    """busbw vs size, log-log; one line per run and placement; the baseline dashed; link peak and the model's
    prediction (busbw at predicted_time_us) where the records carry them; marks: [(label, [(size, busbw)])],
    thresholds drawn red."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(9, 5.5))
    for recs_, style, tag in ((recs, "-", ""), (base_recs, "--", "baseline ")):
        series = {}
        for r in recs_:
            if values.usable(r.get("size_bytes")) and values.usable(r.get("busbw_gbps")):
                place = {True: "in-place", False: "out-of-place"}.get(r.get("in_place"), "")
                key = f"{tag}{_run(r)} {place} {r.get('dtype') or ''}".strip()
                series.setdefault(key, []).append(r)
        for key, rs in series.items():
            sizes = sorted({r["size_bytes"] for r in rs})
            at = {s: sorted(r["busbw_gbps"] for r in rs if r["size_bytes"] == s) for s in sizes}
            mid = [stats.geometric_mean(at[s]) for s in sizes]      # repeats (cycles, runs): middle and range
            line = ax.errorbar(sizes, mid, yerr=[[max(0.0, m - at[s][0]) for s, m in zip(sizes, mid)],
                                                 [max(0.0, at[s][-1] - m) for s, m in zip(sizes, mid)]],
                               fmt=style, marker="o", markersize=3, capsize=2, label=key).lines[0]
            pred = sorted({(r["size_bytes"], r["busbw_gbps"] * r["time_us"] / r["predicted_time_us"]) for r in rs
                           if values.usable(r.get("predicted_time_us")) and values.usable(r.get("time_us"))})
            if pred and not tag:
                ax.plot(*zip(*pred), ":", color=line.get_color(), label=f"{key} model")
    peaks = sorted({r["link_peak_gbps"] for r in recs if values.usable(r.get("link_peak_gbps"))})
    for peak in peaks:
        ax.axhline(peak, color="grey", linestyle="-.", linewidth=1, label=f"link peak {peak:g} GB/s")
    for text, points in marks:
        ax.plot(*zip(*sorted(points)), "--", color="red", marker="_", markersize=12, label=f"threshold: {text}")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("size (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    ax.set_title(f"{title}: busbw vs size")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def storage_plot(path, recs, base_recs, marks=()):
    """Left: MB/s per profile, one bar per mount (baseline hatched); right: latency mean/P50/P99/P99.9 (log);
    marks: [(axis 0 or 1, label, value)], thresholds drawn as red lines."""
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5))
    bars = [(r, "") for r in recs] + [(r, "baseline ") for r in base_recs]
    profiles = list(dict.fromkeys(f"{r.get('profile')} {r.get('direction')}" for r, _ in bars))
    mounts = list(dict.fromkeys(f"{tag}{r.get('mount')}" for r, tag in bars))
    width = 0.8 / max(1, len(mounts))

    def pick(profile, mount, key):
        found = [r.get(key) for r, tag in bars if f"{r.get('profile')} {r.get('direction')}" == profile
                  and f"{tag}{r.get('mount')}" == mount and values.usable(r.get(key))]
        return stats.geometric_mean(found) or 0

    for i, mount in enumerate(mounts):
        axes[0].bar([x + i * width for x in range(len(profiles))], [pick(p, mount, "bw_mbps") for p in profiles],
                    width, label=mount, hatch="//" if mount.startswith("baseline ") else None)
    axes[0].set_ylabel("MB/s")
    axes[0].set_title("bandwidth per profile and mount")
    lat_w = 0.8 / max(1, len(mounts) * len(LATENCIES))
    for i, mount in enumerate(mounts):
        for j, (key, name) in enumerate(LATENCIES):
            k = i * len(LATENCIES) + j
            axes[1].bar([x + k * lat_w for x in range(len(profiles))], [pick(p, mount, key) for p in profiles],
                        lat_w, label=f"{mount} {name}", alpha=1.0 - 0.18 * j)
    axes[1].set_yscale("log")
    axes[1].set_ylabel("latency (us)")
    axes[1].set_title("latency percentiles per profile and mount")
    for ax, w, n in ((axes[0], width, len(mounts)), (axes[1], lat_w, len(mounts) * len(LATENCIES))):
        ax.set_xticks([x + w * (n - 1) / 2 for x in range(len(profiles))])
        ax.set_xticklabels(profiles, rotation=20, fontsize="small")
        ax.grid(True, axis="y", alpha=0.3)
    for axis, text, value in marks:
        axes[axis].axhline(value, color="red", linestyle="--", linewidth=1, label=f"threshold: {text}")
    for ax in axes:
        ax.legend(fontsize="x-small")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _by_group(records):
    out = {}
    for r in records:
        if r["tool"] == "commbench":
            out.setdefault(group_of(r), []).append(r)
    return out


def plots(directory, records, baseline=(), marks=None):
    """Draw at most MAX_PLOTS plots into directory: ([(title, file name)], a note when groups were left out).
    The busbw plots are of the groups with most measurements; marks: thresholds to draw, {group: busbw marks}
    and {"storage": storage marks} (see busbw_plot, storage_plot)."""
    marks, out, taken = marks or {}, [], {"storage"}
    recs, base = measurements(records), measurements(baseline)
    io = [r for r in recs if r["tool"] == "iobench"]
    groups, base_groups = _by_group(recs), _by_group(base)
    room = MAX_PLOTS - bool(io)
    chosen = sorted(groups, key=lambda g: -len(groups[g]))[:room]
    for group in [g for g in groups if g in chosen]:
        name = saved(directory, f"busbw-{slug(group, taken)}.png", lambda path: busbw_plot(
            path, group, groups[group], base_groups.get(group, []), marks.get(group, ())))
        out.append((f"{group}: busbw vs size", name))
    if io:
        saved(directory, "storage.png", lambda path: storage_plot(
            path, io, [r for r in base if r["tool"] == "iobench"], marks.get("storage", ())))
        out.append(("storage: MB/s and latency percentiles per mount and profile", "storage.png"))
    note = (f"plots: {len(chosen)} of {len(groups)} collective/strategy groups (those with most measurements, at "
            f"most {MAX_PLOTS} plots); the other {len(groups) - len(chosen)} are in the tables only"
            if len(chosen) < len(groups) else None)
    return out, note


def _named(rows):
    """'a; b; c and 7 more' of at most NAMED rows."""
    return "; ".join(rows[:NAMED]) + (f"; and {len(rows) - NAMED} more" if len(rows) > NAMED else "")


def value_notes(records, baseline):
    """Notes naming the measurements with no usable metric (NaN, 0, -1, null, missing), either side, and the
    baseline rows with no partner in the results."""
    notes = []
    for side, recs in (("results", measurements(records)), ("baseline", measurements(baseline))):
        bad = []
        for r in recs:
            metric = TOOL[r["tool"]].metric
            why = "missing" if metric not in r else values.flaw(r[metric])
            if why:
                bad.append(f"{label(r)}: {metric} {why}")
        if bad:
            notes.append(f"not usable: {len(bad)} measurements of the {side} have a metric that is not a finite "
                         f"positive number: {_named(bad)}")
    if baseline:
        _, only_base, _ = diff.compare(baseline, records, 0.05)
        if only_base:
            notes.append(f"missing: {len(only_base)} baseline rows have no partner in the results: "
                         f"{_named([label(r) for r in only_base])}")
    return notes


def markdown(title, inputs, tables, images, notes):
    lines = [f"# {title}", "", "Inputs: " + ", ".join(f"`{p}`" for p in inputs), ""]
    lines += [f"- {n}" for n in notes] + ([""] if notes else [])
    for tool, name, columns, rows in tables:
        lines += [f"## {tool}: {name}", "", "| " + " | ".join(h for _, h, _ in columns) + " |",
                  "|" + "|".join("---" if f is None else "---:" for _, _, f in columns) + "|"]
        lines += ["| " + " | ".join(cell(r.get(k), f).replace("|", "\\|") for k, _, f in columns) + " |" for r in rows]
        lines.append("")
    for caption, name in images:
        lines += [f"![{caption}]({name})", ""]
    return "\n".join(lines)


def page(title, inputs, tables, images, notes, directory):
    """One HTML file with everything inside: styles inline, images as data: URIs (no external asset)."""
    e = html.escape
    parts = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\" />", f"<title>{e(title)}</title>",
             "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1.5em}"
             "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}td.n{text-align:right}"
             "img{max-width:100%}</style>", "</head><body>", f"<h1>{e(title)}</h1>",
             "<p>Inputs: " + ", ".join(f"<code>{e(p)}</code>" for p in inputs) + "</p>"]
    if notes:
        parts.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in notes) + "</ul>")
    for tool, name, columns, rows in tables:
        parts.append(f"<h2>{e(tool)}: {e(name)}</h2><table><thead><tr>" +
                     "".join(f"<th>{e(h)}</th>" for _, h, _ in columns) + "</tr></thead><tbody>")
        for r in rows:
            parts.append("<tr>" + "".join(f"<td{NUMERIC if f else ''}>{e(cell(r.get(k), f))}</td>"
                                          for k, _, f in columns) + "</tr>")
        parts.append("</tbody></table>")
    for caption, name in images:
        data = base64.b64encode((directory / name).read_bytes()).decode()
        parts.append(f"<figure><img alt=\"{e(caption)}\" src=\"data:image/png;base64,{data}\" />"
                     f"<figcaption>{e(caption)}</figcaption></figure>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def export(frame_records, path, fmt):
    """The records as CSV or Parquet (one frame: lists and objects as JSON text)."""
    frame = csv_frame(frame_records)
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UserError("--format parquet needs pyarrow (pip install pyarrow); --format csv works without it") \
                from None
        frame.to_parquet(path, index=False)
    else:
        frame.to_csv(path, index=False)


def write(inputs, records, out, baseline_inputs=(), baseline=(), fmt="csv", title="Benchmark report"):
    """Write DIR/report.md, DIR/report.html, the plots and DIR/results.<fmt>; returns the files written. Records
    whose identity fields have wrong types are left out with a warning; a report that fails before writing
    anything removes the directories it made (never one the user made)."""
    records = [r for r in records if r.get("event")] + values.sound(measurements(records), "RESULTS")
    baseline = values.sound(measurements(baseline), "--baseline")
    if not measurements(records):
        raise UserError("no measurements in " + ", ".join(inputs))
    made = [d for d in [Path(out), *Path(out).parents] if not d.exists()]
    directory = out_dir(out)
    try:
        return write_into(directory, inputs, records, baseline_inputs, baseline, fmt, title)
    finally:
        for d in made:
            if d.exists() and not any(d.iterdir()):
                d.rmdir()


def write_into(directory, inputs, records, baseline_inputs=(), baseline=(), fmt="csv", title="Benchmark report",
               lead=(), marks=None):
    """write() into a directory already checked (accept's output directory); lead: lines before the event
    notes (accept: the verdict per check); marks: thresholds drawn on the plots (see plots)."""
    recs = measurements(records)
    events = [r for r in records if r.get("event")]
    notes = list(lead) + [f"{r.get('event')}: {r.get('reason')}" + (f" ({r['source_file']}:{r['source_line']})"
                                                                    if r.get("source_file") and r.get("source_line")
                                                                    else "") for r in events]
    if baseline_inputs:
        notes.insert(len(lead), "baseline: " + ", ".join(baseline_inputs) + " (dashed/hatched in the plots; "
                     "'new/baseline' is the metric's ratio to the baseline's geometric mean)")
    notes += value_notes(recs, baseline)
    tables = sections(recs, baseline)
    images, left_out = plots(directory, recs, baseline, marks)
    notes += [left_out] if left_out else []
    md = markdown(title, inputs, tables, images, notes)
    html_page = page(title, inputs, tables, images, notes, directory)
    written = [saved(directory, "report.md", lambda path: path.write_text(md)),
               saved(directory, "report.html", lambda path: path.write_text(html_page)),
               saved(directory, f"results.{fmt}", lambda path: export(recs, path, fmt))]
    return written + [name for _, name in images]
