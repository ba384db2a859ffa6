"""`commbench overlap`: overlap patterns side by side (commbench/cases/overlap.py): how much of the
communication a training step still pays beside its compute, with verdicts on the exposed communication."""
import math
import re
import statistics

import click

from benchcore.report import figures
from benchcore.report.render import console, print_table
from benchcore.results import stats
from benchcore.results.records import PLOT_SUFFIXES, new_output_option
from benchcore.units import format_size
from commbench.cases.case import TOTAL, check_steps
from commbench.cases.collectives import DTYPES
from commbench.cases.overlap import WHOLE
from commbench.cases.overlap_figures import RATIO_BAND
from commbench.cases.overlap_model import predicted
from commbench.cases.registry import CASES, PATTERN_NAMES, parse_names, record_label
from commbench.commands import verdict
from commbench.commands.options import (case_options, launch_options, measure_options, overlap_options, parse,
                                        repeats_option, time_budget_option)
from commbench.output.tables import ranks_on
from commbench.runner import measure

HIDDEN = 0.01   # exposed communication below this share of the communication alone counts as hidden (verdicts
#                 compare logarithms, and an exposure of 0 +- noise has none)
# times in whole microseconds: a step takes hundreds of us to seconds here, and a tenth of a us was noise that
# pushed the tables past 100 columns
COLUMNS = [("label", "pattern", None), ("comm_us", "comm us", ".0f"), ("compute_us", "compute us", ".0f"),
           ("sequential_us", "sequential us", ".0f"), ("overlapped_us", "overlapped us", ".0f"),
           ("exposed_comm_us", "exposed us", ".0f"), ("predicted_exposed_comm_us", "model exposed us", ".0f"),
           ("overlap_efficiency", "effic.", ".2f"), ("compute_slowdown", "compute x", ".2f"),
           ("comm_slowdown", "comm x", ".2f"), ("ratio", "ratio", None), ("compute_tflops", "TFLOP/s", ".3f"),
           ("repeats", "n", None), ("wrong", "#wrong", "d")]
FIGURES = [key for key, _, fmt in COLUMNS if fmt and fmt.startswith(".")] + ["compute_ratio_measured"]
OFF = "*"   # a row whose compute was off the asked ratio (overlap_figures.RATIO_BAND) in any of its repeats
# printed as two tables per payload, what was timed and how well it overlapped, each within 100 columns
TABLES = (COLUMNS[:6], COLUMNS[:1] + COLUMNS[6:])


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def exposure(rec):
    """The record with time_us replaced by its exposed communication (floored at HIDDEN x comm): what the
    verdicts rank."""
    return {**rec, "time_us": max(rec["exposed_comm_us"], HIDDEN * rec["comm_us"])}


def totals(records):
    return [r for r in records if not r.get("event") and r.get("phase") == TOTAL]


def judged(records):
    return [exposure(r) for r in totals(records) if r.get("exposed_comm_us") is not None]


def judge(records):
    outcomes = verdict.judge(judged(records))
    run_id = next((r["run_id"] for r in records if r.get("run_id")), None)
    out = verdict.verdicts(outcomes, run_id, check="overlap", better="leaves less exposed communication than")
    for rec in out:   # what each verdict used: the repeats figured, of those measured (a note says why not all)
        used = used_counts([r for r in totals(records) if r["size_bytes"] in rec["sizes"]])
        short = {label: (u, n) for label, (u, n) in used.items() if u < n}
        if short:
            rec["reason"] = rec["reason"].replace("(fewer than 2 repeats: no interval)",
                                                  "(fewer than 2 figured repeats: no interval)")
            rec["reason"] += "; used " + ", ".join(f"{u} of {n} measurements of {label}" for label, (u, n) in
                                                   short.items()) + " (the rest not figured: see the note)"
    return out


def used_counts(recs):
    """{label: (repeats figured, repeats measured)} over the total records recs (their sizes pooled)."""
    out = {}
    for rec in recs:
        u, n = out.get(record_label(rec), (0, 0))
        out[record_label(rec)] = (u + (rec.get("exposed_comm_us") is not None), n + 1)
    return out


