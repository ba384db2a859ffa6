"""commbench records as nccl-tests prints them: rich tables, and nccl-tests' own plain text (--format nccl-tests)."""
import io
import os
import sys

from rich.console import Console

from benchcore.processes.busy import OTHERS_BUSY
from benchcore.report.render import console, emit, print_table
from benchcore.units import format_size
from benchcore.vocabulary import TYPES
from commbench.cases.registry import record_label
from commbench.evidence import nccl as nccl_evidence
from commbench.model.gap import gap_lines

# nccl-tests' columns (src/util.cu), in its order, then the suite's two: the same in every table of every backend
ROW_COLUMNS = [("size", "size\n(B)", "d"), ("count", "count\n(elements)", "d"), ("type", "\ntype", None),
               ("redop", "\nredop", None), ("root", "\nroot", "d")]
PLACE_COLUMNS = [("time_us", "time\n(us)", ".1f"), ("algbw_gbps", "algbw\n(GB/s)", ".3f"),
                 ("busbw_gbps", "busbw\n(GB/s)", ".3f"), ("wrong", "\n#wrong", "d"),
                 ("link_utilization", "\nutil", ".2f"), ("predicted_time_us", "model\n(us)", ".1f"),
                 ("spread", "\n~!b", None)]   # the marks' own header: 3 columns (long numbers still fit 100)
SIDES = (("out", "out-of-place"), ("in", "in-place"))
# A row's time is a mean over iterations; where they were not steady the row says so. ~: their coefficient of
# variation is over 10 % (pyperf's `check`: "the standard deviation is N % of the mean", from 10 %); !: their p99 is
# over twice their p50 (a heavy tail: some iterations stalled). The records keep time_cv, time_us_p50, time_us_p99.
STEADY_CV, TAIL_RATIO = 0.10, 2.0
SPREAD_RULE = (f"~ = the iterations' cv over {STEADY_CV:.0%} (pyperf's stability rule), ! = their p99 over "
               f"{TAIL_RATIO:g} x their p50 (a heavy tail), b = other processes took over {OTHERS_BUSY:.0%} of the "
               f"host's CPUs during the loop (a busy machine)")


def spread_line(recs):
    """('# Spread : 3 of 10 measurements unsteady: <the rule>' or every one steady, or None where no record has
    per-iteration statistics; how many are unsteady)."""
    marks = [spread(r) for r in recs]
    unsteady = sum(1 for m in marks if m)
    if all(m is None for m in marks):
        return None, 0
    return (f"# {'Spread':<20} : {unsteady} of {len(recs)} measurements unsteady: {SPREAD_RULE}" if unsteady else
            f"# {'Spread':<20} : every measurement steady (cv <= {STEADY_CV:.0%}, p99 <= {TAIL_RATIO:g} x p50, "
            f"others took <= {OTHERS_BUSY:.0%} of the host's CPUs)",
            unsteady)


def spread(rec):
    """'' (steady), or '~', '!', 'b' together as SPREAD_RULE says; None where the record has no per-iteration
    statistics."""
    cv, p50, p99 = rec.get("time_cv"), rec.get("time_us_p50"), rec.get("time_us_p99")
    others = rec.get("others_cpu_fraction")
    if cv is None and (p50 is None or p99 is None) and others is None:
        return None
    return ("~" if cv is not None and cv > STEADY_CV else "") \
        + ("!" if p50 and p99 and p99 > TAIL_RATIO * p50 else "") \
        + ("b" if others is not None and others > OTHERS_BUSY else "")


def measurements(records):
    return [r for r in records if not r.get("event") and r.get("collective") is not None]


def row_key(rec):
    """What one table row holds (both placements of it)."""
    return (rec.get("cycle") or 0, rec["dtype"], rec.get("op"), rec.get("root"), rec["size_bytes"])


def row_order(recs):
    """Sort key of row_keys in nccl-tests' order: per cycle, each type/op/root as first measured, sizes within."""
    first = {}
    for rec in recs:
        first.setdefault(row_key(rec)[:4], len(first))
    return lambda key: (key[0], first[key[:4]], key[4])


