"""Acceptance thresholds over records of either tool: parsed from one line of text, judged on records.

Forms (one registry each for fields' aliases, units and references):

  [GROUP] FIELD OP VALUE [UNIT] [x REFERENCE] [at [OP] SIZE]
      busbw >= 0.8 x link peak at >= 256M     relative to the topology's peak (records' link_peak_gbps)
      time_us <= 1.5 x model at 8M            relative to the model's prediction (predicted_time_us)
      time_us <= 50 at 8B                     absolute, in the field's unit unless one is given
      wrong == 0
      busbw >= 0.7 x median                   relative to the median of the same group and size (pairs' links)
      shard-write MB/s >= 2000                GROUP: a collective, strategy (commbench) or profile (iobench)
      small-random-write P99 <= 2 ms
  no regression > 5 % vs baseline             benchcore.results.diff against --baseline (its significance rules)

A threshold is judged per measured thing (benchcore.results.read.identity): repeats and cycles of one thing
are combined by their median first (wrong: the largest). Strategy phases are judged on the total only. It fails when any
thing misses; the worst one is named with its size, measured against expected. A thing whose value is not a finite
positive number (NaN, 0, -1, null, missing; `wrong` may be 0) misses, named with why: it never passes, never vanishes.
"""
import re
import statistics
from dataclasses import dataclass, field
from typing import Optional

from benchcore.errors import UserError
from benchcore.importers import fio_json as fiojson
from benchcore.inputs import finite, shown
from benchcore.results import diff, schema, stats, usable
from benchcore.results.read import group_of, identity, label, measurements
from benchcore.units import human, number, parse_size, readable_size, unit_of
from benchcore.vocabulary import ALIASES

# A field's unit from its name's ending; the units a value may be written in, as factors to that unit.
UNITS = {"_us": {"us": 1, "ms": 1e3, "s": 1e6},
         "_gbps": {"gb/s": 1, "mb/s": 1e-3, "gbit/s": 1 / 8},
         "_mbps": {"mb/s": 1, "gb/s": 1e3}, "_s": {"s": 1, "ms": 1e-3, "us": 1e-6}}
SPELLED = {"gb/s": "GB/s", "mb/s": "MB/s", "gbit/s": "Gbit/s"}     # a unit as messages print it (others: as is)
OPS = {">=": lambda a, b: a >= b, "<=": lambda a, b: a <= b, ">": lambda a, b: a > b, "<": lambda a, b: a < b,
       "==": lambda a, b: a == b}
HIGHER = (">=", ">")   # for these the worst thing is the lowest measured / expected
COMBINE = {"wrong": max}   # how repeats of one thing combine (default: their median); one wrong element fails


def _unit_of(name):
    """The UNITS key of a field: its ending, or a unit followed by what the figure is (time_us_p99); a rate per
    second (files_per_s) takes no unit."""
    if name.endswith("_per_s"):
        return None
    return next((end for end in UNITS if name.endswith(end) or f"{end}_" in name), None)


def _model_value(rec, name):
    """The model's prediction of field `name` for this record: its time, or a bandwidth at that time."""
    predicted, time_us = rec.get("predicted_time_us"), rec.get("time_us")
    if not usable.usable(predicted) or not usable.usable(time_us) or not usable.usable(rec.get(name)):
        return None
    return predicted if name.endswith("_us") else rec[name] * time_us / predicted


# reference name -> (which fields it applies to, what it is per record, what a record must carry)
REFERENCES = {
    "link peak": (lambda tool, name: tool == "commbench" and name.endswith("_gbps"),
                  lambda rec, name: rec.get("link_peak_gbps") if usable.usable(rec.get("link_peak_gbps")) else None,
                  "link_peak_gbps"),
    "model": (lambda tool, name: tool == "commbench" and (name.endswith("_gbps") or name.startswith("time_us")),
              _model_value, "predicted_time_us"),
    # of every measured thing of the same group and size: a link against its peers (set by judge, not per record)
    "median": (lambda tool, name: True, None, None),
}
REFERENCE_SPELLINGS = {"median": "median", "link peak": "link peak", "link_peak": "link peak",
                       "link_peak_gbps": "link peak",
                       "peak": "link peak", "model": "model", "prediction": "model", "predicted": "model",
                       "predicted_time_us": "model"}

