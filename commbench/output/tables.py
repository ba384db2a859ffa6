"""commbench records as tables: one per collective and placement, nccl-tests' columns then the suite's (util, the
model's time, the spread marks), and the lines under them."""
import io
import os

from rich.console import Console

from benchcore.processes.busy import OTHERS_BUSY
from benchcore.report.render import console, print_table
from benchcore.units import format_size
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
    rather than with a number cut short. streamed: the TableStream (commbench/output/stream.py) that printed the first
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


PIECE_COUNT = ("all_gather", "reduce_scatter", "all_to_all")  # count column: the per-rank piece (paramcount)


def nccl_count(rec):
    """nccl-tests' count column: elements per rank-call (the piece for all_gather, reduce_scatter, alltoall)."""
    return rec["count"] // rec["world_size"] if rec["collective"] in PIECE_COUNT else rec["count"]
