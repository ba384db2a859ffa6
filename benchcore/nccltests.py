"""nccl-tests and rccl-tests stdout, of every format generation, read into commbench records.

The generations (from NVIDIA/nccl-tests' and ROCm/rccl-tests' sources):

  1.x (2017)   '#  bytes  N  type  [op]  [root]  time  algbw  busbw  res', time in ms, res = max abs error;
               the 'nThread ...' line and the footer without '#'
  2.0 - 2.12   '#  size  count  type  [redop]  [root]  time  algbw  busbw  error' + a units row (us, GB/s);
               error = max abs error; redop and root only where the collective has them
  2.13 on      '#  size  count  type  redop  root  time  algbw  busbw  #wrong', #wrong a count, N/A without -c;
               wider type column, values that overflow their column, per-iteration columns, timestamps,
               '# Collective test starting: all_reduce_perf' and '... concluded', versions line
  rccl-tests   'rccl-tests: Version ...' preamble, in-place-only tables, '# Testing N cycle.'

The table is read from its own header, so columns are found by name and values by whitespace (a value that
overflows its column still has its own token). Logs as people keep them: mpirun --tag-output and srun --label
prefixes, NCCL INFO/WARN and other lines interleaved (also inside a row, as stdout buffering leaves them),
Markdown indentation, header lines without '#', elided rows ('...'), zero-byte rows, footers with or without unit.
A table that ends before its footer keeps its complete rows and adds an `event: "truncated"` record.
"""
import re
from dataclasses import dataclass, field

from benchcore import schema
from benchcore.errors import UserError

FORMAT = "nccl-tests"
# nccl-tests' type names -> the suite's (torch) names, and bytes per element
DTYPES = {"float": ("float32", 4), "half": ("float16", 2), "bfloat16": ("bfloat16", 2), "double": ("float64", 8),
          "int8": ("int8", 1), "char": ("int8", 1), "uint8": ("uint8", 1), "int32": ("int32", 4), "int": ("int32", 4),
          "uint32": ("uint32", 4), "int64": ("int64", 8), "uint64": ("uint64", 8),
          "f8e4m3": ("float8_e4m3fn", 1), "fp8_e4m3": ("float8_e4m3fn", 1),
          "f8e5m2": ("float8_e5m2", 1), "fp8_e5m2": ("float8_e5m2", 1)}
# binary name stem (X of X_perf) -> collective; others keep their stem
PROGRAMS = {"alltoall": "all_to_all", "alltoallv": "all_to_allv"}
# header words -> column; a placement's columns start at its time column
COLUMNS = {"size": "size", "bytes": "size", "count": "count", "n": "count", "type": "type", "redop": "op",
           "op": "op", "root": "root", "time": "time", "cputime": "time", "algbw": "algbw", "busbw": "busbw",
           "#wrong": "wrong", "wrong": "wrong", "error": "error", "res": "error"}

TAG = re.compile(r"^(?:\[\d+,\d+\]<(?:stdout|stderr)>:|\s*\d+: )")   # mpirun --tag-output, srun --label
# host:pid:tid [dev] NCCL INFO (the host starts with a letter: inside a row it follows a digit)
NCCL_LOG = re.compile(r"[A-Za-z][\w.-]*:\d+:\d+ \[\d+\] (?:[\w.]+:\d+ )?(?:NCCL|RCCL) (?:INFO|WARN|TRACE|ABORT)")
NUMBER = re.compile(r"^-?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?$")
DEVICE = re.compile(r"Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(\S+)\s+device\s+(\d+)")
COMMBENCH = re.compile(r"commbench: (\w+), (\d+) ranks on (\d+) node\(s\) \(([^)]*)\)")
NTHREAD = re.compile(r"nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+).*?warmup iters: (\d+) iters: (\d+)"
                     r"(?: agg iters: (\d+))?(?: validation: (\d+))?(?: graph: (\d+))?")
