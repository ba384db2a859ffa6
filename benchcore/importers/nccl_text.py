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
prefixes, NCCL INFO/WARN and other lines interleaved (also inside a row, as stdout buffering leaves them), Markdown
indentation and quotes ('> '), header lines without '#', elided rows and device lists ('...': then the log does not
say the world size), zero-byte rows, footers with or without unit.
A table that ends before its footer keeps its complete rows and adds an `event: "truncated"` record.
"""
import functools
import json
import re
from dataclasses import dataclass, field

from benchcore.results import schema
from benchcore.errors import UserError
from benchcore.importers import nccl_names as names
from benchcore.importers.nccl_names import PROGRAM
from benchcore.importers.nccl_table import NUMBER, Layout, header, placement_labels, read_row, row_cells
from benchcore.results.records import row_format

FORMAT = "nccl-tests"
OWN = ("size_bytes", "count", "dtype", "op", "in_place", "time_us", "algbw_gbps", "busbw_gbps", "wrong",
       "source_line")  # per row, in the order of a record's fields (row_format's holes, filled in this order)
# mpirun --tag-output and srun --label prefixes and Markdown's quote '> ', after the newline before them (a block's
# lines are untagged at once)
TAG = re.compile(r"\n(?:\[\d+,\d+\]<(?:stdout|stderr)>:|[^\S\n]*(?:\d+: |>(?=[ \n])))")
# host:pid:tid [dev] NCCL INFO (the host starts with a letter: inside a row it follows a digit). Each part is bounded
# (a host name has at most 253 characters), as NTHREAD's gap below: a search over a line of a MB stays linear.
NCCL_LOG = re.compile(r"[A-Za-z][\w.-]{0,252}:\d{1,10}:\d{1,10} \[\d{1,6}\] (?:[\w.]{1,64}:\d{1,6} )?(?:NCCL|RCCL) "
                      r"(?:INFO|WARN|TRACE|ABORT)")
DEVICE = re.compile(r"#*\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(\S+)\s+device\s+(\d+)")
COMMBENCH = re.compile(r"commbench: (\w+), (\d+) ranks on (\d+) node\(s\) \(([^)]*)\)")
NTHREAD = re.compile(r"nThread (\d+) nGpus (\d+) minBytes (\d+) maxBytes (\d+).{0,200}?warmup iters: (\d+) iters: (\d+)"
                     r"(?: agg iters: (\d+))?(?: validation: (\d+))?(?: graph: (\d+))?")
STARTING = re.compile(r"Collective test (?:starting|concluded): (\S+)")
OOB = re.compile(r"Out of bounds values\s*:\s*(\d+)\s*(OK|FAILED)?")
AVG = re.compile(r"Avg bus bandwidth\s*:\s*(\S+)\s*(GB/s)?")
CYCLE = re.compile(r"# Testing (\d+) cycle")
ENV = re.compile(r"NCCL INFO (\w+) set by environment to (\S+?)\.?(?=\s|$)")   # NCCL ends it with a period
VERSIONS = (("nccl", re.compile(r"NCCL version (\S+)")), ("rccl", re.compile(r"RCCL version (\S+)")),
            ("nccl-tests", re.compile(r"nccl-tests version (\S+)")),
            ("rccl-tests", re.compile(r"rccl-tests: Version (\S+)")))
CRASH = re.compile(r"NCCL WARN|RCCL WARN|Test (?:NCCL |CUDA |HIP )?failure|failure|Segmentation fault|Bus error|Abort|"
                   r"terminate called|Process received signal|Signal:|timeout|timed out|noticed that process|"
                   r"srun: error|slurmstepd|CANCELLED|TIME LIMIT|Killed|[Ee]rror", re.I)


@dataclass
class Context:
    """What the log says around the tables: binary, devices, versions, settings."""
    program: str = None
    devices: list = field(default_factory=list)  # its '#  Rank N ... on HOST device D' lines, read when needed
    elided: bool = False                          # '...' in the device list: world size and hosts unknown
    versions: dict = field(default_factory=dict)
    env: dict = field(default_factory=dict)
    settings: dict = field(default_factory=dict)
    blocking: bool = None
    commbench: tuple = None                       # backend, world size, nodes, hosts (commbench's own text)


@dataclass
class Source:
    """The log being read, and what its tables' records share (kept while the next table's context is the same)."""
    file: str
    run_id: str
    collective: str = None                        # --collective: what the log and its file name do not say
    named: list = field(default_factory=list)     # the collectives the file name names
    lines: bool = False                           # rows' records as their JSON lines (import), else as dicts
    shared: tuple = None                          # (the last table's common fields, row_format's, its base record)


@dataclass
class Table:
    layout: Layout
    line: int
    context: Context
    collective: str                               # from the banner, a command line, --collective or the file name
    rows: list = field(default_factory=list)      # (line number, row, cycle) not yet turned into records
    count: int = 0                                # complete rows seen
    last: int = None                              # line of the last complete row
    ended: bool = False                           # its footer was seen
    cut: int = None                               # line of a row cut mid-way
    misfits: int = 0                              # rows that do not fit the header (cut ones too)
    misfit: tuple = None                          # (line, text) of the first
    failed: int = None                            # Out of bounds values : N FAILED
    footer_line: int = None
    cycle: int = 0                                # rccl-tests' '# Testing N cycle.'
    after: list = field(default_factory=list)     # the first MAX_AFTER lines after the last row (for a reason)
    seen: dict = field(default_factory=dict)      # row key -> times seen (repeats are cycles)
    cycled: bool = False                          # a record of the table has a cycle: every record says its own

    def note(self, line):
        if len(self.after) < MAX_AFTER:
            self.after.append(line[:EXCERPT])

    def add(self, n, row):
        self.rows.append((n, row, self.cycle))
        self.count, self.last, self.after, self.cut = self.count + 1, n, [], None


def logical_lines(blocks):
    """(line number, words line, unterminated, logged) of a log given as text blocks that each end at a line's end
    (the last may not): each line without its mpirun/srun tag and surrounding blanks, blank lines and Markdown
    fences left out, NCCL log lines split out of rows they interrupted and the row joined with its continuation.
    unterminated: the last line of a log that ends without a newline; logged: the line is NCCL's own log line."""
    n, pending = 0, None
    for block in blocks:
        lines = TAG.sub("\n", "\n" + block).split("\n")[1:]
        open_end = lines[-1] != ""                         # only the log's last block can end without a newline
        if not open_end:
            lines.pop()
        end = n + len(lines)
        for line in lines:
            n += 1
            line = line.strip()
            if pending is None and "CCL " not in line:     # the common case: a line as printed
                if line and not line.startswith("```"):
                    yield n, line, open_end and n == end, False
                continue
            if not line or line.startswith("```"):
                continue
            m = NCCL_LOG.search(line) if "CCL " in line else None
            if m and m.start() > 0 and not line.startswith("#"):
                head = line[:m.start()].strip()
                if head and head.split()[0].isdigit():
                    pending = (n, head)                    # a row that an NCCL log line interrupted
                    yield n, line[m.start():], False, True
                    continue
            at = n
            if pending and not line.startswith("#") and all(NUMBER.match(t) or t.upper() == "N/A"
                                                            for t in line.split()):
                at, line, pending = pending[0], pending[1] + "  " + line, None
            elif pending and not m:
                yield pending[0], pending[1], True, False  # the row never continued: cut
                pending = None
            yield at, line, open_end and n == end, m is not None and at == n
    if pending:
        yield pending[0], pending[1], True, False


