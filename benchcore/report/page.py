"""`report RESULTS... --out DIR`: Markdown, a self-contained HTML page, PNG plots and the data (CSV or Parquet)
for any results of either tool, imported or not, with an optional --baseline overlay.

Tables list every measurement as recorded, and the plots draw the same rows: both take them from compared()
(benchcore.results.joined: each measured thing with the baseline records joined with it, as diff joins them).
Nothing in DIR is overwritten: DIR must be new or empty. At most MAX_PLOTS plots (the groups with most
measurements; the report says so, every group is in the tables).
A measurement whose metric is not a finite positive number, and a baseline row missing from the results, are
named in the report's notes. A file that cannot be written is named in one line; the files before it stay.
The page is a Doc (a banner, notes, sections of text, tables and plots) that report.md and report.html both
render, so the two say the same; accept builds its own Doc (commbench/commands/accept/report.py).
"""
import base64
import html
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from benchcore.errors import UserError, printable
from benchcore.files import output_dir
from benchcore.importers import fio_json as fiojson
from benchcore.report import figures
from benchcore.report import judged as judged_rows
from benchcore.report.plots import plots, run_of, saved
from benchcore.report.render import csv_frame
from benchcore.results import diff, stats, usable
from benchcore.results.joined import BANDWIDTHS, RECOMPUTED, join
from benchcore.results.read import TOOL, group_of, label, measurements
from benchcore.units import format_size

EXPORTS = ("csv", "parquet")
NUMERIC = ' class="n"'
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
                  ("busbw_gbps", "busbw GB/s", ".4f"), ("wrong", "#wrong", "d")],
    "iobench": [("profile", "profile", None), ("direction", "dir", None), ("bs_bytes", "bs", _size),
                ("iodepth", "qd", "d"), ("numjobs", "jobs", "d"), ("bw_mbps", "MB/s", ".1f"), ("iops", "IOPS", ".0f"),
                *[(f, *fiojson.TIME_FIGURES[f][:2]) for f in ("lat_mean_us", "lat_p50_us", "lat_p99_us",
                                                               "lat_p999_us", "file_lat_mean_us", "end_fsync_s")]],
}
# columns a table gets only where its rows have the field (emulated: where it is true): (field, header, format, index
# to insert at); the run only where a table holds several runs (one run is named in the table's caption)
WHEN_PRESENT = [("phase", "phase", None, 1), ("cycle", "cycle", "d", None), ("repeat", "repeat", "d", None),
                ("emulated", "emulated nodes", lambda v: "yes (one host)" if v else "no", None)]
SECTION = {"commbench": lambda r: group_of(r),
           "iobench": lambda r: f"{r.get('mount')} ({r.get('storage_class') or 'n/a'})"}
ORDER = {"commbench": ("dtype", "op", "in_place", "world_size", "size_bytes", "phase", "run", "cycle", "repeat"),
         "iobench": ("profile", "direction", "run", "cycle", "repeat")}


@dataclass
class Section:
    """A part of the page: heading (anchor: its link target), text lines, tables [(caption, columns, rows)] and
    images [(caption, file name)]."""
    title: str
    anchor: str = ""
    lines: list = field(default_factory=list)
    tables: list = field(default_factory=list)
    images: list = field(default_factory=list)


@dataclass
class Doc:
    """What report.md and report.html both say: a banner (verdict, [(name, value)] facts: accept's), a summary
    table (caption, columns, rows), notes and sections."""
    title: str
    verdict: str = ""
    facts: list = field(default_factory=list)
    summary: tuple = ()
    notes: list = field(default_factory=list)
    sections: list = field(default_factory=list)


def cell(value, fmt):
    if isinstance(value, Link):
        return value.text
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


@dataclass(frozen=True)
class Link:
    """A cell's value that links to a section of the page."""
    text: str
    anchor: str


def out_dir(path):
    """DIR for the report: made now, or an empty directory the caller owns and nobody else can write (nothing
    there is overwritten, and no link planted there is followed: benchcore.files)."""
    p = Path(path)
    if os.path.lexists(p) and (os.path.islink(p) or not p.is_dir() or any(p.iterdir())):
        raise UserError(f"--out {path} exists and is not an empty directory: give a new one (nothing is overwritten)")
    output_dir(p, "--out")
    if not os.access(p, os.W_OK | os.X_OK):
        raise UserError(f"--out {path} is not writable")
    return p


