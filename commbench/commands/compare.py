"""`commbench compare` and `commbench chunked`: strategies side by side on the same payloads, with verdicts.

Every strategy leaves each rank holding the same N-byte tensor, so the headline is the time to that
tensor. Each config runs --repeats separate timed measurements, interleaved per payload; a strategy
is called faster only where commbench/commands/verdict.py finds the difference beyond the repeats' spread.
"""
import statistics

import click

from benchcore.results import schema, stats
from benchcore.errors import UserError, refuse_given
from benchcore.results.records import PLOT_SUFFIXES, new_output_option
from benchcore.report.render import console, line_plot, print_table
from benchcore.units import format_size
from commbench.cases.case import TOTAL
from commbench.cases.registry import STRATEGY_NAMES, parse_names, record_label
from commbench.commands import verdict
from commbench.commands.overlap import run_chunked_overlap
from commbench.launch.spec import launch_options, parse_backends
from commbench.plan import case_options, measure_options, overlap_options, repeats_option
from commbench.runner import measure

PLOT_OPTION = click.option("--plot", default=None, callback=new_output_option("--plot", PLOT_SUFFIXES),
                           help="PNG: time to the final tensor vs payload, log-log, one line per config "
                                "(a new file).")


def _median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def _speedup(outcome, label, baseline):
    """'1.32 [1.20, 1.45]' (baseline time / the group's pooled time) on a group's first row only, '= NAME (same
    work)' on its other rows and on the baseline's group, '' where nothing to say."""
    if outcome is None or label == baseline or not any(baseline in g.labels for g in outcome.groups):
        return ""
    mine, base = outcome.group_of(label), outcome.group_of(baseline)
    if mine is base or label != mine.labels[0]:
        return f"= {baseline if mine is base else mine.labels[0]} (same work)"
    r = stats.ratio_interval(base.times, mine.times)
    if r is None:
        return f"{base.time / mine.time:.2f} (no interval)"
    mark = "faster" if r.low > 1 else "slower" if r.high < 1 else "same"
    return f"{r.ratio:.2f} [{r.low:.2f}, {r.high:.2f}] {mark}"


def candidates(records):
    """(candidate_of, work_of) of compare's records: with several backends the backend is part of both (the same
    strategy on another transport is another candidate, never the same work)."""
    if len({r.get("backend") for r in records if not r.get("event")}) < 2:
        return record_label, verdict.record_work
    return (lambda rec: f"{record_label(rec)} [{rec['backend']}]",
            lambda rec: verdict.record_work(rec) + (rec["backend"],))


def payload_rows(records, outcomes, baseline):
    """{size: [row per config and phase]}: medians over repeats, the spread (None from one repeat: n/a, not 0),
    speed-up vs baseline."""
    by = {}
    label_of = candidates(records)[0]
    for rec in records:
        if not rec.get("event"):
            by.setdefault(rec["size_bytes"], {}).setdefault(label_of(rec), []).append(rec)
    found = {o.size: o for o in outcomes}
    table = {}
    for size, labels in sorted(by.items()):
        rows = []
        for label, recs in labels.items():
            times = [r["time_us"] for r in recs]
            spread = (max(times) - min(times)) / _median(times) * 100 if len(times) > 1 else None
            rows.append({"label": label, "time_us": _median(times), "spread": spread,
                         "repeats": len(recs), "busbw_gbps": _median([r["busbw_gbps"] for r in recs]),
                         "link_utilization": _median([r.get("link_utilization") for r in recs]),
                         "predicted_time_us": recs[0].get("predicted_time_us"),  # the model's: same every repeat
                         "vs": _speedup(found.get(size), label, baseline) if recs[0].get("phase") == TOTAL else "",
                         "wrong": sum(r["wrong"] or 0 for r in recs) if recs[0].get("wrong") is not None else None,
                         **{k: recs[0].get(k) for k in ("wire_bytes", "max_abs_error", "max_rel_error")}})
        table[size] = rows
    return table


