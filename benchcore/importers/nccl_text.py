"""nccl-tests and rccl-tests stdout, of every format generation, read into commbench records: the log's logical
lines (nccl_lines) are read into tables (nccl_reader), whose rows become records here, each table's events after
them. Logs as people keep them are read (nccl_lines), and memory stays bounded whatever the log's length.
A table that ends before its footer keeps its complete rows and adds an `event: "truncated"` record.
"""
import functools
import json
import math
import re
import statistics
from dataclasses import dataclass, field

from benchcore.errors import UserError
from benchcore.importers import nccl_names as names
from benchcore.importers.nccl_lines import logical_lines
from benchcore.importers.nccl_reader import CRASH, Reader
from benchcore.importers.nccl_table import row_cells
from benchcore.inputs import clipped
from benchcore.results import schema
from benchcore.results.records import row_format

FORMAT = "nccl-tests"
OWN = ("size_bytes", "count", "dtype", "op", "in_place", "time_us", "algbw_gbps", "busbw_gbps", "wrong",
       "source_line")  # per row, in the order of a record's fields (row_format's holes, filled in this order)
DEVICE = re.compile(r"#*\s*Rank\s+(\d+)\s+(?:Group\s+\d+\s+)?(?:Pid\s+\d+\s+)?on\s+(\S+)\s+device\s+(\d+)")


@dataclass
class Source:
    """The log being read, and what its tables' records share (kept while the next table's context is the same)."""
    file: str
    run_id: str
    collective: str = None                        # --collective: what the log and its file name do not say
    named: list = field(default_factory=list)     # the collectives the file name names
    lines: bool = False                           # rows' records as their JSON lines (import), else as dicts
    shared: tuple = None                          # (the last table's common fields, row_format's, its base record)


def parse(text, source_file, run_id):
    """(records, events) of every table in an nccl-tests/rccl-tests log text; UserError if there is none."""
    records, events = [], []
    for item in stream([text], source_file, run_id):
        (events if isinstance(item, tuple) else records).append(item)
    return records, events


def stream(blocks, source_file, run_id, collective=None, lines=False):
    """The records of every table in an nccl-tests/rccl-tests log, given as text blocks (logical_lines), as each
    table ends (a table of more than nccl_reader's MAX_ROWS rows in parts), and its events (kind, reason, line,
    collective, hosts) after it: tables cut short and footers that say FAILED. Memory stays bounded whatever the
    length of the log. UserError if there is no table, or a table whose collective neither the log, collective
    (--collective) nor the file name names. lines: each row's record as its JSON line (what import writes: no
    dict made), else a dict whose shared fields are the same objects in every record of a table (a log's records
    in little memory)."""
    source = Source(source_file, run_id, collective, names.in_file_name(source_file), lines)
    reader = Reader(source)
    for n, line, unterminated, logged in logical_lines(blocks):
        reader.read(n, line, unterminated, logged)
        if reader.due:
            table, ended = reader.due
            reader.due = None
            yield from _done(table, source) if ended else _records(table, source)
    reader.finish()
    if reader.current is not None:
        yield from _done(reader.current, source)
    if not reader.tables:
        yield reader.no_table()


@functools.lru_cache(maxsize=2)
def ranks(devices):
    """rank -> host of a table's device lines (tables of one log mostly list the same devices: read once)."""
    return {int(m.group(1)): m.group(2) for m in map(DEVICE.match, devices) if m}


def _done(table, source):
    """The rest of an ended table's records, then its events."""
    yield from _records(table, source)
    yield from _events(table)


def _hosts(ctx):
    if ctx.commbench:
        return clipped(ctx.commbench[3])
    if ctx.elided:
        return None
    return clipped(list(dict.fromkeys(ranks(tuple(ctx.devices)).values()))) or None


