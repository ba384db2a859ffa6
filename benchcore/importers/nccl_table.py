"""The tables of nccl-tests and rccl-tests logs: a header line read into a Layout (columns found by name, so
every generation's columns are read from its own header), a row read into its values by whitespace, or read
whole by its Layout's pattern where it is as nccl-tests prints it; either into its cells' JSON text."""
import functools
import math
import re
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii as _json_str

from benchcore.inputs import MAX_WHOLE, clipped
from benchcore.vocabulary import nccl_tests_type

# header words -> column; a placement's columns start at its time column
COLUMNS = {"size": "size", "bytes": "size", "count": "count", "n": "count", "type": "type", "redop": "op",
           "op": "op", "root": "root", "time": "time", "cputime": "time", "algbw": "algbw", "busbw": "busbw",
           "#wrong": "wrong", "wrong": "wrong", "error": "error", "res": "error"}

NUMBER = re.compile(r"^-?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?$")   # no two runs of digits to split
TYPE = re.compile(r"[A-Za-z]\w*$")
# a row as nccl-tests 2.x prints it, cell by column: each a token that is its value's JSON text as well, of at
# most 30 digits (a finite float, an int that int() and json read), a size, count or root of at most 18 (below
# 2**63: no run has more); any other row is read_row's
DECIMAL = r"(-?(?:0|[1-9]\d{0,29})\.\d{1,30})"
INTEGER = r"(0|[1-9]\d{0,17})"
CELLS = {"size": INTEGER, "count": r"(\d{1,18})", "type": r"([A-Za-z]\w*)", "op": r"([A-Za-z]\w*)",
         "root": r"(-?\d{1,18})", "time": DECIMAL, "algbw": DECIMAL, "busbw": DECIMAL,
         "wrong": r"(0|[1-9]\d{0,29}|N/A)"}
PLAIN_COLUMNS = 32     # a wider header (nccl-tests prints 13) is read row by row by read_row, never compiled


def words(line):
    return line.lstrip("#").split()


@dataclass
class Layout:
    """A table header: the leading columns, then each placement's columns; time in us or ms (1.x)."""
    prefix: list
    places: list          # [(in_place, [column, ...]), ...]
    time_us: float = 1.0  # us per time unit
    cpu: bool = False     # cputime (-C): host time, not CUDA events
    width: int = field(init=False)   # tokens of a whole row
    plain: object = field(init=False)  # match of a whole row of JSON-text cells (CELLS) in us, else None
    cells: list = field(init=False)    # [(in_place, index of its time, algbw, busbw, wrong in a row; -1: none)]
    #                                    one per in_place, the last placement of it (as read_row's dict by in_place)

    def __post_init__(self):
        columns = self.prefix + [c for _, cols in self.places for c in cols]
        self.width = len(columns)
        plain = self.time_us == 1.0 and len(columns) <= PLAIN_COLUMNS and all(c in CELLS for c in columns)
        self.plain = re.compile(r"\s+".join(CELLS[c] for c in columns) + r"\Z").match if plain else None
        cells, start = {}, len(self.prefix)
        for in_place, cols in self.places:
            cells[in_place] = tuple(start + cols.index(c) if c in cols else -1 for c in ("time", "algbw", "busbw",
                                                                                          "wrong"))
            start += len(cols)
        self.cells = list(cells.items())


@functools.lru_cache(maxsize=8)
def header(line, labels):
    """A Layout when line is a table header ('size count type ... time algbw busbw ...'), else None; labels:
    placement_labels' (a log's tables mostly repeat one header: each is read once, its Layout shared)."""
    toks = [t.lower() for t in words(line)]
    if len(toks) < 5 or COLUMNS.get(toks[0]) != "size" or COLUMNS.get(toks[1]) != "count" or "time" not in \
            [COLUMNS.get(t) for t in toks]:
        return None
    cols = [COLUMNS.get(t, t) for t in toks]
    cpu = "cputime" in toks
    first = cols.index("time")
    starts = [i for i, c in enumerate(cols) if c == "time"]
    groups = [cols[a:b] for a, b in zip(starts, starts[1:] + [len(cols)])]
    groups = [[c for c in g if c not in ("timestamp",)] for g in groups]
    if not labels or len(labels) != len(groups):
        labels = [False, True] if len(groups) == 2 else [False] * len(groups)
    places = list(zip(labels, groups))
    return Layout(cols[:first], places, 1000.0 if toks[0] == "bytes" else 1.0, cpu)