def print_compare(records, baseline="ring"):
    """One table per payload, then the verdict records' sentences (none when the run failed or was wrong)."""
    out = console()
    label_of, work_of = candidates(records)
    outcomes = verdict.judge(records, candidate_of=label_of, work_of=work_of)
    first = next(r for r in records if not r.get("event"))
    backends = "/".join(dict.fromkeys(r["backend"] for r in records if not r.get("event")))
    if label_of is not record_label:  # several backends: the baseline on the first one
        baseline = label_of({**first, "case": baseline, "phase": TOTAL})
    notes = [r["reason"] for r in records if r.get("event") == "verdict" and r["check"] == "fastest"]
    notes += verdict.equivalence_lines(outcomes)
    notes += [r["reason"] for r in records if r.get("event") == "verdict" and r["check"] == "chunked"]
    columns = [("label", "strategy", None), ("time_us", "time us", ".1f"), ("predicted_time_us", "model us", ".1f"),
               ("spread", "spread %", ".1f"),
               ("repeats", "n", "d"), ("busbw_gbps", "busbw GB/s", ".3f"), ("link_utilization", "link util", ".2f"),
               ("vs", f"speed-up vs {baseline} [95% CI]", None), ("wrong", "#wrong", "d")]
    checked = "0 wrong" if {r.get("wrong") for r in records if not r.get("event")} == {0} else ""
    if checked:  # every row exact: said once in the title, as run's tables do (the table fits 100 columns)
        columns = [c for c in columns if c[0] != "wrong"]
    if any(r.get("max_abs_error") is not None for r in records):
        columns += [("wire", "wire bytes", None), ("max_abs_error", "max abs err", ".2e"),
                    ("max_rel_error", "max rel err", ".2e")]
    for size, rows in payload_rows(records, outcomes, baseline).items():
        for row in rows:
            row["wire"] = format_size(row["wire_bytes"]) if row.get("wire_bytes") else ""
        print_table(rows, columns, title=f"payload {format_size(size)}: time to the same final tensor on every rank "
                    f"(median of n repeats; {backends}, {first['world_size']} ranks on {first['nodes']} node(s)"
                    f"{', ' + checked if checked else ''})")
    for why in dict.fromkeys(r["link_peak_reason"] for r in records if r.get("link_peak_reason")):
        out.print(f"model us, link util n/a: {why}")
    if notes:
        out.print(f"verdicts ({stats.METHOD}):")
    for line in notes:
        out.print(f"  {line}")


def plot(records, path):
    series = {}
    label_of = candidates(records)[0]
    for rec in records:
        if not rec.get("event") and rec.get("phase") == TOTAL:
            series.setdefault(label_of(rec), {}).setdefault(rec["size_bytes"], []).append(rec["time_us"])
    line_plot(path, {k: [(s, _median(t)) for s, t in v.items()] for k, v in series.items()},
              "payload (bytes)", "time to the final tensor (us, median of repeats)",
              "commbench compare: lower is better", log_y=True)


def chunked_answer(outcomes, run_id):
    """The seed's question answered, as a verdict record whose reason is the paragraph."""
    outcomes = sorted(outcomes, key=lambda o: o.size)
    labels = list(dict.fromkeys(l for o in outcomes for g in o.groups for l in g.labels))
    chunked = [l for l in labels if l.split()[0] == "chunked"]
    plain = next((l for l in labels if l.split()[0] == "plain"), None)
    def top(label):  # payloads where this config is among the fastest, and its mean time over the best
        among = sum(1 for o in outcomes if o.group_of(label) in o.tied)
        return among, -stats.geometric_mean([o.group_of(label).time / o.groups[0].time for o in outcomes])
    best = max(chunked, key=top)

    def settled(o):  # one of ring, plain and the recommended config is significantly faster than the other two
        fam = list({id(g): g for g in (o.group_of("ring"), o.group_of(plain), o.group_of(best))}.values())
        fastest = min(fam, key=lambda g: g.time)
        return len(fam) > 1 and all((r := stats.ratio_interval(fastest.times, g.times)) is not None and r.high < 1
                                    for g in fam if g is not fastest)
    nothing = [o.size for o in outcomes if not settled(o)]
    tail = ("Among ring, plain and that config nothing is significantly better at " +
            ", ".join(format_size(s) for s in nothing) + "." if nothing else
            "At every payload one of ring, plain and that config is significantly faster than the other two.")
    beats_from, intervals = None, None
    for o in reversed(outcomes):
        mine = o.group_of(best)
        if plain in mine.labels or "ring" in mine.labels:
            break  # at or below its threshold: the same single all_gather as plain
        vs = [stats.ratio_interval(mine.times, o.group_of(other).times) for other in ("ring", plain)]
        if any(r is None or r.high >= 1 for r in vs):
            break
        beats_from, intervals = o.size, vs
    pick = _config_of(best)
    if beats_from is None:
        text = (f"Answer: do not chunk here: at the largest payload measured ({format_size(outcomes[-1].size)}) "
                f"no chunked config is significantly faster than both ring and plain all_gather, so there is no "
                f"payload from which chunking pays. {tail}")
        fields = dict(winner=None)
    else:
        ring_r, plain_r = intervals
        text = (f"Answer: use chunked with threshold {pick[0]}, chunk size {pick[1]}, in-flight {pick[2]} "
                f"({best}: among the fastest at {top(best)[0]} of {len(outcomes)} payloads). Chunking beats both ring "
                f"and plain all_gather from {format_size(beats_from)} up: time ratio vs ring {ring_r.text()}, vs plain "
                f"{plain_r.text()} at {format_size(beats_from)}. {tail}")
        fields = dict(winner=best, versus="ring, " + plain, ratio=ring_r.ratio, ratio_low=ring_r.low,
                      ratio_high=ring_r.high, beats_from_bytes=beats_from)
    return schema.event("commbench", "verdict", text, run_id=run_id, check="chunked", method=stats.METHOD,
                        sizes=[o.size for o in outcomes if beats_from and o.size >= beats_from],
                        no_difference_sizes=nothing, **fields)


