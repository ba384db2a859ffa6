"""Verdicts: which config is faster, named only where the difference is beyond the spread of repeats.

compare, chunked and sweep hand their measurements here with three functions of a record:
scope_of (what is compared together: the item and the payload), candidate_of (the row name) and
work_of (what it executes). Candidates with equal work run the same operations (chunked at or
below its threshold is plain; a variable the backend ignores changes nothing): they form one group,
reported once and never ranked against each other; their repeats are pooled.

Per scope, the fastest group (geometric mean of its repeats) is the winner only when the interval
of its time ratio to the runner-up (benchcore.results.stats: METHOD) lies wholly below 1. Otherwise the
groups not significantly slower than the fastest are reported as "no significant difference".

Decisions on evidence (on_evidence): a candidate whose requested setting did not take effect in any of its runs
(commbench/evidence/applied.py: "not applied") is never ranked: it is reported "not applied: <evidence>", as a
failed or interrupted run is. One whose setting no evidence proves ("unknown") is ranked, its name marked
UNPROVEN, and the reason is said. A candidate that requested nothing is ranked as it is.
"""
from dataclasses import dataclass
from functools import cached_property
from typing import List, Optional

from benchcore.results import schema, stats
from benchcore.units import format_size
from commbench.cases.case import TOTAL, work_key
from commbench.cases.collectives import DTYPES
from commbench.cases.registry import case_of, record_label
from commbench.evidence.applied import APPLIED, NOT_APPLIED, UNKNOWN

UNPROVEN = " (unproven)"                   # the mark of a ranked candidate whose setting no evidence proves
WIDE = 2.0              # an interval reaching under half its ratio or over twice it: the repeats say nothing
WORST_FIRST = (NOT_APPLIED, UNKNOWN, APPLIED)


@dataclass
class Group:
    """Candidates that execute the same operations, and their pooled times (us, one per repeat)."""
    labels: List[str]
    times: List[float]

    @property
    def name(self):
        """'baseline', or 'baseline, also standing for plain and ring-x1 (the same operations)'."""
        if len(self.labels) == 1:
            return self.labels[0]
        rest = self.labels[1:]
        named = rest[0] if len(rest) == 1 else f"{', '.join(rest[:-1])} and {rest[-1]}"
        return f"{self.labels[0]}, also standing for {named} (the same operations)"

    @property
    def time(self):
        return stats.geometric_mean(self.times)


@dataclass
class Outcome:
    """The groups of one scope, fastest first, and what can be said about them."""
    item: str
    size: int
    groups: List[Group]

    def ratio(self, a, b):
        return stats.ratio_interval(a.times, b.times)

    @cached_property
    def versus(self):
        """(fastest / runner-up) Ratio, or None with one group or too few repeats."""
        return self.ratio(self.groups[0], self.groups[1]) if len(self.groups) > 1 else None

    @cached_property
    def winner(self) -> Optional[Group]:
        r = self.versus
        return self.groups[0] if r is not None and r.high < 1 else None

    @cached_property
    def tied(self):
        """Groups not significantly slower than the fastest (all of them when repeats are too few)."""
        best = self.groups[0]
        out = [best]
        for group in self.groups[1:]:
            r = self.ratio(best, group)
            if r is None or r.high >= 1:
                out.append(group)
        return out

    def group_of(self, label):
        return next(g for g in self.groups if label in g.labels)


def record_work(rec):
    """What a measurement record's config executed (commbench.cases.case.work_key)."""
    return work_key(case_of(rec), rec, rec["size_bytes"], rec["world_size"], DTYPES[rec["dtype"]].bytes)


def judge(records, candidate_of=record_label, scope_of=lambda rec: "", work_of=record_work):
    """[Outcome] per (scope, size) of the whole-operation measurements in records."""
    per_scope = {}
    for rec in records:
        if rec.get("event") or rec.get("phase", TOTAL) != TOTAL or not rec.get("time_us"):
            continue
        per_scope.setdefault((scope_of(rec), rec["size_bytes"]), {}).setdefault(
            work_of(rec), {}).setdefault(candidate_of(rec), []).append(rec["time_us"])
    outcomes = []
    for (item, size), works in per_scope.items():
        groups = [Group(list(by_label), [t for times in by_label.values() for t in times])
                  for by_label in works.values()]
        outcomes.append(Outcome(item, size, sorted(groups, key=lambda g: g.time)))
    return outcomes


def _sizes_text(sizes):
    sizes = sorted(sizes)
    return format_size(sizes[0]) if len(sizes) == 1 else f"{format_size(sizes[0])}-{format_size(sizes[-1])}"


