"""Tables (rich), JSON/CSV on stdout, and line plots (drawn by benchcore.report.figures) for both tools."""
import io
import json
import math
import os
import sys
import textwrap

from rich import box
from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from benchcore.errors import printable
from benchcore.results.records import dumps

FORMATS = ("table", "json", "csv")


PIPE_WIDTH = 100   # columns of a table piped to a file or another program (COLUMNS overrides)
WIDE = 1000        # a table that fits no narrower: as wide as its cells
FOLD_MIN = 12      # a text column folds its words no narrower than this
WHOLE = "whole"    # a column's format: a text that is one token (a timestamp), never wrapped or cut
COMPACT = dict(box=box.SIMPLE_HEAD, padding=(0, 0, 0, 1), show_edge=False, pad_edge=False)   # print_table(compact)


class _Printable(Console):
    """A rich Console whose every text passes errors.printable line by line (a note or diagnosis that carries a
    record's, a file's or a host's words never moves the terminal's cursor)."""

    def print(self, *objects, **kw):
        return super().print(*("\n".join(map(printable, o.split("\n"))) if isinstance(o, str) else o
                               for o in objects), **kw)


def console(stderr=False):
    """Rich console for tables and notes: tables fit the terminal's width, else COLUMNS, else PIPE_WIDTH; a line of
    text is never wrapped (print_table wraps a table's title); text through errors.printable."""
    columns = os.environ.get("COLUMNS", "")
    width = None if sys.stdout.isatty() else int(columns) if columns.isascii() and \
        columns.isdigit() and len(columns) <= 5 and int(columns) > 0 else PIPE_WIDTH
    return _Printable(stderr=stderr, highlight=False, markup=False, soft_wrap=True, width=width)


