"""`diff BASELINE NEW`: what changed beyond noise, in the manner of pyperf's compare_to, as a table.

Records are joined on their identity (benchcore.results.joined: the rows a report shows too). A change is reported
when it is beyond the threshold AND beyond the run-to-run spread of the metric judged (time by default; --metric
busbw, p99, MB/s, ...). The spread, in order of what the records allow:
  t-test     several values per side (runs with different run_id, cycles, repeats): benchcore.results.stats'
             Welch t interval of the ratio must exclude 1
  rank range one value per side that carries min/max over ranks (or repeats): the two ranges must not overlap
  threshold  one value per side and no range: the threshold alone, said so on the line
A row whose metric is not a finite positive number on either side (NaN, 0, -1, null, missing) is not compared:
it fails, named, as does a baseline row with no partner in NEW (missing); neither ever vanishes from the gate.
The output: a summary line first, then one table per tool (rows by collective, size, placement; old and new of the
metric and of time and busbw, or MB/s and P99 latency, each with its change in %, and the verdict), then why each
change counts, the geometric mean per group and the rows found on one side only.
"""
from dataclasses import dataclass

from benchcore.errors import UserError, printable
from benchcore.inputs import finite
from benchcore.results import stats, usable
from benchcore.results.joined import join, sort_key
from benchcore.results.read import TOOL, group_of, label
from benchcore.units import format_size, human, unit_of
from benchcore.vocabulary import ALIASES


@dataclass
class Line:
    label: str
    group: str
    tool: str
    base: list
    new: list
    ratio: float            # new / base of the metric (geometric means); None when unusable
    basis: str              # t-test, rank range, threshold
    sure: str               # how sure, in words
    beyond_spread: bool
    significant: bool
    worse: bool             # slower (time up, bandwidth down)
    unusable: str = ""      # why the row could not be compared ("new time_us is NaN"): a failure
    metric: str = ""        # the field judged
    records: tuple = ((), ())   # (baseline records, new records) of the row: the table's other columns

    @property
    def speed(self):
        """How many times slower (>1) or faster (<1) new is: the time ratio, or the inverse bandwidth ratio."""
        if self.ratio is None:
            return None
        return self.ratio if lower_is_better(self.metric) else 1 / self.ratio

    @property
    def failed(self):
        return bool(self.unusable) or (self.significant and self.worse)


def lower_is_better(field):
    """Times are better lower; bandwidths, IOPS and rates higher."""
    return unit_of(field) in ("us", "s")


def metric_field(tool, metric):
    """The record field `--metric metric` judges in tool's records (an alias, or a field's own name); the tool's
    own metric when none is given or the alias is the other tool's."""
    if metric is None:
        return TOOL[tool].metric
    name = ALIASES[tool].get(metric.lower(), metric)
    return name if name in ALIASES[tool].values() or name == TOOL[tool].metric else TOOL[tool].metric


def _unusable(records, metric, side):
    """Why some value of metric on this side is not a finite positive number ('' when all are)."""
    bad = ["missing" if metric not in r else usable.flaw(r[metric]) for r in records]
    bad = [b for b in bad if b]
    if not bad:
        return ""
    return f"{side} {metric} is {bad[0]}" + (f" ({len(bad)} of {len(records)} values)" if len(records) > 1 else "")


def _range(records, tool, metric):
    lo, hi = tool.spread
    if metric == tool.metric and all(usable.usable(r.get(lo)) and usable.usable(r.get(hi)) for r in records):
        return min(r[lo] for r in records), max(r[hi] for r in records)
    return None


def compare(base_records, new_records, threshold, metric=None):
    """(lines of joined identities in joined.sort_key order, base-only records (missing in new), new-only records);
    metric: what --metric names (None: each tool's own). A record whose identity fields have wrong types is skipped
    with a warning (its baseline row then counts as missing)."""
    rows, only_base, only_new = join(base_records, new_records)
    lines = [_line(row.base, row.new, threshold, metric_field(row.new[0]["tool"], metric))
             for row in sorted(rows, key=lambda row: sort_key(row.new[0])) if row.base]
    return lines, [rs[0] for rs in only_base], [rs[0] for rs in only_new]


