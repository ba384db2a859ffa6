"""`commbench compare`: strategies side by side on the same payloads, with verdicts.

Every strategy leaves each rank holding the same N-byte tensor, so the headline is the time to that
tensor. Each config runs --repeats separate timed measurements, interleaved per payload; a strategy
is called faster only where commbench/commands/verdict.py finds the difference beyond the repeats' spread, and
only on evidence: a config whose launch's requested setting did not apply (the records' applied block) is shown but
never ranked; one no evidence proves is ranked, marked (verdict.on_evidence).
"""
import statistics

import click

from benchcore.errors import UserError
from benchcore.report.render import console, line_plot, print_table
from benchcore.results import stats
from benchcore.results.records import PLOT_SUFFIXES, new_output_option
from benchcore.units import format_size
from commbench.cases.case import TOTAL
from commbench.cases.registry import STRATEGY_NAMES, parse_names, record_label
from commbench.commands import verdict
from commbench.commands.options import (case_options, launch_options, measure_options, parse, parse_backends,
                                        repeats_option, time_budget_option)
from commbench.output.tables import ranks_on
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
    text = verdict.interval_text(r)
    return text if text.endswith(verdict.NO_CONCLUSION) else f"{text} {mark}"


def candidates(records):
    """(candidate_of, work_of) of compare's records: with several backends the backend is part of both (the same
    strategy on another transport is another candidate, never the same work)."""
    if len({r.get("backend") for r in records if not r.get("event")}) < 2:
        return record_label, verdict.record_work
    return (lambda rec: f"{record_label(rec)} [{rec['backend']}]",
            lambda rec: verdict.record_work(rec) + (rec["backend"],))


def on_evidence(records):
    """(the records compare ranks, their candidate_of (unproven ones marked), work_of, the lines to say, the
    candidates not ranked): verdict.on_evidence over each record's applied block."""
    label_of, work_of = candidates(records)
    kept, marked, dropped, unproven, _ = verdict.on_evidence(records, label_of, lambda r: r.get("applied"))
    return kept, marked, work_of, verdict.evidence_lines(dropped, unproven), dropped


def stood_for(records, label_of, outcomes):
    """{size: {a config not measured: the one measured for it}} from the records' same_operations events (the runner
    measures configs that run the same operations once: commbench/plan.py, stand_ins), each named in the group of
    the one that stood for it, as sweep names its configs a backend runs alike."""
    out = {}
    for ev in records:
        if ev.get("event") == "same_operations":
            label, by = (label_of({**ev[k], "phase": TOTAL}) for k in ("config", "measured_by"))
            for size in ev["sizes"]:
                out.setdefault(size, {})[label] = by
    for o in outcomes:
        for label, by in out.get(o.size, {}).items():
            group = next((g for g in o.groups if by in g.labels or by + verdict.UNPROVEN in g.labels), None)
            if group and label not in group.labels:
                group.labels.append(label)
    return out


def judged(records):
    """(outcomes, label_of, dropped, the evidence lines, stood_for) of compare's records: verdict.judge on evidence,
    each config measured once for others named in its group."""
    kept, label_of, work_of, evidence, dropped = on_evidence(records)
    outcomes = verdict.judge(kept, candidate_of=label_of, work_of=work_of)
    return outcomes, label_of, dropped, evidence, stood_for(records, candidates(records)[0], outcomes)


def payload_rows(records, outcomes, baseline, label_of=None, dropped=(), stood=None):
    """{size: [row per config and phase]}: medians over repeats, the spread (None from one repeat: n/a, not 0),
    speed-up vs baseline ('not ranked' for a config in dropped: a setting not applied); label_of: the rows' names
    (default: candidates'); stood: stood_for's, each config not measured a row '= the one measured' after it."""
    by = {}
    label_of = label_of or candidates(records)[0]
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
                         "vs": "" if recs[0].get("phase") != TOTAL else "not ranked: not applied"
                         if label in dropped else _speedup(found.get(size), label, baseline),
                         "wrong": sum(r["wrong"] or 0 for r in recs) if recs[0].get("wrong") is not None else None,
                         **{k: recs[0].get(k) for k in ("wire_bytes", "max_abs_error", "max_rel_error")}})
            if recs[0].get("phase") == TOTAL:
                rows += [{"label": other, "time_us": f"= {label}", "vs": _speedup(found.get(size), other, baseline)
                          or f"= {label} (same work)", **dict.fromkeys(("spread", "repeats", "busbw_gbps",
                                                                         "link_utilization", "predicted_time_us",
                                                                         "wrong"), "")}
                         for other, by in (stood or {}).get(size, {}).items()
                         if by == label.removesuffix(verdict.UNPROVEN)]
        table[size] = rows
    return table