def _cell(value, fmt):
    """A table's cell as text: every text passes errors.printable (a record's, a host's or a file's words never move
    the terminal's cursor or reset it)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    if fmt and fmt != WHOLE and isinstance(value, (int, float)):
        return format(value, fmt)
    return printable(value)


def print_table(rows, columns, title=None, out=None, compact=False):
    """rows: list of dicts; columns: list of (key, header, format-spec or None). A column keyed `label` holds the
    rows' names: never wrapped or cut (the other columns narrow first). Without out (console()), a table wider
    than the console has its headers wrapped at spaces to their values' width and its text cells (format None)
    wrapped (a number never is), and one that would still cut a cell short is printed wider than the console
    instead; with out, as asked (commbench/output/tables.py fits its own layouts). compact: nccl-tests' look,
    columns two spaces apart under a rule."""
    cells = [[_cell(row.get(key), fmt) for key, _, fmt in columns] for row in rows]
    columns = [(key, "\n".join(printable(line) for line in header.split("\n")), fmt)   # headers keep their
               for key, header, fmt in columns]                                            # two lines
    title = printable(title) if title else title
    table = _table(cells, columns, title, wrap=False, compact=compact)
    if out is None:
        out = console()
        if Measurement.get(out, out.options.update_width(WIDE), table).maximum > out.width:   # its natural width
            table = _table(cells, columns, title, wrap=True, compact=compact)
            probe = Console(file=io.StringIO(), width=out.width, highlight=False, markup=False, soft_wrap=False)
            probe.print(table)
            if not fits(probe.file.getvalue(), cells + [[header for _, header, _ in columns]], out.width):
                out.width = WIDE
    out.print(table, soft_wrap=False)


def print_piece(rows, columns, widths, out, title=None):
    """A compact table (print_table's look) a piece at a time, for rows printed as they are measured: with title,
    its title and head; then each row as a table of its own without a head. Every column is widths' wide (at least
    its header's), or a row's cell's where that is wider (that row alone), so that the pieces line up as one table;
    a piece wider than out is printed wider rather than with a cell cut short (as print_table's callers do)."""
    heads = [("\n".join(printable(line) for line in header.split("\n")), fmt) for _, header, fmt in columns]
    out = Console(file=out.file, width=WIDE, highlight=False, markup=False, soft_wrap=False)

    def piece(cells, head):
        table = Table(title=printable(title) if head and title else None, show_header=head, show_lines=False,
                      **COMPACT)
        for (header, fmt), width, cell in zip(heads, widths, cells):
            table.add_column(header, justify="left" if fmt in (None, WHOLE) else "right", no_wrap=True,
                             width=max([width, len(cell)] + [len(line) for line in header.split("\n")]))
        if not head:
            table.add_row(*cells)
        return table
    if title is not None:
        out.print(piece([""] * len(columns), True), soft_wrap=False)
    for row in rows:
        out.print(piece([_cell(row.get(key), fmt) for key, _, fmt in columns], False), soft_wrap=False)


def fits(text, cells, width):
    """Whether a table printed as text shows every cell and header: none cut short (rich's mark), no line past the
    width (rich crops a table whose least widths do not fit), and every word whole, or its first FOLD_MIN characters
    on one line where it folds (rich narrows a column below that, to nothing, when the least widths do not fit)."""
    return "\u2026" not in text and all(len(line) <= width for line in text.splitlines()) and \
        all(word[:FOLD_MIN] in text for row in cells for cell in row for word in cell.split())


def _table(cells, columns, title, wrap, compact=False):
    table = Table(title=title, show_lines=False, **(COMPACT if compact else {}))
    for i, (key, header, fmt) in enumerate(columns):
        widest = max([len(c[i]) for c in cells] + [1])
        whole = dict(no_wrap=True, min_width=widest) if key == "label" or fmt == WHOLE else dict(no_wrap=True)
        if wrap and fmt is None and key != "label":   # a text (a path, a sentence) wraps at its spaces rather than
            longest = max([len(w) for c in cells for w in c[i].split()] + [1])   # widen the table; a word stays whole
            whole = dict(overflow="fold", min_width=min(widest, longest, FOLD_MIN))
        if wrap:
            header = "\n".join(textwrap.wrap(header, widest, break_long_words=False, break_on_hyphens=False)) or header
        table.add_column(header, justify="left" if fmt in (None, WHOLE) else "right", **whole)
    for row in cells:
        table.add_row(*row)
    return table


def emit(records, fmt, table_fn):
    """Write records to stdout as fmt: 'table' calls table_fn(records); json is JSONL; csv flat."""
    if fmt == "json":
        for rec in records:
            sys.stdout.write(dumps(rec) + "\n")      # never NaN or Infinity: null, named in `nonfinite`
    elif fmt == "csv":
        csv_frame(records).to_csv(sys.stdout, index=False)
    else:
        table_fn(records)


FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\\r")


def _inert(value):
    """A text cell a spreadsheet shows as text: an apostrophe before a formula's first character, and a CR (which
    pandas' CSV leaves unquoted, splitting the row) written as the two characters \\r; escape sequences and other
    controls (errors.printable) as spaces, so that `cat results.csv` is safe too."""
    if not isinstance(value, str):
        return value
    value = printable(value.replace("\r", "\\r"))
    return "'" + value if value.startswith(FORMULA_STARTS) else value


def csv_frame(records, inert=True):
    """records as a flat DataFrame for CSV: lists and objects as JSON text in one column; a column of whole
    numbers with missing values stays whole (pandas' Int64, not 1.0 / NaN); text a spreadsheet would run as a
    formula (=, +, -, @, tab, CR first) starts with an apostrophe, which shows it as text (inert=False: as is,
    for Parquet, which no spreadsheet evaluates)."""
    import pandas as pd  # imported here: it costs ~0.6 s at every start of either tool
    keep = _inert if inert else (lambda v: v)
    rows = [{k: keep(json.dumps(v) if isinstance(v, (list, dict)) else v) for k, v in rec.items()} for rec in records]
    frame = pd.DataFrame(rows)
    for column in frame.columns:
        values = [row[column] for row in rows if row.get(column) is not None]
        if values and all(isinstance(v, int) and not isinstance(v, bool) and abs(v) < 1 << 63 for v in values):
            frame[column] = pd.array([row.get(column) for row in rows], dtype="Int64")
    return frame


def line_plot(path, series, xlabel, ylabel, title, log_y=False):
    """series: {label: [(size, y), ...]} (a size given several times: its repeats, drawn as median and min-max bars);
    a PNG (or the format path's suffix names) at path, sizes on the x axis (benchcore.report.figures)."""
    from benchcore.report import figures
    figures.save(figures.line_figure(series, xlabel, ylabel, title, log_y), path)