def collective_rows(records):
    """One row per collective and row_key, each placement's columns prefixed out_ or in_; count as nccl-tests'
    (the per-rank piece of all_gather, reduce_scatter, alltoall)."""
    rows = {}
    for rec in measurements(records):
        key = (rec["collective"],) + row_key(rec)
        row = rows.setdefault(key, {"collective": rec["collective"], "size": rec["size_bytes"],
                                    "count": nccl_count(rec), "type": rec["dtype"], "redop": rec.get("op") or "none",
                                    "root": rec.get("root") if rec.get("root") is not None else -1})
        side = "in" if rec["in_place"] else "out"
        for col, _, _ in PLACE_COLUMNS:
            row[f"{side}_{col}"] = spread(rec) if col == "spread" else rec.get(col)
    order = {name: i for i, name in enumerate(dict.fromkeys(k[0] for k in rows))}
    within = row_order(measurements(records))
    return [rows[k] for k in sorted(rows, key=lambda k: (order[k[0]], within(k[1:])))]


def _fits(rows, columns, title, width):
    """Whether the table renders at width with no cell cut short (rich marks a cut with an ellipsis)."""
    probe = Console(file=io.StringIO(), width=width, highlight=False, markup=False, soft_wrap=False)
    print_table(rows, columns, title=title, out=probe, compact=True)
    return "\u2026" not in probe.file.getvalue()


def table_console():
    """benchcore's console, narrowed to COLUMNS when the user sets it (a pipe otherwise gets 200)."""
    out = console()
    columns = os.environ.get("COLUMNS", "")
    if columns.isascii() and columns.isdigit() and 0 < len(columns) <= 5 and int(columns) > 0:
        out.width = int(columns)
    return out


def ranks_on(rec):
    """'4 ranks on 2 nodes', or '4 ranks on 2 emulated nodes on one host' where no endpoint, allocation or host
    list gave real ones (the record's `emulated`)."""
    nodes = rec.get("nodes") or 1
    where = f"{nodes} emulated nodes on one host" if rec.get("emulated") else f"{nodes} node{'s' * (nodes != 1)}"
    return f"{rec['world_size']} ranks on {where}"


def place_columns(side):
    """A table's columns for one placement: nccl-tests' row columns, then its four and the suite's two."""
    return ROW_COLUMNS + [(f"{side}_{key}", head, fmt) for key, head, fmt in PLACE_COLUMNS]


def table_title(name, label, first):
    """A collective table's title: the collective, the placement's label, how the run measured (its first record)."""
    return (f"{name} {label}  ({first['backend']}, {ranks_on(first)}, util = busbw / {first.get('topology')} "
            f"ceiling, {'blocking' if first['blocking'] else 'non-blocking'}, agg {first.get('agg', 'avg')})")


def print_collective_tables(records, out=None, streamed=None):
    """One table per collective and placement, every one with the same columns (nccl-tests', then util and the
    model's time; n/a where a value is missing); a table the console is too narrow for is printed wider than it
    rather than with a number cut short. streamed: the TableStream (commbench/tablestream.py) that printed the first
    table's head and rows as they were measured: that table's other rows only."""
    out = out or table_console()
    recs = measurements(records)
    rows = collective_rows(recs)
    if not rows:
        out.print("no measurements")
        return
    wide = Console(file=out.file, width=1000, highlight=False, markup=False, soft_wrap=False)
    for name in dict.fromkeys(r["collective"] for r in rows):
        mine = [r for r in rows if r["collective"] == name]
        for side, label in SIDES:
            if streamed and streamed.table == (name, side):
                streamed.finish(mine, recs, out)
            elif any(r.get(f"{side}_time_us") is not None for r in mine):
                columns, title = place_columns(side), table_title(name, label, recs[0])
                print_table(mine, columns, title=title, out=out if _fits(mine, columns, title, out.width) else wide,
                            compact=True)
    line, unsteady = spread_line(recs)
    if line:
        out.print(line)
    busbws = [r["busbw_gbps"] for r in recs if r.get("busbw_gbps") is not None]
    checked = [r["wrong"] for r in recs if r.get("wrong") is not None]
    wrong = sum(checked)
    if not checked:
        out.print("# Out of bounds values : not checked (--no-check)")
    else:
        out.print(f"# Out of bounds values : {wrong} {'OK' if not wrong else 'FAILED'}")
    out.print(f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.4f} GB/s"
              + (f" (over {unsteady} unsteady of {len(recs)}: see Spread)" if unsteady else "") if busbws else
              "# Avg bus bandwidth    : n/a")
    for line in gap_lines(recs):
        out.print(line)
    evidence = nccl_evidence.run_summary([r.get("effective") for r in recs])
    if evidence:
        out.print(f"# NCCL evidence       : {evidence}")
    for rec in recs:     # a measurement taken while a GPU throttled or a link was down (commbench/health/beside.py)
        causes = (rec.get("gpu_health") or {}).get("causes")
        if causes:
            out.print(f"# GPU while measured  : {rec['collective']} {format_size(rec['size_bytes'])}: "
                      f"{'; '.join(causes[:4])}" + (f" (+{len(causes) - 4} more)" if len(causes) > 4 else ""))
    for why in dict.fromkeys(r["link_peak_reason"] for r in recs if r.get("link_peak_reason")):
        out.print(f"# util, model us n/a  : {why}")
    for why in dict.fromkeys(r["predicted_time_reason"] for r in recs if r.get("predicted_time_reason")):
        out.print(f"# model us n/a        : {why}")