PROGRAM = re.compile(r"(?:^|[\s/=-])([A-Za-z0-9]+(?:_[A-Za-z0-9]+)*)_perf(?:_mpi)?\b")
STARTING = re.compile(r"Collective test starting: (\S+)")
CONCLUDED = re.compile(r"Collective test concluded")
OOB = re.compile(r"Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
AVG = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)\s*(GB/s)?")
CYCLE = re.compile(r"# Testing (\d+) cycle")
ENV = re.compile(r"NCCL INFO (\w+) set by environment to (\S+)")
VERSIONS = (("nccl", re.compile(r"NCCL version (\S+)")), ("rccl", re.compile(r"RCCL version (\S+)")),
            ("nccl-tests", re.compile(r"nccl-tests version (\S+)")),
            ("rccl-tests", re.compile(r"rccl-tests: Version (\S+)")))
CRASH = re.compile(r"NCCL WARN|RCCL WARN|Test (?:NCCL |CUDA |HIP )?failure|failure|Segmentation fault|Bus error|Abort|"
                   r"terminate called|Process received signal|Signal:|timeout|timed out|noticed that process|"
                   r"srun: error|slurmstepd|CANCELLED|TIME LIMIT|Killed|[Ee]rror", re.I)


def clean(raw):
    """A log line without the mpirun tag, Markdown indentation and '#': the words nccl-tests printed."""
    return TAG.sub("", raw).strip()


def words(line):
    return line.lstrip("#").split()


@dataclass
class Layout:
    """A table header: the leading columns, then each placement's columns; time in us or ms (1.x)."""
    prefix: list
    places: list          # [(in_place, [column, ...]), ...]
    time_us: float = 1.0  # us per time unit
    cpu: bool = False     # cputime (-C): host time, not CUDA events

    @property
    def width(self):
        return len(self.prefix) + sum(len(cols) for _, cols in self.places)


def header(line, labels):
    """A Layout when line is a table header ('size count type ... time algbw busbw ...'), else None."""
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
    """[False, True] for 'out-of-place ... in-place', [True] for an in-place-only table; None otherwise."""
    found = re.findall(r"(?<![\w-])(out-of-place|in-place)", line)
    return [f == "in-place" for f in found] or None


def value(tok):
    if tok.upper() == "N/A":
        return None
    if not NUMBER.match(tok):
        raise ValueError(tok)
    return float(tok)


@dataclass
class Context:
    """What the log says around the tables: binary, devices, versions, settings."""
    program: str = None
    ranks: dict = field(default_factory=dict)   # rank -> host
    versions: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    blocking: bool = None
    commbench: tuple = None                       # backend, world size, nodes, hosts (commbench's own text)


@dataclass
class Table:
    layout: Layout
    line: int
    context: Context
    program: str                                  # from the banner, a command line or the file name
    rows: list = field(default_factory=list)      # (line number, row, cycle)
    ended: bool = False                           # its footer was seen
    cut: int = None                               # line of a row cut mid-way
    failed: int = None                            # Out of bounds values : N FAILED
    footer_line: int = None
    cycle: int = 0                                # rccl-tests' '# Testing N cycle.'
    after: list = field(default_factory=list)     # lines after the last row (for a reason)


def logical_lines(text):
    """(line number, words line) with NCCL log lines split out of rows they interrupted and the row joined
    with its continuation; the last line of a text without a final newline is marked unterminated."""
    raw = text.split("\n")
    unterminated = not text.endswith("\n")
    out, pending = [], None
    for n, line in enumerate(raw, 1):
        line = clean(line.rstrip("\r"))
        if line.startswith("```"):
            continue
        m = NCCL_LOG.search(line)
        if m and m.start() > 0 and not line.startswith("#"):
            head = line[:m.start()].strip()
            if head and head.split()[0].isdigit():
                pending = (n, head)            # a row that an NCCL log line interrupted
                out.append((n, line[m.start():], False))
                continue
        if pending and line and not line.startswith("#") and all(NUMBER.match(t) or t.upper() == "N/A"
                                                                 for t in line.split()):
            line, n = pending[1] + "  " + line, pending[0]
            pending = None
        elif pending and line and not NCCL_LOG.search(line):
            out.append((pending[0], pending[1], True))   # the row never continued: cut
            pending = None
        out.append((n, line, unterminated and n == len(raw)))
    if pending:
        out.append((pending[0], pending[1], True))
    return out