_FORM = re.compile(r"^(?:(?P<group>\S+)\s+)??(?P<field>[^\s<>=]+)\s*(?P<op>>=|<=|==|>|<)\s*"
                   r"(?P<value>[-+]?\d+(?:\.\d+)?(?:e[-+]?\d+)?)\s*(?P<unit>[a-z/]+)?"
                   r"(?:\s+x\s+(?P<ref>[a-z_ ]+?))?(?:\s+at\s+(?P<at_op>>=|<=|>|<|==)?\s*(?P<size>\S+))?$", re.I)
_REGRESSION = re.compile(r"^no regression\s*>\s*(?P<pct>\d+(?:\.\d+)?)\s*%\s*vs\s+baseline$", re.I)


@dataclass(frozen=True)
class Threshold:
    text: str
    field: Optional[str] = None      # canonical record field (None: regression)
    op: Optional[str] = None
    value: float = 0.0               # in the field's unit, or the factor of the reference
    reference: Optional[str] = None  # REFERENCES key
    group: Optional[str] = None
    at_op: Optional[str] = None
    at_bytes: Optional[int] = None
    regression: Optional[float] = None   # 0.05 = 5 %
    unit: Optional[str] = None           # the unit the spec wrote VALUE in (ms, gb/s): messages print values in it

    def shown(self, value):
        """value (in the field's unit) as the spec wrote its bound: in the spec's unit (100 ms, 1 GB/s,
        1,000,000 MB/s), else in the field's own (time_us <= 50: 50 us); never an exponent."""
        if value is None or self.field is None:
            return "n/a" if value is None else number(value)
        if self.unit:
            return f"{number(value / UNITS[_unit_of(self.field)][self.unit])} {SPELLED.get(self.unit, self.unit)}"
        return f"{number(value)} {unit_of(self.field)}".rstrip()

    def expected(self, rec, medians=None):
        """The value this record must reach, in the field's unit (None: the record lacks the reference);
        medians: (group, size) -> the median of the measured things, for x median."""
        if self.reference is None:
            return self.value
        ref = medians.get(_peers(rec)) if self.reference == "median" else REFERENCES[self.reference][1](rec, self.field)
        return None if ref is None else self.value * ref

    def applies(self, rec):
        if self.group is not None and self.group not in (group_of(rec), rec.get("phase")):
            return False
        if self.group != rec.get("phase") and rec.get("phase") not in (None, "total"):
            return False
        return self.at_bytes is None or (rec.get("size_bytes") is not None
                                         and OPS[self.at_op](rec["size_bytes"], self.at_bytes))


def parse(text, tool):
    """Threshold of `text` on records of `tool`; UserError (without position: callers add it) when it is
    not one of the forms or names a field the tool's records do not have."""
    text = " ".join(str(text).split())
    quoted = shown(repr(text), 120)            # as errors quote it: at most 120 characters
    m = _REGRESSION.match(text)
    if m:
        return Threshold(text, regression=finite(m.group("pct"), f"threshold {quoted}: the percentage", 0, 999) / 100)
    m = _FORM.match(text)
    if not m:
        raise UserError(f"threshold {quoted} is not FIELD OP VALUE [UNIT] [x link peak|model|median] "
                        "[at [OP] SIZE] nor 'no regression > N % vs baseline'")
    name = ALIASES[tool].get(m.group("field").lower(), m.group("field"))
    known = set(schema.DESIGN[tool]) | set(schema.EXTENSIONS[tool])
    if name not in known:
        raise UserError(f"threshold {quoted}: {tool} records have no field {shown(repr(m.group('field')), 60)} "
                        f"(aliases: {', '.join(ALIASES[tool])}; or a field of benchcore.results.schema)")
    value = finite(m.group("value"), f"threshold {quoted}: the value")
    if m.group("unit"):
        units = UNITS.get(_unit_of(name), {})
        factor = units.get(m.group("unit").lower())
        if factor is None:
            raise UserError(f"threshold {quoted}: {name} is not in {shown(m.group('unit'), 40)}"
                            + (f" (units: {', '.join(units)})" if units else " (it takes no unit)"))
        value *= factor
    reference = None
    if m.group("ref"):
        reference = REFERENCE_SPELLINGS.get(m.group("ref").strip().lower())
        if reference is None:
            raise UserError(f"threshold {quoted}: unknown reference {shown(repr(m.group('ref')), 60)} "
                            "(x link peak, x model, x median)")
        if m.group("unit"):
            raise UserError(f"threshold {quoted}: a factor of {reference} takes no unit")
        if not REFERENCES[reference][0](tool, name):
            raise UserError(f"threshold {quoted}: {name} cannot be compared with the {reference}")
    at = parse_size(m.group("size"), f"threshold {quoted}: size") if m.group("size") else None
    return Threshold(text, name, m.group("op"), value, reference, m.group("group"),
                     m.group("at_op") or "==" if at else None, at, unit=m.group("unit") and m.group("unit").lower())