def _sort_key(keys):
    return lambda r: tuple(str(r.get(k)) if not isinstance(r.get(k), (int, float)) else f"{r.get(k):020.6f}"
                           for k in keys)


def compared(records, baseline=(), names=("--baseline", "RESULTS")):
    """The rows the tables and the plots of a report both show (benchcore.results.joined): each measured thing of
    records with the baseline's records joined with it; (rows, the records to draw, the baseline records to draw)."""
    rows, _, _ = join(baseline, records, names)
    return rows, [r for j in rows for r in j.new], [b for j in rows for b in j.base]


def _with_baseline(row):
    """A joined row's records as table rows, each with the baseline's figures (geometric means) beside its own."""
    tool = TOOL[row.new[0]["tool"]]
    base = {f: [b[f] for b in row.base if usable.usable(b.get(f))] for f in tool.shown}
    base = {f: stats.geometric_mean(v) if v else None for f, v in base.items()}
    out = []
    for r in row.new:
        metric, b = tool.metric, base[tool.metric]
        why = usable.flaw(r.get(metric))
        out.append(dict(r, run=run_of(r), **{f"baseline_{f}": v for f, v in base.items()},
                        vs_baseline=f"{metric} {why}" if why else r[metric] / b if b else None))
    return out


FLOOR = {"algbw_gbps": 2, "busbw_gbps": 2}     # nccl-tests prints bandwidths %.2f: 0.10 stays 0.10, never 0.1


class Measured:
    """A cell format: a value with the decimals it was measured with, at most the column's (cap): an imported log's
    busbw 2 (not padded to 4), its time 135.8 and 12646 as nccl-tests printed them, a measured value the cap."""

    def __init__(self, cap, floor=0):
        self.cap, self.floor = cap, min(floor, cap)

    def __call__(self, value):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return str(value)
        need = next(d for d in range(self.cap + 1)
                    if d == self.cap or abs(round(value, d) - value) <= 1e-9 * max(1.0, abs(value)))
        return format(value, f".{max(self.floor, need)}f")


def measured_precision(columns):
    """columns with each fixed-point format ('.4f') a Measured one of that cap."""
    return [(key, header, Measured(int(fmt[1:-1]), FLOOR.get(key.removeprefix("baseline_"), 0))
             if isinstance(fmt, str) and re.fullmatch(r"\.\d+f", fmt) else fmt) for key, header, fmt in columns]


def recomputed_cells(row):
    """A table row whose bandwidths were recomputed from size / time (joined.restored: its log printed 0.00), no
    measurement of any precision, with them as 3 significant digits: '0.000123', not '0.00'."""
    if not row.get(RECOMPUTED):
        return row
    return dict(row, **{k: figures.value_text(row[k]) for k in BANDWIDTHS if isinstance(row.get(k), float)})


def sections(joined, judged=None):
    """[Section] with one table each, per collective/strategy or mount, of joined rows (compared()); rows are
    records' values, each column with the decimals its values were measured with (measured_precision); a phase,
    cycle, repeat (and, with several runs, run) column where the rows have them, the judge's util, ceiling, model
    and class where judged (benchcore.report.judged: report --topology) holds the row's size, and the baseline's
    figures where a baseline was given."""
    out, baselined, judged = [], any(row.base for row in joined), judged or {}
    for tool in TOOL:
        by_title = {}
        for row in joined:
            if row.new[0]["tool"] == tool:
                for r in _with_baseline(row):
                    by_title.setdefault(SECTION[tool](r), []).append(judged_rows.with_judged(r, judged))
        for title, rows in by_title.items():
            rows.sort(key=_sort_key(ORDER[tool]))
            columns = measured_precision(COLUMNS[tool])
            rows[:] = [recomputed_cells(r) for r in rows]
            if any(r.get("judge_class") for r in rows):
                columns += judged_rows.COLUMNS
            for key, header, fmt, at in WHEN_PRESENT:
                if any(r.get(key) is not None and r.get(key) is not False for r in rows):   # emulated: where true
                    columns.insert(len(columns) if at is None else at, (key, header, fmt))
            runs = list(dict.fromkeys(r["run"] for r in rows))
            if len(runs) > 1:
                columns.append(("run", "run", None))
            if baselined:
                columns += measured_precision([(f"baseline_{f}", f"baseline {header}", fmt) for f, header, fmt
                                               in COLUMNS[tool] if f in TOOL[tool].shown]) \
                    + [("vs_baseline", "new/baseline", ".3f")]
            caption = f"run {runs[0]}" if len(runs) == 1 else f"{len(runs)} runs"
            caption += judged_rows.TABLE_NOTE if any(r.get("judge_class") for r in rows) else ""
            out.append(Section(f"{tool}: {title}", tables=[(caption, columns, rows)]))
    return out


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
            why = "missing" if metric not in r else usable.flaw(r[metric])
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