def _records(table, source):
    """The records of the rows the table holds (which it then lets go), each as its JSON line (row_format)."""
    ctx, layout = table.context, table.layout
    devices = ranks(tuple(ctx.devices)) if not ctx.elided else None
    world = max(devices) + 1 if devices else None
    if table.collective is None:
        table.inferred = by_bus_factor(table, world)
        table.collective = "all_reduce" if table.inferred else None
    collective = table.collective
    if collective is None:
        raise UserError(names.unnamed(source.file, source.named, "the log has no '# Collective test starting/"
                                      "concluded' line or *_perf command that names one"))
    hosts = _hosts(ctx)
    backend = "nccl"
    if ctx.commbench:
        backend, world = ctx.commbench[:2]
    nodes = ctx.commbench[2] if ctx.commbench else (len(hosts) if hosts else None)
    settings = ctx.settings
    common = dict(run_id=source.run_id, collective=collective, world_size=world, nodes=nodes, backend=backend,
                  blocking=ctx.blocking if ctx.blocking else (False if settings else None), env=clipped(dict(ctx.env)),
                  hosts=hosts, versions=clipped(dict(ctx.versions)) or None, source_file=source.file,
                  source_format=FORMAT)
    if ctx.commbench and ctx.commbench[4]:
        common["emulated"] = True          # commbench's nodes all on one host, as its header said
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


BUS_ROWS, BUS_SLACK, BUS_ALGBW = 3, 0.02, 1.0   # rows needed, their ratio's tolerance, the least algbw read (GB/s)


def by_bus_factor(table, world):
    """Why a table no line names is all_reduce's, or None: every row of at least BUS_ALGBW GB/s algbw (2 decimals:
    within 0.5 %) has busbw/algbw within BUS_SLACK of all_reduce's bus factor 2(n-1)/n, n the device list's ranks.
    From 3 ranks on no other collective has that factor (nccl-tests: (n-1)/n for all_gather, reduce_scatter and
    alltoall, 1 for broadcast, reduce and sendrecv); at 2 ranks it is 1 for all of them."""
    if not world or world < 3:
        return None
    factor, ratios = 2 * (world - 1) / world, []
    for _, row, _ in table.rows:
        for _, cells, _, _ in row_cells(table.layout, row)[2]:
            try:
                algbw, busbw = float(cells[1]), float(cells[2])
            except (TypeError, ValueError):
                continue
            if algbw >= BUS_ALGBW and math.isfinite(busbw):
                ratios.append(busbw / algbw)
    if len(ratios) < BUS_ROWS or any(abs(r / factor - 1) > BUS_SLACK for r in ratios):
        return None
    return (f"all_reduce inferred: busbw/algbw is {statistics.median(ratios):.3f} in all {len(ratios)} rows of "
            f"{BUS_ALGBW:g} GB/s or more, all_reduce's bus factor 2(n-1)/n = {factor:.3f} with n = {world} ranks "
            "from the device list (no banner, *_perf command, --collective or file name named it)")


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
    if table.inferred:
        out.append(("inferred", table.inferred, table.line, name, hosts))
    if not table.ended:
        where = (f"a row cut mid-way at line {table.cut}" if table.cut else
                 f"{table.count} complete row(s)" if table.count else "its header, with no row (0 measurements)")
        reason = f"{name or 'the'} table ends after {where} without nccl-tests' footer" + (
            f" (an excerpt without its header: its columns read as nccl-tests {table.headless} prints them)"
            if table.headless else "")
        why = next((line for line in table.after if CRASH.search(line)), None)
        out.append(("truncated", reason + (f"; the log says: {why}" if why else
                                           "; the log shows no reason"),
                    table.cut or table.last or table.line, name, hosts))
    lost = table.misfits - (1 if table.cut and not table.ended else 0)   # not the last row of a cut table
    if lost:
        out.append(("skipped", f"{lost} row(s) of the {name or 'the'} table fit no header (or hold a number beyond "
                               f"any run's) and are not read; the first on line {table.misfit}", table.misfit, name,
                    hosts))
    if table.failed:
        out.append(("failed", f"nccl-tests: Out of bounds values : {table.failed} FAILED ({name})", table.footer_line,
                    name, hosts))
    return out