def rows(records):
    """{size: [row per config]}: medians over repeats of every figure; n says the repeats figured of those measured
    (where a repeat was not figured), compute/comm the ratio measured, marked where any repeat was off the asked."""
    by = {}
    for rec in totals(records):
        by.setdefault(rec["size_bytes"], {}).setdefault(record_label(rec), []).append(rec)
    out = {}
    for size, labels in sorted(by.items()):
        out[size] = []
        for label, recs in labels.items():
            row = {"label": label, "wrong": sum(r["wrong"] or 0 for r in recs),
                   **{k: _median([r.get(k) for r in recs]) for k in FIGURES}}
            used, n = used_counts(recs)[label]
            row["repeats"] = str(n) if used == n else f"{used}/{n}"
            ratio = row["compute_ratio_measured"]
            row["ratio"] = None if ratio is None else f"{ratio:.2f}" + \
                (OFF if any(r.get("compute_ratio_note") for r in recs) else "")
            out[size].append(row)
    return out


NOTE = re.compile(r"overlapped ([0-9.]+) % under its (\w+) alone(.*)")


def note_lines(records):
    """One line per kind of overlap_note (taken at the floor, not figured), however many measurements it holds:
    'note: 40 of 54 measurements overlapped 0.1-4.9 % under their communication alone (noise between phases): taken
    at that floor, fully hidden (ddp B=4 R=0.5, ddp B=4 R=1 at 4M-64M)'; more than 3 configs are counted."""
    totals = [r for r in records if not r.get("event") and r.get("phase") == TOTAL]
    kinds = {}
    for rec in totals:
        found = NOTE.fullmatch(rec.get("overlap_note") or "")
        if found:
            kinds.setdefault((found[2], found[3]), []).append((float(found[1]), rec))
    for (part, rest), seen in kinds.items():
        under = sorted(u for u, _ in seen)
        sizes = sorted({r["size_bytes"] for _, r in seen})
        span = f"{under[0]:.1f}" + (f"-{under[-1]:.1f}" if under[-1] != under[0] else "")
        labels = list(dict.fromkeys(record_label(r) for _, r in seen))
        where = (", ".join(labels) if len(labels) <= 3 else f"{len(labels)} pattern configs") + " at " + \
            format_size(sizes[0]) + (f"-{format_size(sizes[-1])}" if len(sizes) > 1 else "")
        yield (f"note: {len(seen)} of {len(totals)} measurements overlapped {span} % under their {part} alone{rest} "
               f"({where})")


def ratio_lines(records):
    """One line for the measurements whose compute was off the asked ratio (overlap_figures.ratio_note): how many,
    asked and measured, where; they are kept in the tables and verdicts, marked."""
    off = [r for r in totals(records) if r.get("compute_ratio_note")]
    if not off:
        return []
    asked = sorted({r["compute_ratio"] for r in off})
    got = sorted(r["compute_ratio_measured"] for r in off)
    labels = list(dict.fromkeys(record_label(r) for r in off))
    sizes = sorted({r["size_bytes"] for r in off})
    where = (", ".join(labels) if len(labels) <= 3 else f"{len(labels)} pattern configs") + " at " + \
        format_size(sizes[0]) + (f"-{format_size(sizes[-1])}" if len(sizes) > 1 else "")
    return [f"{OFF} compute/comm: {len(off)} of {len(totals(records))} measurements' compute alone came out "
            f"{got[0]:.2f}-{got[-1]:.2f}x their communication where {'/'.join(f'{a:g}' for a in asked)}x was asked "
            f"(off by more than {RATIO_BAND:g}x; {where}): kept and marked; their overlap figures are for the ratio "
            "measured, not the asked one (a busy machine, or the kernel's size capped)"]