def print_compare(records, baseline="ring"):
    """One table per payload, then the verdict records' sentences (none when the run failed or was wrong)."""
    out = console()
    outcomes, label_of, dropped, evidence, stood = judged(records)
    first = next(r for r in records if not r.get("event"))
    backends = "/".join(dict.fromkeys(r["backend"] for r in records if not r.get("event")))
    if candidates(records)[0] is not record_label:  # several backends: the baseline on the first one
        baseline = label_of({**first, "case": baseline, "phase": TOTAL})
    elif any(baseline + verdict.UNPROVEN in g.labels for o in outcomes for g in o.groups):
        baseline += verdict.UNPROVEN
    notes = [r["reason"] for r in records if r.get("event") == "verdict" and r["check"] == "fastest"]
    notes += verdict.equivalence_lines(outcomes)
    notes += [r["reason"] for r in records if r.get("event") == "verdict" and r["check"] == "chunked"] + evidence
    columns = [("label", "strategy", None), ("time_us", "time us", ".1f"), ("predicted_time_us", "model us", ".1f"),
               ("spread", "spread %", ".1f"),
               ("repeats", "n", "d"), ("busbw_gbps", "busbw GB/s", ".3f"), ("link_utilization", "link util", ".2f"),
               ("vs", f"speed-up vs {baseline} [95% CI]", None), ("wrong", "#wrong", "d")]
    checked = "0 wrong" if {r.get("wrong") for r in records if not r.get("event")} == {0} else ""
    apart = any(r.get("timed_apart") for r in records)
    if checked:  # every row exact: said once in the title, as run's tables do (the table fits 100 columns)
        columns = [c for c in columns if c[0] != "wrong"]
    if any(r.get("max_abs_error") is not None for r in records):
        columns += [("wire", "wire bytes", None), ("max_abs_error", "max abs err", ".2e"),
                    ("max_rel_error", "max rel err", ".2e")]
    for size, rows in payload_rows(records, outcomes, baseline, label_of, dropped, stood).items():
        for row in rows:
            row["wire"] = format_size(row["wire_bytes"]) if row.get("wire_bytes") else ""
        print_table(rows, columns, title=f"payload {format_size(size)}: time to the same final tensor on every rank "
                    f"(median of n repeats; {backends}, {ranks_on(first)}{', ' + checked if checked else ''})"
                    + ("; phases timed apart from the total, each in a loop of its own: they need not add up to "
                       "it (records: timed_apart)" if apart else ""))
    for why in dict.fromkeys(r["link_peak_reason"] for r in records if r.get("link_peak_reason")):
        out.print(f"model us, link util n/a: {why}")
    if any(row["vs"].endswith(verdict.NO_CONCLUSION) for rows in payload_rows(records, outcomes, baseline, label_of,
                                                                             dropped).values() for row in rows):
        out.print(verdict.NO_CONCLUSION_RULE)
    if notes:
        out.print(f"verdicts ({stats.METHOD}):")
    for line in notes:
        out.print(f"  {line}")


def plot(records, path, command="compare"):
    """Time to the final tensor vs payload, a line per strategy config through its repeats' median (their min-max
    as bars), titled after the command that ran (compare, chunked)."""
    series = {}
    label_of = candidates(records)[0]
    for rec in records:
        if not rec.get("event") and rec.get("phase") == TOTAL:
            series.setdefault(label_of(rec), []).append((rec["size_bytes"], rec["time_us"]))
    line_plot(path, series, "payload", "time to the final tensor (us; median, bars: min-max of repeats)",
              f"commbench {command}: time to the same final tensor per strategy (lower is better)", log_y=True)


def judge(records, answer=None):
    """The verdict records of a compare; answer(outcomes, run_id): one more, the command's answer (chunked's)."""
    outcomes = judged(records)[0]
    run_id = next((r["run_id"] for r in records if r.get("run_id")), None)
    found = verdict.verdicts(outcomes, run_id)
    if answer:
        found += [answer(outcomes, run_id)]
    return found


def run_strategies(names, baseline, opts, answer=None, command="compare"):
    """Measure strategies (Options opts) side by side: the compare tables, plot (titled after command) and
    verdicts."""
    measure(names, opts, lambda recs: print_compare(recs, baseline), "strategies",
            lambda recs, path: plot(recs, path, command),
            lambda recs: judge(recs, answer))


@click.command()
@click.option("--strategies", default="ring,rs-ag,plain,chunked", show_default=True,
              help="Comma list: " + ",".join(STRATEGY_NAMES))
@click.option("--baseline", default="ring", show_default=True, help="Strategy the speed-up is measured against.")
@click.option("--backends", default=None, metavar="LIST",
              help="Comma list of backends (gloo,mpi): every strategy on each, side by side; one launch per backend "
                   "and repeat, each round starting with the next backend.")
@repeats_option(3)
@time_budget_option
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
    backends = None if backends is None else parse_backends(backends)
    if baseline not in names:
        raise UserError(f"--baseline {baseline} is not one of --strategies {','.join(names)}")
    run_strategies(names, baseline, parse(kw, backends, repeats))