def parse(text, source_file, run_id):
    """(records, events) of every table in an nccl-tests/rccl-tests log text; UserError if there is none."""
    records, events = [], []
    for item in stream([text], source_file, run_id):
        (events if isinstance(item, tuple) else records).append(item)
    return records, events


MAX_ROWS = 4096     # rows of one table held before they become records (a real table has a few dozen)
MAX_DEVICES = 65536  # device lines of one table kept (a rank each)
MAX_AFTER = 1000    # lines after a table's last row searched for why it ended early
EXCERPT = 300       # characters of such a line kept (the reason quotes it)


def stream(blocks, source_file, run_id, collective=None, lines=False):
    """The records of every table in an nccl-tests/rccl-tests log, given as text blocks (logical_lines), as each
    table ends (a table of more than MAX_ROWS rows in parts), and its events (kind, reason, line, collective, hosts)
    after it: tables cut short and footers that say FAILED. Memory stays bounded whatever the length of the
    log. UserError if there is no table, or a table whose collective neither the log, collective (--collective)
    nor the file name names. lines: each row's record as its JSON line (what import writes: no dict made), else
    a dict whose shared fields are the same objects in every record of a table (a log's records in little
    memory)."""
    ctx, tables, labels, current, hint = Context(), 0, None, None, None
    source = Source(source_file, run_id, collective, names.in_file_name(source_file), lines)
    marked, crash = False, (None, None)           # the log says it is nccl-tests; its first line saying why not
    for n, line, unterminated, logged in logical_lines(blocks):
        if current is not None and not current.ended and line[0].isdigit():
            plain = current.layout.plain(line) if current.layout.plain and not unterminated else None
            if plain:                             # a row as nccl-tests prints it: the common case, read first
                current.add(n, plain.groups())
                if len(current.rows) >= MAX_ROWS:
                    yield from _records(current, source)
                continue
            toks = line.split()
            if toks[0].isdigit() and (len(toks) == 1 or toks[1].isdigit()):
                values = read_row(current.layout, line, toks)
                if values is None or unterminated:
                    current.cut, current.misfits = n, current.misfits + 1
                    current.misfit = current.misfit or (n, line[:EXCERPT])
                else:
                    current.add(n, values)
                    if len(current.rows) >= MAX_ROWS:
                        yield from _records(current, source)
                continue
        if not tables and crash[1] is None and CRASH.search(line):
            crash = (n, line[:EXCERPT])
        if logged:                                # NCCL's own log line: versions, settings, or why a table ended
            if "ersion" in line or "set by environment" in line:
                marked = _context(ctx, line) or marked
            if current is not None and not current.ended:
                current.note(line)
            continue
        if "Rank" in line and line.lstrip("# ").startswith("Rank"):
            if len(ctx.devices) < MAX_DEVICES:
                ctx.devices.append(line)
            continue
        start = STARTING.search(line) if "test starting" in line else None
        end = STARTING.search(line) if "test concluded" in line and current and not current.context.program else None
        if end:                                   # a log without its head: the footer's banner names the table
            current.collective = names.named(end.group(1)) or current.collective
        settings = NTHREAD.search(line) if "nThread" in line else None
        if start or settings:
            marked = True
            if current is not None and (current.count or current.ended):
                yield from _done(current, source)
                current, ctx = None, Context(versions=dict(ctx.versions), env=dict(ctx.env))
            if start:
                ctx.program = start.group(1)
            if settings:
                ctx.settings = {"iters": int(settings.group(6)), "warmup": int(settings.group(5)),
                                "agg_iters": int(settings.group(7) or 1), "graph": int(settings.group(9) or 0)}
            continue
        if "Blocking Enabled" in line:
            ctx.blocking = True
            continue
        m = COMMBENCH.search(line) if "commbench: " in line else None
        if m:
            ctx.commbench = (m.group(1), int(m.group(2)), int(m.group(3)), [h.strip() for h in m.group(4).split(",")])
            continue
        if "ersion" in line or "set by environment" in line:
            marked = _context(ctx, line) or marked
        named = [c for c in map(names.named, PROGRAM.findall(" " + line)) if c] if "_perf" in line else None
        if named and not (current and current.count and not current.ended):
            hint = named[0]                       # a command line naming the binary
        found = placement_labels(line) if "place" in line else None
        if found and not header(line, None):
            labels = found
            continue
        layout = header(line, labels) if "time" in line.lower() else None
        if layout:
            if current is None or current.count or current.ended:
                if current is not None:
                    yield from _done(current, source)
                current = Table(layout, n, ctx, _collective(ctx, hint, source))
                tables += 1
                hint = None
            else:
                current.layout = layout
            labels = None
            continue
        if current is None:
            ctx.elided = ctx.elided or (line in ("...", "\u2026") and bool(ctx.devices))
            continue
        m = CYCLE.search(line) if "Testing" in line else None
        if m:
            current.cycle = int(m.group(1)) - 1
            continue
        m = OOB.search(line) if "Out of bounds" in line else None
        if m:
            current.failed = int(m.group(1)) if m.group(2) == "FAILED" else 0
            current.ended, current.footer_line = True, n
            continue
        if ("Avg bus" in line and AVG.search(line)) or "Collective test concluded" in line:
            current.ended, current.footer_line = True, current.footer_line or n
            continue
        if not current.ended and line not in ("...", "\u2026"):
            current.note(line)
    if current is not None:
        yield from _done(current, source)
    if not tables:
        if marked:
            yield ("truncated", "the log ends before nccl-tests printed a table" +
                   (f"; the log says: {crash[1]}" if crash[1] else "; the log shows no reason"), crash[0],
                   _collective(ctx, None, source), None)
            return
        raise UserError("neither an nccl-tests/rccl-tests table (no 'size count type ... time algbw busbw' header) "
                        "nor fio JSON nor records")