def parse(text, source_file, run_id):
    """(records, events) of every table in an nccl-tests/rccl-tests log; UserError if there is none.
    events: (kind, reason, line, collective) for tables cut short and footers that say FAILED."""
    ctx, tables, labels, current, hint = Context(), [], None, None, None
    names = PROGRAM.findall(" " + source_file.rsplit("/", 1)[-1])
    marked = False                                # the log says it is nccl-tests (settings line, banner)
    for n, line, unterminated in logical_lines(text):
        if not line:
            continue
        start, settings = STARTING.search(line), NTHREAD.search(line)
        if start or settings:
            marked = True
            if current is not None and (current.rows or current.ended):
                current, ctx = None, Context(versions=dict(ctx.versions), env=dict(ctx.env))
            if start:
                ctx.program = (PROGRAM.findall(" " + start.group(1)) or [start.group(1)])[0]
            if settings:
                ctx.settings = {"iters": int(settings.group(6)), "warmup": int(settings.group(5)),
                                "agg_iters": int(settings.group(7) or 1), "graph": int(settings.group(9) or 0)}
            continue
        if "Blocking Enabled" in line:
            ctx.blocking = True
            continue
        m = DEVICE.search(line)
        if m and line.lstrip("#").lstrip().startswith("Rank"):
            ctx.ranks[int(m.group(1))] = m.group(2)
            continue
        m = COMMBENCH.search(line)
        if m:
            ctx.commbench = (m.group(1), int(m.group(2)), int(m.group(3)), [h.strip() for h in m.group(4).split(",")])
            continue
        for key, pattern in VERSIONS:
            v = pattern.search(line)
            if v:
                ctx.versions[key], marked = v.group(1), True
        e = ENV.search(line)
        if e:
            ctx.env[e.group(1)] = e.group(2)
        if NCCL_LOG.search(line):
            if current is not None and not current.ended:
                current.after.append((n, line))
            continue
        if PROGRAM.search(" " + line) and not (current and current.rows and not current.ended):
            hint = PROGRAM.findall(" " + line)[0]    # a command line naming the binary
        if placement_labels(line) and not header(line, None):
            labels = placement_labels(line)
            continue
        layout = header(line, labels)
        if layout:
            if current is None or current.rows or current.ended:
                current = Table(layout, n, ctx, ctx.program or hint or (names[0] if names else None))
                tables.append(current)
                hint = None
            else:
                current.layout = layout
            labels = None
            continue
        if current is None:
            continue
        m = CYCLE.search(line)
        if m:
            current.cycle = int(m.group(1)) - 1
            continue
        m = OOB.search(line)
        if m:
            current.failed = int(m.group(1)) if m.group(2) == "FAILED" else 0
            current.ended, current.footer_line = True, n
            continue
        if AVG.search(line) or CONCLUDED.search(line):
            current.ended, current.footer_line = True, current.footer_line or n
            continue
        toks = [] if line.startswith("#") else line.split()
        if toks and toks[0].isdigit() and (len(toks) == 1 or toks[1].isdigit()) and not current.ended:
            row = _row(current.layout, line, toks)
            if row is None or unterminated:
                current.cut = n
            else:
                current.rows.append((n, row, current.cycle))
                current.after, current.cut = [], None
            continue
        if not current.ended and line not in ("...", "\u2026"):
            current.after.append((n, line))
    if not tables:
        if marked:
            why = next(((n, line) for n, line, _ in logical_lines(text) if CRASH.search(line)), (None, None))
            return [], [("truncated", "the log ends before nccl-tests printed a table" +
                         (f"; the log says: {why[1]}" if why[1] else "; the log shows no reason"), why[0], ctx.program)]
        raise UserError("neither an nccl-tests/rccl-tests table (no 'size count type ... time algbw busbw' header) "
                        "nor fio JSON nor records")
    records, events = [], []
    for table in tables:
        records += _records(table, source_file, run_id)
        events += _events(table)
    return records, events


