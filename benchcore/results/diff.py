"""`diff BASELINE NEW`: what changed beyond noise, in the manner of pyperf's compare_to.

Records are joined on their identity (benchcore.results.read.TOOL). A change is reported when it is beyond the
threshold AND beyond the run-to-run spread. The spread, in order of what the records allow:
  t-test     several values per side (runs with different run_id, cycles, repeats): benchcore.results.stats'
             Welch t interval of the ratio must exclude 1
  rank range one value per side that carries min/max over ranks (or repeats): the two ranges must not overlap
  threshold  one value per side and no range: the threshold alone, said so on the line
A row whose metric is not a finite positive number on either side (NaN, 0, -1, null, missing) is not compared:
it fails, named, as does a baseline row with no partner in NEW (missing); neither ever vanishes from the gate.
"""
from dataclasses import dataclass

from benchcore.errors import UserError
from benchcore.inputs import finite
from benchcore.results import stats, usable
from benchcore.results.read import TOOL, group_of, identity, label, measurements


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
    worse: bool             # slower (commbench time up, iobench MB/s down)
    unusable: str = ""      # why the row could not be compared ("new time_us is NaN"): a failure

    @property
    def speed(self):
        """How many times slower (>1) or faster (<1) new is: the time ratio, or the inverse bandwidth ratio."""
        if self.ratio is None:
            return None
        return self.ratio if TOOL[self.tool].lower_is_better else 1 / self.ratio

    @property
    def failed(self):
        return bool(self.unusable) or (self.significant and self.worse)


def _unusable(records, metric, side):
    """Why some value of metric on this side is not a finite positive number ('' when all are)."""
    bad = ["missing" if metric not in r else usable.flaw(r[metric]) for r in records]
    bad = [b for b in bad if b]
    if not bad:
        return ""
    return f"{side} {metric} is {bad[0]}" + (f" ({len(bad)} of {len(records)} values)" if len(records) > 1 else "")


def _range(records, tool):
    lo, hi = tool.spread
    if all(usable.usable(r.get(lo)) and usable.usable(r.get(hi)) for r in records):
        return min(r[lo] for r in records), max(r[hi] for r in records)
    return None


def compare(base_records, new_records, threshold):
    """(lines of joined identities, base-only records (missing in new), new-only records). A record whose
    identity fields have wrong types is skipped with a warning (its baseline row then counts as missing)."""
    sides = [{}, {}]
    for side, records, what in zip(sides, (base_records, new_records), ("baseline", "new")):
        for rec in usable.sound(measurements(records), what):
            side.setdefault(identity(rec), []).append(rec)
    pairs = [(k, k) for k in sides[1] if k in sides[0]] + _loose_pairs(sides)
    lines = []
    for base_key, key in pairs:
        base, new = sides[0][base_key], sides[1][key]
        tool = TOOL[key[0]]
        bad = _unusable(new, tool.metric, "new") or _unusable(base, tool.metric, "baseline")
        if bad:
            lines.append(Line(label(new[0]), group_of(new[0]), key[0], [], [], None, "", "", False, False, False,
                              bad))
            continue
        a, b = [r[tool.metric] for r in new], [r[tool.metric] for r in base]
        interval = stats.ratio_interval(a, b)
        if interval is not None:
            ratio, basis = interval.ratio, "t-test"
            beyond = interval.beyond(0)
            sure = (f"{len(b)} vs {len(a)} values, {int(stats.CONFIDENCE * 100)}% interval of the ratio "
                    f"[{interval.low:.3f}, {interval.high:.3f}] {'excludes' if beyond else 'includes'} 1")
        else:
            ratio = stats.geometric_mean(a) / stats.geometric_mean(b)
            ranges = _range(base, tool), _range(new, tool)
            if None not in ranges:
                (b_lo, b_hi), (n_lo, n_hi) = ranges
                beyond, basis = n_lo > b_hi or n_hi < b_lo, "rank range"
                sure = (f"min-max over ranks {b_lo:.4g}-{b_hi:.4g} vs {n_lo:.4g}-{n_hi:.4g} "
                        f"{'do not overlap' if beyond else 'overlap'}")
            else:
                beyond, basis = True, "threshold"
                sure = "one value per side and no range: threshold only, noise not known"
        point = stats.Ratio(ratio, ratio, ratio, len(a), len(b)).beyond(threshold)
        worse = ratio > 1 if tool.lower_is_better else ratio < 1
        lines.append(Line(label(new[0]), group_of(new[0]), key[0], b, a, ratio, basis, sure, beyond,
                          point and beyond, worse))
    joined_base, joined_new = {b for b, _ in pairs}, {n for _, n in pairs}
    only_base = [recs[0] for k, recs in sides[0].items() if k not in joined_base]
    only_new = [recs[0] for k, recs in sides[1].items() if k not in joined_new]
    return lines, only_base, only_new