def _context(ctx, line):
    """Put the versions and the NCCL environment the line names into ctx; whether it named a version."""
    found = False
    for key, pattern in VERSIONS:
        v = pattern.search(line)
        if v:
            ctx.versions[key], found = v.group(1), True
    e = ENV.search(line) if "set by environment" in line else None
    if e:
        ctx.env[e.group(1)] = e.group(2)
    return found


@functools.lru_cache(maxsize=2)
def ranks(devices):
    """rank -> host of a table's device lines (tables of one log mostly list the same devices: read once)."""
    return {int(m.group(1)): m.group(2) for m in map(DEVICE.match, devices) if m}


def _done(table, source):
    """The rest of an ended table's records, then its events."""
    yield from _records(table, source)
    yield from _events(table)


def _collective(ctx, hint, source):
    """A table's collective: its banner's, a command line's, --collective's, else the one the file name names."""
    name = names.named(ctx.program)
    if ctx.program and ctx.commbench:         # commbench's own text names a strategy's table by its label
        return name or ctx.program
    return name or hint or source.collective or (source.named[0] if len(source.named) == 1 else None)


def _hosts(ctx):
    if ctx.commbench:
        return ctx.commbench[3]
    if ctx.elided:
        return None
    return list(dict.fromkeys(ranks(tuple(ctx.devices)).values())) or None