def _line(base, new, threshold, metric):
    tool = TOOL[new[0]["tool"]]
    name, group, what = label(new[0]), group_of(new[0]), new[0]["tool"]
    bad = _unusable(new, metric, "new") or _unusable(base, metric, "baseline")
    if bad:
        return Line(name, group, what, [], [], None, "", "", False, False, False, bad, metric, (base, new))
    a, b = [r[metric] for r in new], [r[metric] for r in base]
    interval = stats.ratio_interval(a, b)
    if interval is not None:
        ratio, basis = interval.ratio, "t-test"
        beyond = interval.beyond(0)
        sure = (f"{len(b)} vs {len(a)} values, {int(stats.CONFIDENCE * 100)}% interval of the ratio "
                f"[{interval.low:.3f}, {interval.high:.3f}] {'excludes' if beyond else 'includes'} 1")
    else:
        ratio = stats.geometric_mean(a) / stats.geometric_mean(b)
        ranges = _range(base, tool, metric), _range(new, tool, metric)
        if None not in ranges:
            (b_lo, b_hi), (n_lo, n_hi) = ranges
            beyond, basis = n_lo > b_hi or n_hi < b_lo, "rank range"
            sure = (f"min-max over ranks {human(b_lo, metric)} - {human(b_hi, metric)} vs {human(n_lo, metric)} - "
                    f"{human(n_hi, metric)} {'do not overlap' if beyond else 'overlap'}")
        else:
            beyond, basis = True, "threshold"
            sure = "one value per side and no range: threshold only, noise not known"
    point = stats.Ratio(ratio, ratio, ratio, len(a), len(b)).beyond(threshold)
    worse = ratio > 1 if lower_is_better(metric) else ratio < 1
    return Line(name, group, what, b, a, ratio, basis, sure, beyond, point and beyond, worse, "", metric, (base, new))


SET_APART = ("backend", "launcher", "topology", "emulated", "device", "fs_type")   # defining fields a label leaves out


def _apart(only_base, only_new):
    """'backend (gloo vs mpi)' for each field that sets one side's one-sided rows apart from the other's."""
    def seen(recs, k):
        return sorted({str(r[k]) for r in recs if r.get(k) is not None})
    out = []
    for k in SET_APART:
        a, b = seen(only_base, k), seen(only_new, k)
        if a and b and a != b:
            out.append(f"{k} ({', '.join(a)} vs {', '.join(b)})")
    return "; ".join(out)


def _named(rec):
    """A one-sided row's label with the defining fields a label leaves out (backend, launcher, topology, ...)."""
    more = [f"{k} {rec[k]}" for k in SET_APART if rec.get(k)]
    return label(rec) + (f" ({', '.join(more)})" if more else "")


def _mean(values):
    return stats.geometric_mean(values)


def failures(lines, only_base):
    """{kind: count} of the rows that fail a regression gate (empty: it passes)."""
    found = {"slower": sum(ln.significant and ln.worse for ln in lines),
             "with no usable value": sum(bool(ln.unusable) for ln in lines), "missing in new": len(only_base)}
    return {k: n for k, n in found.items() if n}


def verdict(ln):
    return ("not usable" if ln.unusable else "slower" if ln.significant and ln.worse else
            "faster" if ln.significant else "within noise")


def name_of(tool, field):
    """A field as a diff's header and summary name it: its alias (time, busbw, p99) or MB/s."""
    return "MB/s" if field == "bw_mbps" else next((k for k, v in ALIASES[tool].items() if v == field), field)


def summary(lines, only_base, only_new, threshold):
    """'12 rows joined: 2 slower beyond noise, 1 faster, 9 within noise (time: ...)'; the first line of a diff."""
    counts = {w: sum(verdict(ln) == w for ln in lines) for w in ("slower", "faster", "within noise", "not usable")}
    judged = ", ".join(dict.fromkeys(name_of(ln.tool, ln.metric) for ln in lines))
    if not lines:
        text = "0 rows joined: nothing compared"
    else:
        text = (f"{len(lines)} rows joined: {counts['slower']} slower beyond noise, {counts['faster']} faster, "
                f"{counts['within noise']} within noise" + (f", {counts['not usable']} with no usable value"
                                                            if counts["not usable"] else "") +
                f" ({judged}: beyond {threshold:.0%} and the run-to-run spread)")
    one_sided = [f"{n} {what}" for n, what in ((len(only_base), "missing in new"), (len(only_new), "only in new")) if n]
    return text + ("; " + ", ".join(one_sided) if one_sided else "")


# the columns that say what a row is, per tool (the rest of its label goes to `config`): (part, header)
KEYS = {"commbench": (("group", "collective"), ("size", "size"), ("place", "place")),
        "iobench": (("group", "profile"), ("direction", "dir"), ("bs", "bs"))}


def _key_cells(rec):
    if rec["tool"] == "commbench":
        group = group_of(rec) + (f" {rec['phase']}" if rec.get("phase") else "")
        return [group, format_size(rec["size_bytes"]) if rec.get("size_bytes") else "0",
                {True: "in", False: "out"}.get(rec.get("in_place"), "n/a")]
    return [str(rec.get("profile")), str(rec.get("direction") or rec.get("rw")),
            format_size(rec["bs_bytes"]) if rec.get("bs_bytes") else "n/a"]