def placement_labels(line):
    """(False, True) for 'out-of-place ... in-place', (True,) for an in-place-only table; None otherwise."""
    found = re.findall(r"(?<![\w-])(out-of-place|in-place)", line)
    return tuple(f == "in-place" for f in found) or None


def value(tok):
    if tok.upper() == "N/A":
        return None
    if not NUMBER.match(tok):
        raise ValueError(tok)
    return float(tok)


def read_row(layout, line, toks):
    """{in_place: {column: value}} and the leading values of one table row, or None when it is not whole."""
    lead, places, width = len(layout.prefix), layout.places, layout.width
    if len(toks) == width - 1 and "op" in layout.prefix and NUMBER.match(toks[layout.prefix.index("op")]):
        i = layout.prefix.index("op")         # 2.0 - 2.12 alltoall: its redop column printed blank
        toks = toks[:i] + ["none"] + toks[i:]
    if len(toks) < width:
        if len(places) != 2 or len(toks) != lead + len(places[1][1]):
            return None
        # nccl-tests prints blanks for a placement it skipped (only in-place measured): the gap says which
        gap = re.search(r"^(\s*\S+){%d}(\s+)" % lead, line)
        if not gap or len(gap.group(2)) < 20:
            return None
        places, width = places[1:], len(toks)
    cells = toks[lead:width]
    prefix = dict(zip(layout.prefix, toks))
    try:
        numbers = list(map(float, cells)) if all(map(NUMBER.match, cells)) else [value(t) for t in cells]
        size, count = int(prefix["size"]), int(prefix["count"])
        root = int(prefix["root"]) if "root" in prefix else None
    except (ValueError, KeyError):
        return None
    if max(size, count, abs(root or 0)) > MAX_WHOLE:     # beyond any run's: the row is not read
        return None
    kind = prefix.get("type")
    if kind is not None and not TYPE.match(kind):
        return None
    out, i = {}, 0
    for in_place, cols in places:
        out[in_place] = dict(zip(cols, numbers[i:i + len(cols)]))
        i += len(cols)
    return {"size": size, "count": count, "type": kind, "op": prefix.get("op"), "root": root, "places": out}


def row_cells(layout, row):
    """((type, op, root, size), JSON texts of its size_bytes, count, dtype, op, [(in_place, JSON texts of its
    time_us, algbw_gbps, busbw_gbps and wrong, check_error's or None, fields not finite)]) of a row (Layout.plain's
    groups or read_row's values): a plain row's tokens are their own JSON text (N/A: null); read_row's values are
    encoded (not finite: null, named)."""
    if type(row) is tuple:                                   # Layout.plain's groups
        if "N/A" in row:
            row = tuple("null" if t == "N/A" else t for t in row)
        row += ("null",)                                     # a column the table lacks (Layout.cells: -1)
        prefix = dict(zip(layout.prefix, row))
        root = prefix.get("root")
        key = (prefix.get("type"), prefix.get("op"), int(root) if root is not None else None, int(prefix["size"]))
        return key, _head(key, int(prefix["count"])), [(p, tuple(map(row.__getitem__, at)), None, None)
                                                       for p, at in layout.cells]
    places = []
    for in_place, vals in row["places"].items():
        time, algbw, busbw, wrong = vals.get("time"), vals.get("algbw"), vals.get("busbw"), vals.get("wrong")
        if time is None and algbw is None and busbw is None:
            continue                                         # N/A: this placement was not measured
        values = {"time_us": time * layout.time_us if time is not None else None, "algbw_gbps": algbw,
                  "busbw_gbps": busbw, "wrong": int(wrong) if wrong is not None and math.isfinite(wrong) else wrong,
                  "check_error": vals.get("error")}
        bad = sorted(k for k, v in values.items() if v is not None and not math.isfinite(v))
        text = ["null" if k in bad or v is None else repr(v) for k, v in values.items()]
        places.append((in_place, tuple(text[:4]), text[4] if "error" in vals else None, bad))
    key = (row["type"], row["op"], row["root"], row["size"])
    return key, _head(key, row["count"]), places


def _head(key, count):
    """JSON texts of a row's size_bytes, count (as its size and type say, where the type is known), dtype, op."""
    kind, op, _, size = key
    dtype, word = nccl_tests_type(kind)
    return (str(size), str(size // word if word else count), _string(clipped(dtype)),
            _string(clipped(None if op == "none" else op)))


def _string(value):
    return "null" if value is None else _json_str(value)