def _config_of(label):
    """('16M', '2M', '1') from 'chunked 2M x1 >16M'."""
    _, chunk, inflight, threshold = label.split()[:4]
    return threshold.lstrip(">"), chunk, inflight.lstrip("x")


def judge(records, answer):
    """The verdict records of a compare (and chunked's answer)."""
    label_of, work_of = candidates(records)
    outcomes = verdict.judge(records, candidate_of=label_of, work_of=work_of)
    run_id = next((r["run_id"] for r in records if r.get("run_id")), None)
    found = verdict.verdicts(outcomes, run_id)
    if answer:
        found += [chunked_answer(outcomes, run_id)]
    return found


def run_strategies(names, baseline, kw, answer=False):
    measure(names, kw, lambda recs: print_compare(recs, baseline), "strategies", plot,
            lambda recs: judge(recs, answer))


@click.command()
@click.option("--strategies", default="ring,rs-ag,plain,chunked", show_default=True,
              help="Comma list: " + ",".join(STRATEGY_NAMES))
@click.option("--baseline", default="ring", show_default=True, help="Strategy the speed-up is measured against.")
@click.option("--backends", default=None, metavar="LIST",
              help="Comma list of backends (gloo,mpi): every strategy on each, side by side; one launch per backend "
                   "and repeat, each round starting with the next backend.")
@repeats_option(3)
@case_options()
@PLOT_OPTION
@measure_options("1M", "1G")
@launch_options
def compare(strategies, baseline, repeats, backends, **kw):
    """Strategies side by side on the same payloads: time to the same final tensor, with verdicts.

    Every strategy leaves each rank holding the same N-byte tensor (see commbench/cases/strategies.py for
    what each one moves). Every config is measured --repeats times, interleaved per payload; the
    speed-up over the baseline comes with a 95% interval, and a strategy is named faster only when
    the interval excludes 1. Configs that run the same operations are reported once.

    \b
    Example:
      commbench compare --strategies ring,plain,chunked -b 1M -e 256M --chunk-size 1M,4M --repeats 5
      commbench compare --strategies ring,hierarchical --nodes 2 --nproc-per-node 2 -b 1M -e 256M
      commbench compare --backends gloo,mpi --strategies ring,plain,chunked -b 1M -e 64M -f 4
    """
    names = parse_names(strategies, "strategy", "--strategies")
    if backends is not None:
        kw["backends"] = parse_backends(backends)
    if baseline not in names:
        raise UserError(f"--baseline {baseline} is not one of --strategies {','.join(names)}")
    kw["repeats"] = repeats
    run_strategies(names, baseline, kw)


@click.command()
@repeats_option(3)
@click.option("--overlap", is_flag=True,
              help="With compute beside the communication: pipelined chunks (the GEMM of chunk k while chunk k+1 is "
                   "on the wire) against one all_reduce after the compute and one plain all_gather, per compute "
                   "ratio; answers from which payload chunking hides more (see commbench overlap).")
@overlap_options()
@case_options()
@PLOT_OPTION
@measure_options("1M", "1G")
@launch_options
def chunked(repeats, overlap, **kw):
    """Does Megatron-style chunking beat ring and a plain all_gather, and with which settings?

    Sweeps the chunked all_gather's threshold, chunk size and in-flight depth against ring
    and plain (one all_gather of the whole payload), and ends with the answer: the
    recommended (threshold, chunk size, in-flight), the payload from which chunking is
    significantly faster, and the payloads where nothing is.

    \b
    Example:
      commbench chunked -b 4M -e 256M --chunk-size 1M,2M,4M --threshold 8M,16M --inflight 1,2,4 --nodes 2
      commbench chunked --overlap --compute-ratio 0.5,1,2 -b 4M -e 64M --chunk-size 1M,4M --nodes 2
    """
    kw["repeats"] = repeats
    if overlap:
        refuse_given(["buckets"], "chunked --overlap measures one all_reduce after the compute (ddp with 1 bucket); "
                                  "buckets go with commbench overlap --patterns ddp")
        run_chunked_overlap(kw)
        return
    for name, default in (("compute_ratio", "1"), ("gemm", None), ("compute_kernel", "gemm"), ("compute_threads", 1),
                          ("buckets", "4")):
        if kw.pop(name) != default:
            raise UserError(f"--{name.replace('_', '-')} sizes the compute of chunked --overlap: add --overlap")
    run_strategies(["ring", "plain", "chunked"], "ring", kw, answer=True)