@dataclass
class Outcome:
    """How one threshold came out on one check's records."""
    threshold: Threshold
    passed: bool
    skipped: bool = False
    message: str = ""
    measured: Optional[float] = None
    expected: Optional[float] = None
    size_bytes: Optional[int] = None
    judged: int = 0
    marks: list = field(default_factory=list)     # [(record, expected)] for plots
    missed: list = field(default_factory=list)    # the records that missed it (their hosts: what drain names)
    figure: Optional[str] = None    # the field measured and expected are of when not the threshold's (regression)

    def shown(self, value):
        """measured or expected as a person reads them: in the unit the spec wrote (100 ms), else the field's own;
        a regression's in its metric's (45.24 ms, 1,200 MB/s)."""
        return human(value, self.figure) if self.figure else self.threshold.shown(value)

    def as_dict(self):
        return {"threshold": self.threshold.text, "passed": self.passed, "skipped": self.skipped,
                "message": self.message, "measured": self.measured, "expected": self.expected,
                "size_bytes": self.size_bytes, "judged": self.judged}


def _what(name):
    """A field as verdicts name it: with what it measures where fio's figures could be mistaken for one another
    (per-I/O latency, per-file time, end fsync: benchcore.importers.fio_json.TIME_FIGURES)."""
    figure = fiojson.TIME_FIGURES.get(name)
    return f"{name} ({figure[2]})" if figure else name


def _median_by_identity(recs, name):
    """[(first record, median of the field, why it is unusable or None)] per measured thing; a thing with any
    value that is not a finite positive number (>= 0 for a count) is unusable."""
    by = {}
    for rec in recs:      # two directories on one disk are one thing to diff, two to judge (each one's own miss)
        by.setdefault((identity(rec), rec.get("mount")), []).append(rec)
    combine, count = COMBINE.get(name, statistics.median), name in usable.COUNTS
    out = []
    for rs in by.values():
        bad = [b for b in ("missing" if name not in r else usable.flaw(r[name], count, name in usable.SIGNED)
                           for r in rs) if b]
        out.append((rs[0], None, bad[0]) if bad else (rs[0], combine(r[name] for r in rs), None))
    return out


def _peers(rec):
    """What x median compares a thing with: the things of its group and size."""
    return group_of(rec), rec.get("phase"), rec.get("size_bytes")


def judge(threshold, records, baseline=None):
    """Outcome of threshold on a check's records; baseline: the --baseline records (None: not given)."""
    if threshold.regression is not None:
        return _regression(threshold, records, baseline)
    t, recs = threshold, [r for r in usable.sound(measurements(records), "records") if threshold.applies(r)]
    if t.field not in schema.DESIGN["commbench"] + schema.DESIGN["iobench"]:   # a figure only some phases carry
        recs = [r for r in recs if t.field in r]
    if not recs:
        return Outcome(t, False, message="no measurement this threshold applies to")
    rows, lacking, unusable = [], 0, []
    things = _median_by_identity(recs, t.field)
    peers = {}
    for rec, measured, why in things:
        if not why:
            peers.setdefault(_peers(rec), []).append(measured)
    medians = {k: statistics.median(v) for k, v in peers.items()}
    for rec, measured, why in things:
        expected = t.expected(rec, medians)
        if why:
            unusable.append((rec, why))
        elif expected is None:
            lacking += 1
        else:
            rows.append((rec, measured, expected))
    if unusable:
        rec, why = unusable[0]
        size = rec.get("size_bytes")
        return Outcome(t, False, size_bytes=size, judged=len(rows) + len(unusable),
                       message=f"measured {t.field} is {why}{f' at {readable_size(size)}' if size else ''} "
                               f"({label(rec)}): not a usable measurement; {len(unusable)} of "
                               f"{len(rows) + len(unusable) + lacking} have none")
    why = next((w for r, _, _ in things for w in (r.get("link_peak_reason"), t.reference == "model" and
                                                 r.get("predicted_time_reason")) if w), None)
    if not rows and lacking and t.reference in ("link peak", "model") and why:
        return Outcome(t, True, skipped=True, message=f"n/a: {why}")   # no ceiling here: nothing to judge against
    if not rows:
        need = (REFERENCES[t.reference][2] or t.field) if t.reference and lacking else t.field
        return Outcome(t, False, message=f"no measurement carries {need}")
    bad = [row for row in rows if not OPS[t.op](row[1], row[2])]
    pick = bad or rows
    key = (lambda row: row[1] / row[2] if row[2] else row[1]) if t.op in HIGHER else \
        (lambda row: -(row[1] / row[2]) if row[2] else -row[1])
    rec, measured, expected = min(pick, key=key)
    size = rec.get("size_bytes")
    where = f" at {readable_size(size)}" if size else ""
    what = _what(t.field)
    factor = f" ({number(t.value)} x {t.reference})" if t.reference else ""
    message = f"{what} {t.shown(measured)} {'' if bad else 'meets '}{t.op} {t.shown(expected)}{factor}{where} " \
              f"({label(rec)})"
    if bad:
        message = f"measured {what} {t.shown(measured)}, expected {t.op} {t.shown(expected)}{factor}{where} " \
                  f"({label(rec)}); " \
                  f"{len(bad)} of {len(rows)} missed"
    return Outcome(t, not bad, message=message, measured=measured, expected=expected, size_bytes=size,
                   judged=len(rows), marks=[(r, e) for r, _, e in rows], missed=[r for r, _, _ in bad])