def shared_cores(records):
    """The line saying what a table means where ranks share one host's CPUs with each other's communication (CPU
    ranks all on one host: local ranks, or emulated nodes); None elsewhere."""
    recs = totals(records)
    first = recs[0] if recs else None
    if not first or first.get("time_source") != "cpu" or first.get("world_size", 1) < 2 or not (
            first.get("emulated") or first.get("local_world_size") == first.get("world_size")):
        return None
    cpus, threads, compute = first.get("host_cpus"), first.get("rank_threads"), first.get("compute_threads") or 1
    over = first["world_size"] * compute
    return (f"shared cores: {first['world_size']} ranks on one host's {cpus or '?'} CPUs, each with {compute} compute "
            f"thread of its {threads or '?'} OS threads ({first['backend']}'s beside it): compute and communication "
            "take turns on these cores, so 'overlapped' is their contention here, not what a link hides; an "
            "efficiency at or below 0 is this host's, not the pattern's"
            + (f"; {over} compute threads on {cpus} CPUs: compute alone is oversubscribed too" if cpus and over > cpus
               else ""))


def print_overlap(records):
    first = next(r for r in records if not r.get("event"))
    shared = shared_cores(records)
    for size, table in rows(records).items():
        times, overlap = TABLES
        print_table(table, times, title=f"payload {format_size(size)}: {first['backend']}, {ranks_on(first)}; "
                    "exposed = overlapped - compute alone (median of n repeats)"
                    + ("; cores shared: see below" if shared else ""))
        print_table(table, overlap, title=f"payload {format_size(size)}: the model's exposed time; efficiency 1 = "
                    "the shorter part hidden, 0 = none (effic.); x = slowdown inside the overlap over alone; ratio = compute "
                    f"alone / comm alone ({OFF}: off the asked); n = repeats (figured/measured where some were not)")
    whole = [f"{WHOLE} = a chunk as large as -e: every payload in one operation, nothing pipelined (chunked "
             "--overlap adds it as its one-all_gather baseline)"] \
        if any(f" {WHOLE} " in record_label(r) for r in totals(records)) else []
    out = console()
    for line in ([shared] if shared else []) + whole + ratio_lines(records) + list(note_lines(records)):
        out.print(line, markup=False)
    for check, title in (("overlap", f"verdicts on exposed communication ({stats.METHOD}):"),
                         ("chunked overlap", "the answer:")):
        notes = [r["reason"] for r in records if r.get("event") == "verdict" and r.get("check") == check]
        if notes:
            out.print(title)
        for line in notes:
            out.print(f"  {line}")


