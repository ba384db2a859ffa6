"""`commbench overlap`: overlap patterns side by side (commbench/cases/overlap.py): how much of the
communication a training step still pays beside its compute, with verdicts on the exposed communication."""
import statistics

import click

from benchcore import stats
from benchcore.report import console, line_plot, print_table
from benchcore.units import format_size
from commbench.cases.case import TOTAL
from commbench.cases.registry import PATTERN_NAMES, parse_names, record_label
from commbench.commands import verdict
from commbench.launch.spec import launch_options
from commbench.plan import case_options, measure_options, overlap_options, repeats_option
from commbench.runner import measure

HIDDEN = 0.01   # exposed communication below this share of the communication alone counts as hidden (verdicts
#                 compare logarithms, and an exposure of 0 +- noise has none)
COLUMNS = [("label", "pattern", None), ("comm_us", "comm us", ".1f"), ("compute_us", "compute us", ".1f"),
           ("sequential_us", "sequential us", ".1f"), ("overlapped_us", "overlapped us", ".1f"),
           ("exposed_comm_us", "exposed us", ".1f"), ("predicted_exposed_comm_us", "model exposed us", ".1f"),
           ("overlap_efficiency", "efficiency", ".2f"), ("compute_slowdown", "compute x", ".2f"),
           ("comm_slowdown", "comm x", ".2f"), ("compute_tflops", "TFLOP/s", ".3f"), ("repeats", "n", "d"),
           ("wrong", "#wrong", "d")]
FIGURES = [key for key, _, fmt in COLUMNS if fmt and fmt.startswith(".")]


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def exposure(rec):
    """The record with time_us replaced by its exposed communication (floored at HIDDEN x comm): what the
    verdicts rank."""
    return {**rec, "time_us": max(rec["exposed_comm_us"], HIDDEN * rec["comm_us"])}


def judged(records):
    return [exposure(r) for r in records if not r.get("event") and r.get("phase") == TOTAL
            and r.get("exposed_comm_us") is not None]


def judge(records):
    outcomes = verdict.judge(judged(records))
    run_id = next((r["run_id"] for r in records if r.get("run_id")), None)
    return verdict.verdicts(outcomes, run_id, check="overlap", better="leaves less exposed communication than")


def rows(records):
    """{size: [row per config]}: medians over repeats of every figure."""
    by = {}
    for rec in records:
        if not rec.get("event") and rec.get("phase") == TOTAL:
            by.setdefault(rec["size_bytes"], {}).setdefault(record_label(rec), []).append(rec)
    return {size: [{"label": label, "repeats": len(recs), "wrong": sum(r["wrong"] or 0 for r in recs),
                    **{k: _median([r.get(k) for r in recs]) for k in FIGURES}}
                   for label, recs in labels.items()] for size, labels in sorted(by.items())}


def print_overlap(records):
    first = next(r for r in records if not r.get("event"))
    for size, table in rows(records).items():
        print_table(table, COLUMNS, title=f"payload {format_size(size)}: {first['backend']}, {first['world_size']} "
                    f"ranks on {first['nodes']} node(s); exposed = overlapped - compute alone (median of n repeats)")
    notes = [r["reason"] for r in records if r.get("event") == "verdict" and r.get("check") == "overlap"]
    if notes:
        out = console()
        out.print(f"verdicts on exposed communication ({stats.METHOD}):")
        for line in notes:
            out.print(f"  {line}")


def plot(records, path):
    series = {}
    for rec in records:
        if not rec.get("event") and rec.get("phase") == TOTAL and rec.get("exposed_comm_us") is not None:
            series.setdefault(record_label(rec), {}).setdefault(rec["size_bytes"], []).append(rec["exposed_comm_us"])
    line_plot(path, {k: [(s, _median(t)) for s, t in v.items()] for k, v in series.items()},
              "payload (bytes)", "exposed communication (us, median of repeats)",
              "commbench overlap: communication the step still pays (lower is better)")


@click.command()
@click.option("--patterns", default=",".join(PATTERN_NAMES), show_default=True,
              help="Comma list: " + ",".join(PATTERN_NAMES))
@repeats_option(3)
@overlap_options()
@case_options()
@click.option("--plot", type=click.Path(dir_okay=False), default=None,
              help="PNG: exposed communication vs payload, one line per pattern config.")
@measure_options("1M", "64M")
@launch_options
def overlap(patterns, repeats, **kw):
    """Overlap patterns side by side: communication beside compute, as training steps run it.

    Each pattern (ddp: all_reduce buckets behind the kernels; pipelined: chunked all_gather ahead of them;
    pipelined-rs: reduce_scatter of each kernel's output) is measured four ways in one launch, interleaved:
    communication alone, compute alone, both in sequence, both overlapped. The table shows the exposed
    communication (overlapped - compute alone: what the step still pays), the overlap efficiency ((comm +
    compute - overlapped) / min(comm, compute): 1 when the shorter one is hidden) and how much each slows the
    other; patterns are ranked by exposed communication only beyond the repeats' spread.

    \b
    Example:
      commbench overlap --patterns ddp,pipelined --compute-ratio 0.5,1,2 -b 4M -e 64M --nodes 2
      commbench overlap --patterns ddp --buckets 1,4,16 --gemm 1024,1024,1024 -b 16M -e 16M
    """
    kw["repeats"] = repeats
    measure(parse_names(patterns, "overlap", "--patterns"), kw, print_overlap, "overlap patterns", plot, judge)