def _change(old, new):
    return f"{new / old - 1:+.1%}" if old and new else "n/a"


def _value(records, field):
    values = [r[field] for r in records if usable.usable(r.get(field))]
    return _mean(values) if values else None


def table(lines):
    """The joined rows of one tool as text: what the row is, old, new and change of each field shown, the verdict."""
    tool = lines[0].tool
    fields = list(dict.fromkeys([lines[0].metric] + list(TOOL[tool].shown)))
    headers = [h for _, h in KEYS[tool]] + ["config"]
    for f in fields:
        headers += [f"old {name_of(tool, f)}", f"new {name_of(tool, f)}", name_of(tool, f)]
    rows = []
    for ln in lines:
        base, new = ln.records
        cells = _key_cells(new[0]) + [label(new[0], leave=[k for k, _ in KEYS[tool]]) or "-"]
        for f in fields:
            old, now = _value(base, f), _value(new, f)
            cells += [human(old, f), human(now, f), _change(old, now)]
        rows.append(cells + [verdict(ln)])
    return plain([headers + [f"verdict ({name_of(tool, lines[0].metric)})"]] + rows, left=len(KEYS[tool]) + 1)


def plain(rows, left=1):
    """rows (the first the headers) as columns two spaces apart under a rule, the first `left` columns and the last
    left-aligned, the numbers right-aligned (nccl-tests' look; plain text, fast for 10,000 rows)."""
    rows = [[printable(c) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    last = len(widths) - 1

    def line(cells):
        return "  ".join(c.ljust(w) if i < left or i == last else c.rjust(w)
                         for i, (c, w) in enumerate(zip(cells, widths))).rstrip()
    return "\n".join([line(rows[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in rows[1:]])


def text(lines, only_base, only_new, threshold):
    """The report: the summary line, a table per tool of every joined row, why each change or unusable row counts,
    one summary line per group, the one-sided rows, and the count of failing rows."""
    out = [summary(lines, only_base, only_new, threshold)]
    for tool in dict.fromkeys(ln.tool for ln in lines):
        out += ["", table([ln for ln in lines if ln.tool == tool]), ""]
    for ln in lines:
        if ln.unusable:
            out.append(f"{ln.label}: no usable value: {ln.unusable} (a finite positive number is needed; fails)")
    broken, lines = lines, [ln for ln in lines if not ln.unusable]
    for ln in (ln for ln in lines if ln.significant):
        way = f"{ln.speed:.2f}x slower" if ln.worse else f"{1 / ln.speed:.2f}x faster"
        out.append(f"{ln.label}: {way}: {name_of(ln.tool, ln.metric)} {human(_mean(ln.base), ln.metric)} -> "
                   f"{human(_mean(ln.new), ln.metric)} ({ln.basis}: {ln.sure})")
    for (tool, group) in dict.fromkeys((ln.tool, ln.group) for ln in lines):
        mine = [ln for ln in lines if (ln.tool, ln.group) == (tool, group)]
        speed = _mean([ln.speed for ln in mine])
        slower = sum(ln.significant and ln.worse for ln in mine)
        faster = sum(ln.significant and not ln.worse for ln in mine)
        change = ("unchanged" if abs(speed - 1) < 5e-4 else f"{speed:.3f}x slower" if speed > 1 else
                  f"{1 / speed:.3f}x faster")
        bases = ", ".join(f"{n} {b}" for b, n in _count(ln.basis for ln in mine))
        out.append(f"summary {group}: geometric mean {change} over {len(mine)} rows "
                   f"({slower} slower, {faster} faster beyond {threshold:.0%} and the spread; basis: {bases})")
    apart = _apart(only_base, only_new)
    if apart:
        out.append(f"the sides differ in {apart}: such rows never join (a diff pools nothing); to compare "
                   f"backends side by side use `commbench compare --backends`")
    for rec in only_base:
        out.append(f"missing in new: {_named(rec)}")
    for rec in only_new:
        out.append(f"only in new: {_named(rec)}")
    failing = failures(broken, only_base)
    if failing:
        out.append(f"failing rows: {sum(failing.values())} of {len(broken) + len(only_base)} baseline rows ("
                   + ", ".join(f"{n} {k}" for k, n in failing.items()) + ")")
    return "\n".join(printable(line) for block in out for line in block.split("\n")) + "\n"


def _count(items):
    counts = {}
    for item in items:
        counts[item] = counts.get(item, 0) + 1
    return counts.items()


def parse_threshold(text):
    """'5%' or '0.05' -> 0.05."""
    raw = str(text).strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise UserError(f"--threshold {text!r} is not a percentage (examples: 5%, 0.05)") from None
    return finite(value, f"--threshold {text!r}", 0, 9.99)
