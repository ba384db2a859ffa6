"""The tables of an nccl-tests/rccl-tests log, of every format generation, found line by line with what the log
says around them (Reader).

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
overflows its column still has its own token). Header lines without '#', elided rows and device lists ('...':
then the log does not say the world size), zero-byte rows, footers with or without unit are read as well.
"""
import re
from dataclasses import dataclass, field

from benchcore.errors import UserError
from benchcore.importers import nccl_names as names
from benchcore.importers.nccl_names import PROGRAM
from benchcore.importers.nccl_rows import inferred
from benchcore.importers.nccl_table import Layout, header, placement_labels, read_row

# commbench's own header: '2 ranks on 1 node (vm)', '4 ranks on 2 emulated nodes on one host (vm)' (and, before,
# '2 ranks on 1 node(s) (vm)')
COMMBENCH = re.compile(r"commbench: (\w+), (\d+) ranks on (\d+) (emulated )?nodes?(?:\(s\))?(?: on one host)? "
                       r"\(([^)]*)\)")
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
ELISION = ("...", "\u2026")
# a command line above a table ('$ ./run.sh allreduce 8', 'srun ... python bench.py --op all_reduce'): a wrapper's
# arguments may name the collective where no *_perf binary does
COMMAND = re.compile(r"^(?:\$|#\s*\$|\+)\s|\b(?:mpirun|mpiexec|srun|torchrun|bash|sh|python3?)\s|\.sh\b")
WORD = re.compile(r"[A-Za-z][\w-]{2,40}")
MAX_ROWS = 4096     # rows of one table held before they become records (a real table has a few dozen)
MAX_DEVICES = 65536  # device lines of one table kept (a rank each)
MAX_AFTER = 1000    # lines after a table's last row searched for why it ended early
EXCERPT = 300       # characters of such a line kept (the reason quotes it)


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
    commbench: tuple = None                       # backend, world size, nodes, hosts, emulated (commbench's text)

    def read_versions(self, line):
        """Take in the versions and the NCCL environment the line names; whether it named a version."""
        found = False
        for key, pattern in VERSIONS:
            v = pattern.search(line)
            if v:
                self.versions[key], found = v.group(1), True
        e = ENV.search(line) if "set by environment" in line else None
        if e:
            self.env[e.group(1)] = e.group(2)
        return found


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
    misfit: int = None                            # the line of the first (its text never quoted: any file)
    failed: int = None                            # Out of bounds values : N FAILED
    footer_line: int = None
    cycle: int = 0                                # rccl-tests' '# Testing N cycle.'
    after: list = field(default_factory=list)     # the first MAX_AFTER lines after the last row (for a reason)
    seen: dict = field(default_factory=dict)      # row key -> times seen (repeats are cycles)
    cycled: bool = False                          # a record of the table has a cycle: every record says its own
    headless: str = None                          # its header was cut: the nccl-tests versions its rows were read as
    inferred: str = None                          # why its collective is all_reduce where no line named it

    def note(self, line):
        if len(self.after) < MAX_AFTER:
            self.after.append(line[:EXCERPT])

    def add(self, n, row):
        self.rows.append((n, row, self.cycle))
        self.count, self.last, self.after, self.cut = self.count + 1, n, [], None