def _records(table, source):
    """The records of the rows the table holds (which it then lets go), each as its JSON line (row_format)."""
    ctx, layout = table.context, table.layout
    collective = table.collective
    if collective is None:
        raise UserError(names.unnamed(source.file, source.named, "the log has no '# Collective test starting/"
                                      "concluded' line or *_perf command that names one"))
    devices = ranks(tuple(ctx.devices)) if not ctx.elided else None
    world = max(devices) + 1 if devices else None
    hosts = _hosts(ctx)
    backend = "nccl"
    if ctx.commbench:
        backend, world = ctx.commbench[:2]
    nodes = ctx.commbench[2] if ctx.commbench else (len(hosts) if hosts else None)
    settings = ctx.settings
    common = dict(run_id=source.run_id, collective=collective, world_size=world, nodes=nodes, backend=backend,
                  blocking=ctx.blocking if ctx.blocking else (False if settings else None), env=dict(ctx.env),
                  hosts=hosts, versions=dict(ctx.versions) or None, source_file=source.file, source_format=FORMAT)
    if settings:
        common.update(iters=settings["iters"], warmup=settings["warmup"], agg_iters=settings["agg_iters"])
    if layout.cpu or settings.get("graph"):   # otherwise nccl-tests times on the host around a sync
        common["time_source"] = "cpu" if layout.cpu else "cuda_graph"
    if source.shared is None or source.shared[0] != common:   # tables of one run share all this: made once
        base = dict(schema.measurement("commbench", **common), source_line=None)
        source.shared = (common, row_format(base, OWN), base)
    form, seen, rows = source.shared[1], table.seen, []
    for n, row, cycle in table.rows:
        key, head, places = row_cells(layout, row)           # key: type, op, root, size
        repeat = cycle or (seen.get(key, -1) + 1 if key[3] else 0)  # 0 B rows repeat per size under 1 element
        seen[key] = repeat
        rows.append((n, key[2], head, places, repeat))
    table.rows = []
    table.cycled = table.cycled or any(row[-1] for row in rows)
    out, cycled = [], table.cycled
    for n, root, head, places, repeat in rows:
        lead = f', "root": {root}' if root is not None and root >= 0 else ""
        cycle = f', "cycle": {repeat}' if repeat or cycled else ""
        line = str(n)
        for in_place, cells, error, bad in places:
            extra = lead + (f', "check_error": {error}' if error else "") + cycle + \
                (f', "nonfinite": {json.dumps(bad)}' if bad else "")
            out.append((*head, "true" if in_place else "false", *cells, line, extra))
    return [form % own for own in out] if source.lines else [_record(source.shared[2], own) for own in out]


def _record(base, own):
    """A row's record as a dict: a copy of base (its shared values one object in every record) with the row's
    JSON texts of OWN, and its extra fields, read in."""
    rec = dict(base)
    rec.update(zip(OWN, json.loads("[" + ", ".join(own[:-1]) + "]")))
    if own[-1]:
        rec.update(json.loads("{" + own[-1][2:] + "}"))
    return rec


def _events(table):
    """(kind, reason, line, collective, hosts) for a table cut short, and for a footer that says FAILED."""
    name = table.collective
    hosts = _hosts(table.context)
    out = []
    if not table.ended:
        where = (f"a row cut mid-way at line {table.cut}" if table.cut else
                 f"{table.count} complete row(s)" if table.count else "its header")
        reason = f"{name or 'the'} table ends after {where} without nccl-tests' footer"
        why = next((line for line in table.after if CRASH.search(line)), None)
        out.append(("truncated", reason + (f"; the log says: {why}" if why else
                                           "; the log shows no reason"),
                    table.cut or table.last or table.line, name, hosts))
    lost = table.misfits - (1 if table.cut and not table.ended else 0)   # not the last row of a cut table
    if lost:
        out.append(("skipped", f"{lost} row(s) of the {name or 'the'} table fit no header and are not read; the "
                               f"first, line {table.misfit[0]}: {table.misfit[1]}", table.misfit[0], name, hosts))
    if table.failed:
        out.append(("failed", f"nccl-tests: Out of bounds values : {table.failed} FAILED ({name})", table.footer_line,
                    name, hosts))
    return out