# --format nccl-tests: the plain text of nccl-tests (src/util.cu), one block per collective or strategy label.

NCCL_PROGRAMS = {"all_to_all": "alltoall"}             # binary name stem where nccl-tests spells it otherwise
PIECE_COUNT = ("all_gather", "reduce_scatter", "all_to_all")  # count column: the per-rank piece (paramcount)
NA = "N/A"
HEADERS = [
    "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          " % (("",) * 5),
    "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s " % (
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
        "#wrong"),
    "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s " % (
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
]


def nccl_float(value, width):
    """nccl-tests' getFloatStr: 2, else 1, else 0 decimals, whichever fits width; else an exponent."""
    for text in (f"{value:{width}.2f}", f"{value:{width}.1f}", f"{value:{width}.0f}"):
        if len(text) <= width:
            return text
    return f"{value:{width}.{1 if width >= 7 else 0}e}"[:width]


def _side(rec):
    """time algbw busbw #wrong of one placement; N/A for each where the placement was not measured."""
    if rec is None:
        return f"  {NA:>7}  {NA:>6}  {NA:>6}  {NA:>6}"
    wrong = f"{float(rec['wrong']):6g}" if rec.get("wrong") is not None else f"{NA:>6}"
    return (f"  {nccl_float(rec['time_us'], 7)}  {nccl_float(rec['algbw_gbps'], 6)}"
            f"  {nccl_float(rec['busbw_gbps'], 6)}  {wrong}")


def nccl_count(rec):
    """nccl-tests' count column: elements per rank-call (the piece for all_gather, reduce_scatter, alltoall)."""
    return rec["count"] // rec["world_size"] if rec["collective"] in PIECE_COUNT else rec["count"]


def _nccl_type(dtype):
    """nccl-tests' name of a type (the suite's name in); one it has no name for as it is."""
    return TYPES[dtype].nccl_tests if dtype in TYPES else dtype


def nccl_blocks(records):
    """{name: records}: one block per collective, or per strategy label with both placements together."""
    blocks = {}
    for rec in measurements(records):
        blocks.setdefault(block_name(rec), []).append(rec)
    return blocks


def nccl_rows(recs):
    """[(out record or None, in record or None)] in row_key order; a repeated placement opens a new row."""
    rows, within = [], row_order(recs)
    for rec in sorted(recs, key=lambda r: within(row_key(r))):
        slot = 1 if rec["in_place"] else 0
        row = next((r for r in rows if row_key(r[0]) == row_key(rec) and r[1][slot] is None), None)
        if row is None:
            row = (rec, [None, None])
            rows.append(row)
        row[1][slot] = rec
    return [tuple(pair) for _, pair in rows]


def nccl_header(name, first, sizes):
    """A block's opening lines, from its first record (and the sizes known: all of them, or the first alone when
    the rows are printed as they are measured; the record's min_bytes/max_bytes/step_factor say what was asked)."""
    program = name if first.get("strategy") else NCCL_PROGRAMS.get(name, name) + "_perf"
    step = sizes[1] // sizes[0] if len(sizes) > 1 else 1
    lines = [f"# Collective test starting: {program}",
             f"# nThread 1 nGpus 1 minBytes {first.get('min_bytes', sizes[0])} maxBytes "   # as requested (-b -e -f)
             f"{first.get('max_bytes', sizes[-1])} step: {first.get('step_factor', step)}(factor) "
             f"warmup iters: {first['warmup']} iters: {first['iters']} agg iters: {first.get('agg_iters', 1)} "
             f"validation: {int(first.get('wrong') is not None)} "
             f"graph: {int(first.get('time_source') == 'cuda_graph')} unalign: 0"]
    if first.get("blocking"):
        lines.append("# Blocking Enabled: wait after each inner iteration (-m), no barrier ")
    return lines + ["#", f"# commbench: {first['backend']}, {ranks_on(first)} "
                    f"({', '.join(first.get('hosts') or [])}), time over ranks: {first.get('agg', 'avg')}", "#",
                    *HEADERS]


def nccl_row(out, inp):
    """One row: a size's two placements (either None where not measured)."""
    rec = out or inp
    root = rec.get("root") if rec.get("root") is not None else -1
    return (f"{rec['size_bytes']:12d}  {nccl_count(rec):12d}  {_nccl_type(rec['dtype']):>8}"
            f"  {rec.get('op') or 'none':>6}  {root:6d}{_side(out)}{_side(inp)}")


def nccl_footer(name, recs):
    """A block's closing lines, over all its records."""
    program = name if recs[0].get("strategy") else NCCL_PROGRAMS.get(name, name) + "_perf"
    checked = any(r.get("wrong") is not None for r in recs)
    failed = sum(1 for r in recs if r.get("wrong"))
    line, _ = spread_line(recs)
    lines = [line] if line else []
    busbws = [r["busbw_gbps"] for r in recs if r.get("busbw_gbps") is not None]
    lines.append(f"# {'Out of bounds values':<20} : {failed} {'FAILED' if failed else 'OK'}" if checked else
                 f"# {'Out of bounds values':<20} : {NA} (not checked: --no-check)")
    lines.append(f"# {'Avg bus bandwidth':<20} : {sum(busbws) / len(busbws) if busbws else 0:g} ")
    return lines + ["#", f"# Collective test concluded: {program}"]


def nccl_block(name, recs):
    return (nccl_header(name, recs[0], sorted({r["size_bytes"] for r in recs}))
            + [nccl_row(out, inp) for out, inp in nccl_rows(recs)] + nccl_footer(name, recs))


def block_name(rec):
    """The block a record belongs to: its collective, or its strategy's label (both placements together)."""
    return record_label({**rec, "in_place": None}) if rec.get("strategy") else rec["collective"]


def nccl_tests_text(records):
    return "".join(line + "\n" for name, recs in nccl_blocks(records).items() for line in nccl_block(name, recs))


def print_nccl_tests(records):
    sys.stdout.write(nccl_tests_text(records))
    sys.stdout.flush()


class NcclStream:
    """--format nccl-tests in a pipe, as nccl-tests prints it: each row on stdout as soon as it is measured (both
    placements of a size, or one where the next record shows the other will not come), the block's header before
    its first row, its footer when the run ends. A run of several collectives measures them interleaved, size by
    size: the first block's rows stream; the others' are held and printed whole after it. A record writer (write,
    close) beside the user's --out. places: {collective: the placements its configs measure} (the plan's), so that a
    row is printed the moment its last placement is measured; a strategy's block learns them from its rows."""

    def __init__(self, places=None, stream=None):
        self.stream, self.places = stream or sys.stdout, places or {}
        self.blocks, self.pending = {}, None    # name -> records; the streamed block's row waiting for its pair

    def write(self, rec):
        if rec.get("event") or rec.get("collective") is None:
            return
        name = block_name(rec)
        recs = self.blocks.setdefault(name, [])
        recs.append(rec)
        if name != next(iter(self.blocks)):
            return
        if len(recs) == 1:
            self._lines(nccl_header(name, rec, [rec["size_bytes"]]))
        slot = 1 if rec["in_place"] else 0
        if self.pending and (row_key(self.pending[0] or self.pending[1]) != row_key(rec) or self.pending[slot]):
            self._flush()
        self.pending = self.pending or [None, None]
        self.pending[slot] = rec
        places = self.places.get(rec["collective"]) if not rec.get("strategy") else None
        if places is None:  # a strategy: what its rows so far measured
            places = {r["in_place"] for r in recs}
        if all(self.pending[1 if p else 0] for p in places):
            self._flush()

    def _flush(self):
        if self.pending:
            self._lines([nccl_row(*self.pending)])
        self.pending = None

    def _lines(self, lines):
        try:
            self.stream.write("".join(line + "\n" for line in lines))
            self.stream.flush()
        except (BrokenPipeError, ValueError):   # the reader (head, a closed pager) left: the run goes on
            pass

    def close(self):
        """The streamed block's last row and footer, then every other block whole."""
        self._flush()
        for i, (name, recs) in enumerate(self.blocks.items()):
            self._lines(nccl_footer(name, recs) if i == 0 else nccl_block(name, recs))
        self.blocks = {}


def render(records, fmt, table_fn):
    """stdout in the chosen --format: table_fn's tables, nccl-tests' text, JSON lines or CSV."""
    if fmt == "nccl-tests":
        print_nccl_tests(records)
    else:
        emit(records, fmt, table_fn)