def recomputed_note(records):
    """A note when some imported bandwidths the tables and plots show were recomputed (benchcore.results.joined)."""
    n = sum(bool(r.get(RECOMPUTED)) for r in records)
    return [f"{n} imported rows printed algbw/busbw 0.00 (below the log's two decimals): shown as size / time "
            "(algbw), times the bus factor the run's other rows show (busbw)"] if n else []


# what can start emphasis, code, a link, a heading or a cell (an underscore inside a word, all_reduce, cannot)
MD_SPECIAL = re.compile(r"([\\`*\[\]|~]|^#|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def md(text):
    """Text from records, file names or a spec as Markdown shows it literally, on one line: & and < as entities
    (no tag can open: a <script> or <svg onload> in a check name stays text; '>=' stays readable) and
    Markdown's punctuation escaped."""
    text = " ".join(printable(text).split()).replace("&", "&amp;").replace("<", "&lt;")
    return MD_SPECIAL.sub(r"\\\1", text)


def _md_cell(value, fmt):
    text = md(cell(value, fmt))     # one line: a table row never breaks
    return f"[{text}](#{escape(value.anchor)})" if isinstance(value, Link) else text


def _md_table(caption, columns, rows):
    lines = [f"*{md(caption)}*", ""] if caption else []
    lines += ["| " + " | ".join(md(h) for _, h, _ in columns) + " |",
              "|" + "|".join("---" if f is None else "---:" for _, _, f in columns) + "|"]
    lines += ["| " + " | ".join(_md_cell(r.get(k), f) for k, _, f in columns) + " |" for r in rows]
    return lines + [""]


def markdown(doc):
    """The report as Markdown; every text in it is md() (shown literally), the document's own marks are not."""
    lines = [f"# {md(doc.title)}", ""]
    if doc.verdict:
        lines += [f"## {md(doc.verdict)}", "", " · ".join(f"{md(k)}: {md(v)}" for k, v in doc.facts), ""]
    if doc.summary:
        lines += _md_table(*doc.summary)
    lines += [f"- {md(n)}" for n in doc.notes] + ([""] if doc.notes else [])
    for sec in doc.sections:
        lines += ([f'<a id="{escape(sec.anchor)}"></a>', ""] if sec.anchor else []) + [f"## {md(sec.title)}", ""]
        lines += [x for line in sec.lines for x in (md(line), "")]
        for table in sec.tables:
            lines += _md_table(*table)
        for caption, name in sec.images:
            lines += [f"![{md(caption)}]({name})", ""]
    return "\n".join(lines)


def escape(text):
    """Text as HTML shows it literally: errors.printable (no escape sequence reaches a terminal that shows the
    file), then html.escape."""
    return html.escape(printable(text))


def _html_table(caption, columns, rows, e=escape, attrs=""):
    out = [f"<table{attrs}>" + (f"<caption>{e(caption)}</caption>" if caption else "") + "<thead><tr>" +
           "".join(f"<th>{e(h)}</th>" for _, h, _ in columns) + "</tr></thead><tbody>"]
    for r in rows:
        tds = [f"<td{NUMERIC if f else ''}>" + (f'<a href="#{e(r[k].anchor)}">{e(cell(r[k], f))}</a>'
                                                  if isinstance(r.get(k), Link) else e(cell(r.get(k), f))) + "</td>"
               for k, _, f in columns]
        status = f' class="{e(r["status"].lower().replace(" ", "-"))}"' if r.get("status") else ""
        out.append(f"<tr{status}>" + "".join(tds) + "</tr>")
    return out + ["</tbody></table>"]


STYLE = ("body{font-family:sans-serif;margin:2em}table{border-collapse:collapse;margin-bottom:1.5em}"
         "td,th{border:1px solid #ccc;padding:2px 6px;font-size:13px}td.n{text-align:right}"
         "td:first-child{white-space:nowrap}caption{text-align:left;"
         "font-style:italic}img{max-width:100%}.banner{padding:.6em 1em;border-radius:4px;margin-bottom:1em}"
         ".banner h2{margin:0 0 .3em 0}.PASS{background:#dff0d8}.FAIL,.INTERRUPTED{background:#f2dede}"
         "tr.fail td,tr.interrupted td,tr.not-run td{background:#fbeaea}")


def page(doc, directory):
    """One HTML file with everything inside: styles inline, images as data: URIs (no external asset)."""
    e = escape
    parts = ["<!DOCTYPE html>", "<html><head><meta charset=\"utf-8\" />", f"<title>{e(doc.title)}</title>",
             f"<style>{STYLE}</style>", "</head><body>", f"<h1>{e(doc.title)}</h1>"]
    if doc.verdict:
        word = doc.verdict.split(":")[0]
        parts.append(f'<div id="verdict" class="banner {e(word)}"><h2>{e(doc.verdict)}</h2><p>' +
                     " · ".join(f"{e(k)}: {e(str(v))}" for k, v in doc.facts) + "</p></div>")
    if doc.summary:
        parts += _html_table(*doc.summary, attrs=' id="summary"')
    if doc.notes:
        parts.append("<ul>" + "".join(f"<li>{e(n)}</li>" for n in doc.notes) + "</ul>")
    for sec in doc.sections:
        anchor = f' id="{e(sec.anchor)}"' if sec.anchor else ""
        parts.append(f"<section{anchor}><h2>{e(sec.title)}</h2>" + "".join(f"<p>{e(line)}</p>" for line in sec.lines))
        for table in sec.tables:
            parts += _html_table(*table)
        for caption, name in sec.images:
            data = base64.b64encode((directory / name).read_bytes()).decode()
            parts.append(f"<figure><img alt=\"{e(caption)}\" src=\"data:image/png;base64,{data}\" />"
                         f"<figcaption>{e(caption)}</figcaption></figure>")
        parts.append("</section>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def export(frame_records, f, fmt):
    """The records as CSV or Parquet into f, text or binary (one frame: lists and objects as JSON text)."""
    frame = csv_frame(frame_records, inert=fmt == "csv")
    if fmt == "parquet":
        try:
            import pyarrow  # noqa: F401
        except ImportError:
            raise UserError("--format parquet needs pyarrow (pip install pyarrow); --format csv works without it") \
                from None
        frame.to_parquet(f, index=False)
    else:
        frame.to_csv(f, index=False)


def write(inputs, records, out, baseline_inputs=(), baseline=(), fmt="csv", title="Benchmark report"):
    """Write DIR/report.md, DIR/report.html, the plots and DIR/results.<fmt>; returns the files written. Records
    whose identity fields have wrong types are left out with a warning; a report that fails before writing
    anything removes the directories it made (never one the user made)."""
    records = [r for r in records if r.get("event")] + usable.sound(measurements(records), "RESULTS")
    baseline = usable.sound(measurements(baseline), "--baseline")
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


def write_doc(directory, doc, recs, fmt):
    """report.md, report.html (doc's plots already in directory) and results.<fmt> of recs; the files written."""
    md, html_page = markdown(doc), page(doc, directory)
    return [saved(directory, "report.md", lambda f: f.write(md)),
            saved(directory, "report.html", lambda f: f.write(html_page)),
            saved(directory, f"results.{fmt}", lambda f: export(recs, f, fmt), binary=fmt == "parquet")]


def write_into(directory, inputs, records, baseline_inputs=(), baseline=(), fmt="csv", title="Benchmark report"):
    """write() into a directory already checked."""
    recs = measurements(records)
    events = [r for r in records if r.get("event")]
    notes = [f"{r.get('event')}: {r.get('reason')}" + (f" ({r['source_file']}:{r['source_line']})"
                                                        if r.get("source_file") and r.get("source_line") else "")
             for r in events]
    if baseline_inputs:
        notes.insert(0, "baseline: " + ", ".join(baseline_inputs) + " (dashed/hatched in the plots; "
                     "'new/baseline' is the metric's ratio to the baseline's geometric mean)")
    notes += value_notes(recs, baseline)
    rows, drawn, drawn_base = compared(recs, baseline)
    notes += recomputed_note(drawn + drawn_base)
    judged = judged_rows.rows_of(events)
    images, left_out = plots(directory, drawn, drawn_base, judged=judged)
    notes += [left_out] if left_out else []
    doc = Doc(title, notes=["Inputs: " + ", ".join(inputs)] + notes,
              sections=sections(rows, judged) + ([Section("plots", images=images)] if images else []))
    return write_doc(directory, doc, recs, fmt) + [name for _, name in images]