def verdicts(outcomes, run_id, check="fastest", better="is faster than"):
    """Verdict records: one per item and run of consecutive payloads with the same finding; `better` says what
    a lower time means."""
    runs = []
    for out in outcomes:
        win = out.winner
        finding = (out.item, win.name if win else None,
                   out.groups[1].name if win else tuple(sorted(g.name for g in out.tied)))
        if runs and runs[-1][0] == finding:
            runs[-1][1].append(out)
        else:
            runs.append((finding, [out]))
    records = []
    for (item, winner, other), outs in runs:
        sizes = [o.size for o in outs]
        equivalent = sorted({tuple(g.labels) for o in outs for g in o.groups if len(g.labels) > 1})
        rows = [{"size_bytes": o.size, **_interval(o.versus)} for o in outs]
        where = f"{item + ' ' if item else ''}at {_sizes_text(sizes)}"
        if winner:
            worst = max(rows, key=lambda r: r["ratio_high"])  # the weakest win: what holds at every size
            reason = (f"{where}: {winner} {better} {other}: time ratio {worst['ratio']:.3f} "
                      f"[{worst['ratio_low']:.3f}, {worst['ratio_high']:.3f}] at its weakest")
            fields = dict(winner=winner, versus=other, **{k: worst[k] for k in ("ratio", "ratio_low", "ratio_high")})
        elif len(other) == 1:
            reason = f"{where}: every config ran the same operations ({other[0]}): nothing to rank"
            fields = dict(winner=None, tied=list(other))
        else:
            few = any(o.versus is None and len(o.groups) > 1 for o in outs)
            reason = (f"{where}: no significant difference among {', '.join(other)}"
                      + (" (fewer than 2 repeats: no interval)" if few else ""))
            fields = dict(winner=None, tied=list(other))
        records.append(schema.event("commbench", "verdict", reason, run_id=run_id, check=check, sizes=sizes,
                                    method=stats.METHOD, equivalent=[list(e) for e in equivalent], rows=rows,
                                    **fields))
    return records


NO_CONCLUSION = "no conclusion"
NO_CONCLUSION_RULE = (f"{NO_CONCLUSION}: the 95% interval reaches under 1/{WIDE:g} or over {WIDE:g}x its ratio: the "
                      "repeats disagree too much to say either way (more repeats, a quieter machine)")


def interval_text(r, digits=2):
    """'1.32 [1.20, 1.45]'; an interval reaching past WIDE either side of its ratio ('1.59 [0.00, 11990.84]' reads
    like a result) is said to be none: '1.59, no conclusion' (NO_CONCLUSION_RULE, said once under the table)."""
    if r.low < r.ratio / WIDE or r.high > r.ratio * WIDE:
        return f"{r.ratio:.{digits}f}, {NO_CONCLUSION}"
    return f"{r.ratio:.{digits}f} [{r.low:.{digits}f}, {r.high:.{digits}f}]"


def _interval(ratio):
    if ratio is None:
        return {"ratio": None, "ratio_low": None, "ratio_high": None}
    return {"ratio": ratio.ratio, "ratio_low": ratio.low, "ratio_high": ratio.high}


def equivalence_lines(outcomes):
    """One line per run of payloads with the same sets of candidates that ran the same operations."""
    per = {}
    for out in outcomes:
        sets = tuple(" = ".join(g.labels) for g in out.groups if len(g.labels) > 1)
        if sets:
            per.setdefault((out.item, sets), []).append(out.size)
    return [f"same operations{' in ' + item if item else ''} at {_sizes_text(sizes)} (one row each, never ranked): "
            + "; ".join(f"[{s}]" for s in sets) for (item, sets), sizes in per.items()]


def settings_of(records, candidate_of, judged):
    """{candidate: {VAR: {status, evidence}}}: each candidate's requested settings (judged(rec): {VAR: {status,
    evidence}} of a measurement record) at their worst over its records: not applied, then unknown, then applied."""
    out = {}
    for rec in records:
        if rec.get("event"):
            continue
        mine = out.setdefault(candidate_of(rec), {})
        for var, st in (judged(rec) or {}).items():
            if var not in mine or WORST_FIRST.index(st["status"]) < WORST_FIRST.index(mine[var]["status"]):
                mine[var] = st
    return out


def on_evidence(records, candidate_of, judged):
    """(the records to rank, candidate_of with UNPROVEN marks, {candidate: 'VAR: evidence' of a setting not applied},
    {candidate: 'VAR: why unknown'}, the settings (settings_of)): the rule of this module's docstring."""
    settings = settings_of(records, candidate_of, judged)

    def said(cand, status):
        return "; ".join(f"{var}: {st['evidence']}" for var, st in settings[cand].items() if st["status"] == status)
    dropped = {c: said(c, NOT_APPLIED) for c, st in settings.items() if any(v["status"] == NOT_APPLIED
                                                                              for v in st.values())}
    unproven = {c: said(c, UNKNOWN) for c, st in settings.items() if c not in dropped and any(
        v["status"] == UNKNOWN for v in st.values())}
    kept = [r for r in records if r.get("event") or candidate_of(r) not in dropped]
    return (kept, lambda rec: candidate_of(rec) + (UNPROVEN if candidate_of(rec) in unproven else ""),
            dropped, unproven, settings)


def evidence_lines(dropped, unproven):
    """The lines a command says about its candidates' settings: not applied (never ranked), unknown (ranked,
    marked)."""
    return ([f"not applied: {c}: {why} (not ranked)" for c, why in dropped.items()]
            + [f"unknown: {c}{UNPROVEN}: {why} (ranked, unproven)" for c, why in unproven.items()])