SET_APART = ("backend", "launcher", "topology")   # defining fields a label leaves out


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
    """A one-sided row's label with the defining fields a label leaves out (backend, launcher, topology)."""
    more = [f"{k} {rec[k]}" for k in SET_APART if rec.get(k)]
    return label(rec) + (f" ({', '.join(more)})" if more else "")


def _loose_pairs(sides):
    """Identities that differ only where one side does not know a field (None: an imported fio file has no
    storage class, an old log no world size) join when exactly one candidate fits either way. Keys are indexed
    by which fields they lack, so 10,000 rows a side join in milliseconds, not 10^8 comparisons."""
    base_left = [k for k in sides[0] if k not in sides[1]]
    new_left = [k for k in sides[1] if k not in sides[0]]
    masks = [{_mask(k) for k in keys} for keys in (base_left, new_left)]
    index = [{}, {}]
    for i, keys in enumerate((base_left, new_left)):
        for k in keys:
            for other in masks[1 - i]:
                m = tuple(a or b for a, b in zip(_mask(k), other))
                index[i].setdefault((_project(k, m), m), {})[k] = None      # an ordered set

    def fits(key, i):
        """The keys of side i that fit key (a key of the other side)."""
        found = []
        for mine in masks[i]:
            m = tuple(a or b for a, b in zip(mine, _mask(key)))
            found += [k for k in index[i].get((_project(key, m), m), {}) if _mask(k) == mine and len(k) == len(key)]
        return found
    pairs = []
    for key in new_left:
        found = fits(key, 0)
        if len(found) == 1 and fits(found[0], 1) == [key]:
            pairs.append((found[0], key))
    return pairs


def _mask(key):
    return tuple(v is None for v in key)


def _project(key, mask):
    return tuple(v for v, none in zip(key, mask) if not none)


def _mean(values):
    return stats.geometric_mean(values)


def failures(lines, only_base):
    """{kind: count} of the rows that fail a regression gate (empty: it passes)."""
    found = {"slower": sum(ln.significant and ln.worse for ln in lines),
             "with no usable value": sum(bool(ln.unusable) for ln in lines), "missing in new": len(only_base)}
    return {k: n for k, n in found.items() if n}


def text(lines, only_base, only_new, threshold):
    """The report: significant changes, rows not comparable, one summary line per group, the one-sided rows,
    and the count of failing rows."""
    out = []
    for ln in lines:
        if ln.unusable:
            out.append(f"{ln.label}: no usable value: {ln.unusable} (a finite positive number is needed; fails)")
    broken, lines = lines, [ln for ln in lines if not ln.unusable]
    shown = [ln for ln in lines if ln.significant]
    for ln in sorted(shown, key=lambda ln: (ln.tool, ln.group, -abs(ln.speed - 1))):
        unit = TOOL[ln.tool].unit
        way = f"{ln.speed:.2f}x slower" if ln.worse else f"{1 / ln.speed:.2f}x faster"
        out.append(f"{ln.label}: {_mean(ln.base):.4g} {unit} -> {_mean(ln.new):.4g} {unit}: {way} "
                   f"(ratio {ln.ratio:.3f}; {ln.basis}: {ln.sure})")
    if not shown:
        out.append(f"no difference beyond {threshold:.0%} and the run-to-run spread in {len(lines)} joined rows")
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
    return "\n".join(out) + "\n"


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