class Reader:
    """Where the reading of one log stands: the context of the next table, the table being read (current), and
    what the log said so far. read() takes the log's logical lines in order, each by the first of its steps that
    knows it: a row, NCCL's own log line, a device line, a line about the run, a table's header, a line of the
    table. A table whose rows are due as records is left in `due` for the caller to take, as (table, ended):
    ended, its events are due too. source: the log's Source (its --collective and the collectives its name names)."""

    def __init__(self, source):
        self.source, self.ctx, self.current, self.due = source, Context(), None, None
        self.tables = 0                  # tables begun
        self.labels = None               # the next table's placement labels (a line above its header)
        self.hint = None                 # the collective a command line names, for the next table
        self.marked, self.crash = False, (None, None)  # the log says it is nccl-tests; its first line saying why not
        self.pending = []                # rows before any header, held until a line names their collective

    def read(self, n, line, unterminated, logged):
        table = self.current
        if table is None and not self.tables and line[0].isdigit():
            table = self._headless(n, line, unterminated)
            if table is None and self.pending and self.pending[-1][0] == n:
                return                                # held until a line names the collective
        if table is not None and not table.ended and line[0].isdigit() and self._row(table, n, line, unterminated):
            return
        if not self.tables and self.crash[1] is None and CRASH.search(line):
            self.crash = (n, line[:EXCERPT])
        if logged:
            self._logged(line)
        elif not (self._device(line) or self._run(line)):
            self._mentions(line)
            if not self._header(n, line):
                self._table_line(n, line)

    def no_table(self):
        """What a log without a table ends with: a truncated event where it says it is nccl-tests, else UserError."""
        if not self.marked:
            raise UserError("neither an nccl-tests/rccl-tests table (no 'size count type ... time algbw busbw' "
                            "header) nor fio JSON nor records")
        crash = self.crash
        return ("truncated", "the log ends before nccl-tests printed a table" +
                (f"; the log says: {crash[1]}" if crash[1] else "; the log shows no reason"), crash[0],
                self._collective(None), None)

    def _headless(self, n, line, unterminated=False):
        """The table of a log whose first table's header was cut (its first row is this line): its layout from the
        row's number of fields as nccl-tests prints the collective's rows (nccl_rows); UserError where the row
        fits none. None: the line is no row (not two whole numbers first), or no line named the collective yet (the
        row is held in pending: an excerpt whose '# Collective test concluded' line comes after its rows)."""
        toks = line.split()
        if len(toks) < 4 or not (toks[0].isdigit() and toks[1].isdigit()):
            return None
        collective = self._collective(self.hint)
        if collective is None:
            if len(self.pending) >= MAX_ROWS - 1:
                raise UserError("rows without a header, and no collective named: give it as --collective NAME")
            self.pending.append((n, line, unterminated))
            return None
        versions, line = inferred(collective, toks)
        self.current = Table(header(line, None), n, self.ctx, collective, headless=versions)
        self.tables += 1
        return self.current

    def _row(self, table, n, line, unterminated):
        """A line that starts with a digit, read as a row of the open table; False where it is none."""
        plain = table.layout.plain(line) if table.layout.plain and not unterminated else None
        if plain:                                 # a row as nccl-tests prints it: the common case, read first
            table.add(n, plain.groups())
        else:
            toks = line.split()
            if not (toks[0].isdigit() and (len(toks) == 1 or toks[1].isdigit())):
                return False
            values = read_row(table.layout, line, toks)
            if values is None or unterminated:
                table.cut, table.misfits = n, table.misfits + 1
                table.misfit = table.misfit or n
            else:
                table.add(n, values)
        if len(table.rows) >= MAX_ROWS:
            self.due = (table, False)
        return True

    def _replay(self, collective):
        """The held rows, read as the table of collective now that a line named it."""
        pending, self.pending, self.hint = self.pending, [], collective
        table = self._headless(pending[0][0], pending[0][1])
        for n, line, unterminated in pending:
            self._row(table, n, line, unterminated)

    def finish(self):
        """The end of the log: held rows whose collective no line named are refused."""
        if self.pending:
            raise UserError("rows without a header, and no collective named: give it as --collective NAME")

    def _logged(self, line):
        """NCCL's own log line: versions, settings, or why a table ended."""
        if "ersion" in line or "set by environment" in line:
            self.marked = self.ctx.read_versions(line) or self.marked
        if self.current is not None and not self.current.ended:
            self.current.note(line)

    def _device(self, line):
        """A '#  Rank N ... device D' line, kept for the next table's hosts."""
        if not ("Rank" in line and line.lstrip("# ").startswith("Rank")):
            return False
        if len(self.ctx.devices) < MAX_DEVICES:
            self.ctx.devices.append(line)
        return True

    def _run(self, line):
        """A line about the run: the test's banner, its nThread settings, blocking, commbench's own line. A banner
        or settings line ends the table read before it (a new context begins); the closing banner of a log
        without its head names the table."""
        current = self.current
        end = STARTING.search(line) if "test concluded" in line and current and not current.context.program else None
        if end:
            current.collective = names.named(end.group(1)) or current.collective
        held = STARTING.search(line) if self.pending and "test concluded" in line else None
        if held and names.named(held.group(1)):
            self._replay(names.named(held.group(1)))
        start = STARTING.search(line) if "test starting" in line else None
        settings = NTHREAD.search(line) if "nThread" in line else None
        if start or settings:
            self.marked = True
            if current is not None and (current.count or current.ended):
                self.due = (current, True)
                self.current, self.ctx = None, Context(versions=dict(self.ctx.versions), env=dict(self.ctx.env))
            if start:
                self.ctx.program = start.group(1)
            if settings:
                self.ctx.settings = {"iters": int(settings.group(6)), "warmup": int(settings.group(5)),
                                     "agg_iters": int(settings.group(7) or 1), "graph": int(settings.group(9) or 0)}
            return True
        if "Blocking Enabled" in line:
            self.ctx.blocking = True
            return True
        m = COMMBENCH.search(line) if "commbench: " in line else None
        if m:
            hosts = [h.strip() for h in m.group(5).split(",")]
            self.ctx.commbench = (m.group(1), int(m.group(2)), int(m.group(3)), hosts, bool(m.group(4)))
        return bool(m)

    def _mentions(self, line):
        """What a line says in passing: versions, the NCCL environment, a command line naming the binary."""
        if "ersion" in line or "set by environment" in line:
            self.marked = self.ctx.read_versions(line) or self.marked
        named = [c for c in map(names.named, PROGRAM.findall(" " + line)) if c] if "_perf" in line else None
        if not named and COMMAND.search(line):         # a wrapper's arguments: one collective named, none else
            found = {c for c in map(names.named, WORD.findall(line)) if c}
            named = list(found) if len(found) == 1 else None
        current = self.current
        if named and not (current and current.count and not current.ended):
            self.hint = named[0]

    def _header(self, n, line):
        """A table's placement labels or its header; a header after rows or a footer begins the next table."""
        found = placement_labels(line) if "place" in line else None
        if found and not header(line, None):
            self.labels = found
            return True
        layout = header(line, self.labels) if "time" in line.lower() else None
        if not layout:
            return False
        current = self.current
        if current is None or current.count or current.ended:
            if current is not None:
                self.due = (current, True)
            self.current = Table(layout, n, self.ctx, self._collective(self.hint))
            self.tables += 1
            self.hint = None
        else:
            current.layout = layout
        self.labels = None
        return True

    def _table_line(self, n, line):
        """Any other line: before a table, an elided device list; in one, a cycle, a footer or a line after it."""
        current = self.current
        if current is None:
            self.ctx.elided = self.ctx.elided or (line in ELISION and bool(self.ctx.devices))
            return
        m = CYCLE.search(line) if "Testing" in line else None
        if m:
            current.cycle = int(m.group(1)) - 1
            return
        m = OOB.search(line) if "Out of bounds" in line else None
        if m:
            current.failed = int(m.group(1)) if m.group(2) == "FAILED" else 0
            current.ended, current.footer_line = True, n
        elif ("Avg bus" in line and AVG.search(line)) or "Collective test concluded" in line:
            current.ended, current.footer_line = True, current.footer_line or n
        elif not current.ended and line not in ELISION:
            current.note(line)

    def _collective(self, hint):
        """A table's collective: its banner's, a command line's, --collective's, else the one the file name names."""
        ctx, source = self.ctx, self.source
        name = names.named(ctx.program)
        if ctx.program and ctx.commbench:         # commbench's own text names a strategy's table by its label
            return name or ctx.program
        return name or hint or source.collective or (source.named[0] if len(source.named) == 1 else None)