def clip_limit(values):
    """The top of panel (a)'s y axis: Tukey's far-out fence (Q3 + 3 x IQR) over every value drawn, where a value lies
    beyond it (one 420,000 us stall flattened eight lines of 1-10,000 us); None when none does."""
    vals = sorted(v for v in values if v is not None and math.isfinite(v))
    if len(vals) < 4:
        return None
    q1, q3 = vals[len(vals) // 4], vals[(3 * len(vals)) // 4]
    fence = q3 + 3 * (q3 - q1)
    return fence * 1.05 if vals[-1] > fence else None


def overlap_figure(records, command="overlap"):
    """(a) exposed communication vs payload, one line per pattern config through its repeats' median (min-max as
    bars; values beyond clip_limit drawn at the top edge as a triangle, counted in the caption); (b) per pattern
    config, a timeline of one overlapped iteration at the largest payload: each rank's kernels and communication
    as bars, as an Nsight trace shows them. Titled after the command that ran; the titles never overlap."""
    totals_ = [r for r in totals(records) if r.get("exposed_comm_us") is not None]
    series, traced = {}, {}
    for rec in totals_:
        label = record_label(rec)
        series.setdefault(label, []).append((rec["size_bytes"], rec["exposed_comm_us"]))
        if rec.get("timeline") and rec["size_bytes"] >= traced.get(label, {}).get("size_bytes", 0):
            traced[label] = rec
    fig, axes = figures.pyplot().subplots(1 + len(traced), 1, figsize=(11, 4.5 + 2.2 * len(traced)), squeeze=False,
                                          layout="constrained")
    fig.suptitle(f"commbench {command}: communication left exposed beside compute")
    ax = axes[0][0]
    top = clip_limit([y for points in series.values() for _, y in points])
    clipped = []
    for label, points in series.items():
        bars = figures.spread(ax, points, label)
        over = [(x, y) for x, y in points if top is not None and y > top]
        if over:
            clipped += [(y, x, label) for x, y in over]
            ax.plot([x for x, _ in over], [top] * len(over), linestyle="none", marker="^", markersize=7,
                    color=bars[0].get_color() if bars else None, clip_on=False)
    figures.size_axis(ax, "payload")
    title = "(a) communication the step still pays (median, bars: min-max of repeats; lower is better)"
    if clipped:
        ax.set_ylim(0, top)
        y, x, label = max(clipped)
        title += (f"\n{len(clipped)} value(s) above {top:,.0f} us clipped, drawn as \u25b2 at the top (largest "
                  f"{y:,.0f} us: {label} at {format_size(x)})")
    ax.set(ylabel="exposed communication (us)", title=title)
    ax.grid(True, which="both", alpha=0.3)
    figures.legend_beside(ax)
    for (label, rec), (ax,) in zip(traced.items(), axes[1:]):
        for rank, events in enumerate(rec["timeline"]):
            for e in events:   # kernels in one lane; operations in four sub-lanes, so that in-flight ones show apart
                lane, height = (rank, 0.35) if e["what"] == "kernel" else (rank + 0.4 + e["step"] % 4 * 0.09, 0.08)
                ax.broken_barh([(e["start_us"] / 1e3, (e["end_us"] - e["start_us"]) / 1e3)], (lane, height),
                               color="tab:orange" if e["what"] == "kernel" else ("tab:blue", "tab:cyan")[e["step"] % 2])
        ranks = len(rec["timeline"])
        ax.set_yticks([r + d for r in range(ranks) for d in (0.17, 0.57)],
                      [f"rank {r} {w}" for r in range(ranks) for w in ("kernel", "comm")], fontsize="small")
        ax.set(xlabel="ms from the iteration's start", title=f"(b) {label} at {format_size(rec['size_bytes'])}: "
               f"one overlapped iteration (comm bars end when waited on)")
        ax.grid(True, axis="x", alpha=0.3)
    return fig


def plot(records, path, command="overlap"):
    figures.save(overlap_figure(records, command), path)


def model_rows(topo, names, sizes, nodes, local, backend, opts):
    """`commbench model --overlap`: each pattern config's predicted figures at each size and compute ratio."""
    for name in names:
        for cfg in CASES[name].configs(opts, "float32"):
            check_steps(CASES[name], {**cfg, "dtype": "float32"}, sizes, DTYPES["float32"].bytes, nodes * local)
    rows = []
    for size in sizes:
        for name in names:
            case = CASES[name]
            for cfg in case.configs(opts, "float32"):
                cfg = {**cfg, "dtype": "float32", "op": "sum", "root": None}
                for ratio in ([cfg["compute_ratio"]] if cfg.get("compute_ratio") else opts.compute_ratios):
                    rows.append({"size": format_size(size), "size_bytes": size,
                                 "label": record_label({**cfg, "compute_ratio": ratio}),
                                 **predicted(case, cfg, size, topo, nodes * local, nodes, backend, ratio)})
    return rows


@click.command()
@click.option("--patterns", default=",".join(PATTERN_NAMES), show_default=True,
              help="Comma list: " + ",".join(PATTERN_NAMES))
@repeats_option(3)
@time_budget_option
@overlap_options()
@case_options()
@click.option("--plot", default=None, callback=new_output_option("--plot", PLOT_SUFFIXES),
              help="PNG: exposed communication vs payload, and a timeline of one iteration per pattern (a new file).")
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
    measure(parse_names(patterns, "overlap", "--patterns"), parse(kw, repeats=repeats), print_overlap,
            "overlap patterns", plot, judge)
