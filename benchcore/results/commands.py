"""`import`, `diff` and `report`: the same three commands in commbench and iobench (each CLI adds them).

Everything they do lives in benchcore.results.read, benchcore.results.diff and benchcore.report.page, imported when a
command runs, so neither CLI pays for pandas or matplotlib at start.
"""
import sys

import click

from benchcore.errors import UserError
from benchcore.inputs import name, shown
from benchcore.lazy import lazy
from benchcore.results.records import RecordWriter, dumps, output_file
from benchcore.vocabulary import ALIASES

diff = lazy("benchcore.results.diff", globals(), "diff")
page = lazy("benchcore.report.page", globals(), "page")
read = lazy("benchcore.results.read", globals(), "read")
nccl_names = lazy("benchcore.importers.nccl_names", globals(), "nccl_names")

EXAMPLES = {
    "commbench": ("all_reduce_perf.log rccl-2023.txt", "last-year.log results.jsonl", "results.jsonl old.log"),
    "iobench": ("fio-2.21.json fio-3.33.json", "old-fio.json results.jsonl", "results.jsonl"),
}


METRIC_WORDS = {"commbench": "time and busbw", "iobench": "MB/s and P99 latency"}


def _refuse(refused):
    for line in refused:
        click.echo(f"error: {line}", err=True)


def _load_side(paths, what):
    loaded, refused = read.load_many(paths)
    if refused:
        raise UserError("; ".join(refused))
    if not read.measurements(loaded):
        raise UserError(f"{what} {', '.join(name(p) for p in paths)} holds no measurements")
    return loaded


def import_command(tool, enrich=None):
    """enrich(path, format) -> None or a function each record read from path passes through (a table row's record
    as its JSON line): commbench's gives records of nccl-tests logs their NCCL evidence."""
    files, old, saved = EXAMPLES[tool]

    @click.command("import", help=f"""Convert nccl-tests/rccl-tests logs, their JSON (nccl-tests -J, rccl-tests
        -Z json|csv) and fio --output-format=json files (any version) into records: one per table row and
        placement, one per fio job and direction. Each record says where it came from (source_file,
        source_format, source_line). The collective comes from the log (banner, *_perf command), else
        --collective, else the file name (all_reduce, allreduce, AllReduce ...); a file that names none, or
        is none of these formats, is refused with one line naming it; the others are still converted and the
        exit is 2.

        \b
        Example:
          {tool} import {files} --out records.jsonl""")
    @click.argument("paths", nargs=-1, required=True)
    @click.option("--out", default=None,
                  help="Append the records to this JSONL file (default: JSON lines on stdout; /dev/null: nowhere).")
    @click.option("--collective", default=None, metavar="NAME",
                  help="The collective of nccl-tests/rccl-tests results whose file does not say it (nor its name).")
    def command(paths, out, collective):
        collective = nccl_names.option(collective) if collective is not None else None
        path = output_file(out) if out is not None else None
        writer = RecordWriter(path, every=False) if path else None   # one fsync at the end, not one per record
        refused = []
        try:
            for source in read.expand(paths):
                try:
                    fmt, found, events = _convert(source, writer, out is None, collective, enrich)
                except UserError as exc:
                    refused.append(str(exc))
                    continue
                click.echo(f"{name(source)}: {found} measurements ({fmt})" + (f"; {events}" if events else ""),
                           err=True)
        finally:
            if writer:
                writer.close()
        _refuse(refused)
        if refused:
            sys.exit(2)
    return command


def _convert(path, writer, to_stdout, collective, enrich=None):
    """Write one file's records to writer (or stdout, or nowhere) as they are read; (format, measurements,
    'event: reason, ...')."""
    fmt, found_records = read.records_of(path, collective, lines=True)
    if fmt == "records":
        raise UserError(f"{name(path)}: already records of the suite (JSONL): nothing to import")
    found, events, tools = 0, [], read.TOOLS
    add = enrich(path, fmt) if enrich else None
    found_records = map(add, found_records) if add else found_records
    write = writer.write if writer else (lambda rec: sys.stdout.write(dumps(rec) + "\n")) if to_stdout else None
    for rec in found_records:
        if write:
            write(rec)
        if type(rec) is str:                      # a table row's record, as its JSON line
            found += 1
        elif rec.get("event"):
            events.append(shown(f"{rec['event']}: {rec['reason']}", 300))
        elif rec.get("tool") in tools:
            found += 1
    return fmt, found, ", ".join(events)