def _regression(threshold, records, baseline):
    """Regressions, unusable values and (when the baseline is this check's own records) rows missing now fail."""
    if baseline is None:
        return Outcome(threshold, True, skipped=True, message="no --baseline given")
    if not measurements(records):
        return Outcome(threshold, False, message="no measurement to compare with the baseline")
    lines, only_base, _ = diff.compare(baseline, records, threshold.regression)
    checks = [{r.get("accept_check") for r in measurements(side)} for side in (baseline, records)]
    missing = only_base if checks[0] == checks[1] != {None} else []
    if not lines and not missing:
        return Outcome(threshold, True, skipped=True, message="the baseline has none of these measurements")
    broken = [ln for ln in lines if ln.unusable]
    if broken or missing:
        what = (f"{broken[0].label}: {broken[0].unusable}" if broken else f"{label(missing[0])}: missing now")
        return Outcome(threshold, False, judged=len(lines) + len(missing),
                       message=f"{len(broken)} of {len(lines) + len(missing)} rows have no usable value, "
                               f"{len(missing)} are missing; first {what}")
    worse = [ln for ln in lines if ln.significant and ln.worse]
    if not worse:
        return Outcome(threshold, True, judged=len(lines),
                       message=f"no regression beyond {threshold.regression:.0%} and the spread in {len(lines)} rows")
    ln = max(worse, key=lambda ln: ln.speed)
    size = next((r.get("size_bytes") for r in measurements(records) if label(r) == ln.label), None)
    now, then = stats.geometric_mean(ln.new), stats.geometric_mean(ln.base)
    return Outcome(threshold, False, judged=len(lines), measured=now, expected=then, size_bytes=size, figure=ln.metric,
                   message=f"{len(worse)} of {len(lines)} rows regressed; worst {ln.label}: measured "
                           f"{human(now, ln.metric)}, baseline {human(then, ln.metric)} ({ln.speed:.2f}x slower; "
                           f"{ln.basis}: {ln.sure})")


def plot_marks(outcomes):
    """Thresholds as benchcore.report.plots draws them, each on the axis of the field it bounds: {group: [(field, text,
    [(size, expected)])], "storage": [(axis, text, value)]} (MB/s on storage's bandwidth axis, latencies on its
    latency axis)."""
    out = {}
    for outcome in outcomes:
        t, points = outcome.threshold, {}
        for rec, expected in outcome.marks:
            if rec["tool"] == "commbench":
                if expected and rec.get("size_bytes"):
                    points.setdefault(group_of(rec), set()).add((rec["size_bytes"], expected))
            elif t.field == "bw_mbps" or (t.field.startswith("lat_") and t.field.endswith("_us")):
                out.setdefault("storage", []).append((0 if t.field == "bw_mbps" else 1, t.text, expected))
        for group, pts in points.items():
            out.setdefault(group, []).append((t.field, t.text, sorted(pts)))
    out["storage"] = list(dict.fromkeys(out.get("storage", [])))
    return out