def _row(layout, line, toks):
    """{in_place: {column: value}} and the leading values of one table row, or None when it is not whole."""
    lead = len(layout.prefix)
    places = layout.places
    if len(toks) < layout.width and len(places) == 2 and len(toks) == lead + len(places[1][1]):
        # nccl-tests prints blanks for a placement it skipped (only in-place measured): the gap says which
        gap = re.search(r"^(\s*\S+){%d}(\s+)" % lead, line)
        if gap and len(gap.group(2)) >= 20:
            places = places[1:]
        else:
            return None
    if len(toks) < lead + sum(len(c) for _, c in places):
        return None
    prefix = dict(zip(layout.prefix, toks[:lead]))
    try:
        size, count = int(prefix["size"]), int(prefix["count"])
        root = int(prefix["root"]) if "root" in prefix else None
        out, i = {}, lead
        for in_place, cols in places:
            out[in_place] = {c: value(t) for c, t in zip(cols, toks[i:i + len(cols)])}
            i += len(cols)
    except (ValueError, KeyError):
        return None
    if not re.match(r"^[A-Za-z][\w]*$", prefix.get("type", "x")):
        return None
    return {"size": size, "count": count, "type": prefix.get("type"), "op": prefix.get("op"), "root": root,
            "places": out}


def _collective(program):
    if program is None:
        return None
    return PROGRAMS.get(program, program)


def _records(table, source_file, run_id):
    ctx, layout = table.context, table.layout
    collective = _collective(table.program or ctx.program)
    if collective is None:
        raise UserError("no collective named: no '# Collective test starting' line, no *_perf binary in the log or "
                        "the file name")
    ranks = ctx.ranks
    world = max(ranks) + 1 if ranks else None
    hosts = list(dict.fromkeys(ranks.values())) or None
    backend = "nccl"
    if ctx.commbench:
        backend, world, _, hosts = ctx.commbench
    nodes = ctx.commbench[2] if ctx.commbench else (len(hosts) if hosts else None)
    settings = ctx.settings
    seen, out = {}, []
    for n, row, cycle in table.rows:
        dtype, word = DTYPES.get(row["type"], (row["type"], None))
        key = (row["type"], row["op"], row["root"], row["size"])
        repeat = seen.get(key, -1) + 1 if not cycle else cycle
        seen[key] = repeat
        for in_place, vals in row["places"].items():
            if all(vals.get(c) is None for c in ("time", "algbw", "busbw")):
                continue                                     # N/A: this placement was not measured
            wrong = vals.get("wrong")
            fields = dict(
                run_id=run_id, collective=collective, size_bytes=row["size"],
                count=row["size"] // word if word else row["count"], dtype=dtype,
                op=None if row["op"] in (None, "none") else row["op"], in_place=in_place,
                blocking=ctx.blocking if ctx.blocking else (False if settings else None),
                time_us=vals["time"] * layout.time_us if vals.get("time") is not None else None,
                algbw_gbps=vals.get("algbw"), busbw_gbps=vals.get("busbw"),
                wrong=int(wrong) if wrong is not None else None, world_size=world, nodes=nodes, backend=backend,
                env=dict(ctx.env), hosts=hosts, versions=dict(ctx.versions) or None,
                source_file=source_file, source_format=FORMAT, source_line=n)
            if row["root"] is not None and row["root"] >= 0:
                fields["root"] = row["root"]
            if "error" in vals:
                fields["check_error"] = vals["error"]
            if settings:
                fields.update(iters=settings["iters"], warmup=settings["warmup"], agg_iters=settings["agg_iters"])
            if layout.cpu or settings.get("graph"):   # otherwise nccl-tests times on the host around a sync
                fields["time_source"] = "cpu" if layout.cpu else "cuda_graph"
            if repeat:
                fields["cycle"] = repeat
            out.append(schema.measurement("commbench", **fields))
    if any("cycle" in r for r in out):          # as commbench: every record of a multi-cycle run says its cycle
        for r in out:
            r.setdefault("cycle", 0)
    return out


def _events(table):
    """(kind, reason, line, collective) for a table cut short, and for a footer that says FAILED."""
    name = _collective(table.program or table.context.program)
    out = []
    if not table.ended:
        why = next((line for _, line in table.after if CRASH.search(line)), None)
        where = (f"a row cut mid-way at line {table.cut}" if table.cut else
                 f"{len(table.rows)} complete row(s)" if table.rows else "its header")
        reason = f"{name or 'the'} table ends after {where} without nccl-tests' footer"
        out.append(("truncated", reason + (f"; the log says: {why}" if why else "; the log shows no reason"),
                    table.cut or (table.rows[-1][0] if table.rows else table.line), name))
    if table.failed:
        out.append(("failed", f"nccl-tests: Out of bounds values : {table.failed} FAILED ({name})", table.footer_line,
                    name))
    return out