def diff_command(tool):
    files, old, saved = EXAMPLES[tool]

    @click.command("diff", help=f"""Compare NEW with BASELINE: records, nccl-tests logs or fio JSON, in any mix (a
        directory stands for its files). Rows are joined on what was measured (iobench: the device, fs type,
        storage class, profile and options, not the directory). A summary line first, then a table of every
        joined row by collective, size and placement: old and new {METRIC_WORDS[tool]} with the change in %,
        and the verdict on --metric: slower or faster only beyond --threshold AND beyond the run-to-run spread
        (Welch t interval where there are repeats, min-max over ranks where a record has it, else the threshold
        alone, said for each change); then the geometric-mean change per group and the rows found on one side
        only. A row whose value is not a finite positive number (NaN, 0, null), or a baseline row missing in
        NEW, fails. Exit 1 on a regression or such a row with --fail-on-regression, 2 on bad input or when no
        row joins (nothing was compared), else 0.

        \b
        Example:
          {tool} diff {old} --threshold 5% --fail-on-regression""")
    @click.argument("baseline")
    @click.argument("new")
    @click.option("--threshold", default="5%", show_default=True, help="Smallest change reported (5% or 0.05).")
    @click.option("--fail-on-regression", is_flag=True, help="Exit 1 when something got slower beyond the threshold.")
    @click.option("--metric", type=click.Choice(list(ALIASES[tool]), case_sensitive=False), default=None,
                  help=f"What is judged (default: {METRIC_WORDS[tool].split(' and ')[0]}).")
    def command(baseline, new, threshold, fail_on_regression, metric):
        limit = diff.parse_threshold(threshold)
        base_records, new_records = _load_side([baseline], "BASELINE"), _load_side([new], "NEW")
        lines, only_base, only_new = diff.compare(base_records, new_records, limit, metric)
        sys.stdout.write(diff.text(lines, only_base, only_new, limit))
        if not lines:
            raise UserError(f"no row of {name(new)} joins one of {name(baseline)}: nothing was compared "
                            f"({len(only_base)} rows only in the baseline, {len(only_new)} only in new)")
        if fail_on_regression and diff.failures(lines, only_base):
            sys.exit(1)
    return command


def report_command(tool, judge=None, notes=None):
    """judge(records, topology) -> verdict events: the tool's own judgement of the numbers against a system, in the
    report's notes (commbench judge's, under --topology); notes(records) -> events the report's notes always show
    (commbench: each run's evidence of what ran)."""
    files, old, saved = EXAMPLES[tool]

    @click.command("report", help=f"""Markdown, a self-contained HTML page (images inside), PNG plots and the data
        for any RESULTS (records, nccl-tests logs, fio JSON; either tool): busbw vs size per collective or
        strategy (log-log, and the large sizes' busbw on a linear axis; the link peak and the model's
        prediction where records have them);
        MB/s and latency percentiles per mount and profile. --baseline overlays other results.

        \b
        Example:
          {tool} report {saved} --out report/ --baseline {old.split()[0]}""")
    @click.argument("paths", nargs=-1, required=True)
    @click.option("--out", required=True, help="New or empty directory for report.md, report.html, PNGs, data.")
    @click.option("--baseline", "baselines", multiple=True, help="Results to overlay (repeatable).")
    @click.option("--format", "fmt", type=click.Choice(["csv", "parquet"]), default="csv", show_default=True,
                  help="Format of the data file beside the report.")
    @click.option("--title", default=f"{tool} report", show_default=True)
    def command(paths, out, baselines, fmt, title, topology=None):
        records = _load_side(list(paths), "RESULTS")
        base = _load_side(list(baselines), "--baseline") if baselines else []
        if topology:
            records = records + judge(records, topology)
        if notes:
            records = records + notes(records)
        written = page.write(list(paths), records, out, list(baselines), base, fmt, title)
        click.echo(f"wrote {', '.join(written)} in {out}", err=True)
    if judge:
        command = click.option("--topology", default=None, metavar="FILE|NAME",
                               help="Judge the numbers against this system (as `judge`): the verdict in the notes, "
                                    "util, ceiling, model and class columns, and the model per algorithm, the link "
                                    "peak and the published references in the plots.")(command)
    return command


def add_to(group, tool, judge=None, notes=None, enrich=None):
    """Add import, diff and report to a CLI group; judge, notes: see report_command; enrich: import_command."""
    group.add_command(import_command(tool, enrich))
    group.add_command(diff_command(tool))
    group.add_command(report_command(tool, judge, notes))
