"""The rows a diff and a report compare, made once: every measured thing of NEW (its identity:
benchcore.results.read.identity) with the baseline's records of the same thing; sort_key is the order a diff lists
them in (collective, size, placement, then the rest of what the row is). `diff` judges these rows, `report
--baseline` lists them in its tables and draws them in its plots, and accept's report does the same per check, so
the three never disagree on which baseline a row has.

Two identities join exactly, or where they differ only in fields one side does not know (None: an imported fio file
has no device, an old log no world size) and exactly one candidate fits either way. A bandwidth an imported log
printed as 0 (nccl-tests' two decimals round anything below 0.005 GB/s to 0.00) for bytes that moved in a finite time
is recomputed from the row's size and time (algbw), times the bus factor the same run's other rows show (busbw), so a
small size has a point in the busbw plot as it has one in the time plot; the records themselves are never changed.
"""
import statistics
from dataclasses import dataclass, field

from benchcore.results import usable
from benchcore.results.read import group_of, identity, label, measurements


@dataclass
class Joined:
    """One measured thing: its records in NEW (repeats, cycles, runs) and the baseline's records joined with them."""
    new: list
    base: list = field(default_factory=list)


def join(base_records, new_records, names=("baseline", "new")):
    """([Joined] of NEW's things in the order they come, [records of each baseline thing NEW lacks], [records of each
    NEW thing the baseline lacks]); events are left out, and so is a record whose identity fields have wrong types,
    with a warning naming its side (names)."""
    sides = [{}, {}]
    for side, records, what in zip(sides, (base_records, new_records), names):
        for rec in restored(usable.sound(measurements(records), what)):
            side.setdefault(identity(rec), []).append(rec)
    pairs = dict((k, k) for k in sides[1] if k in sides[0])
    pairs.update((new, base) for base, new in _loose_pairs(sides))
    rows = [Joined(recs, sides[0].get(pairs.get(k), [])) for k, recs in sides[1].items()]
    joined_base = set(pairs.values())
    only_base = sorted((recs for k, recs in sides[0].items() if k not in joined_base), key=lambda rs: sort_key(rs[0]))
    return rows, only_base, [j.new for j in rows if not j.base]


PLACES = {False: 0, True: 1, None: 2}      # out-of-place first, as nccl-tests prints them


def sort_key(rec):
    """Collective (or strategy, pattern; iobench: profile), phase, size, placement, then the rest of its label."""
    size = rec.get("size_bytes") if rec["tool"] == "commbench" else rec.get("bs_bytes")
    return (rec["tool"], group_of(rec), str(rec.get("phase") or ""), rec.get("direction") or "",
            size if isinstance(size, int) else -1, PLACES.get(rec.get("in_place"), 2), label(rec))


BANDWIDTHS = ("algbw_gbps", "busbw_gbps")
RECOMPUTED = "recomputed"    # the key a recomputed copy carries (never written: records on disk stay as read)


def restored(records):
    """records, with a copy of each imported commbench row whose algbw/busbw is 0 for bytes moved in a finite time:
    algbw = size / time, busbw = algbw x the bus factor (busbw / algbw) of the same run's rows of that collective and
    world size that print both (left 0 where none does)."""
    factors = {}
    for r in records:
        if r["tool"] == "commbench" and all(usable.usable(r.get(k)) for k in BANDWIDTHS):
            factors.setdefault(_run(r), []).append(r["busbw_gbps"] / r["algbw_gbps"])
    factor = {k: statistics.median(v) for k, v in factors.items()}
    out = []
    for r in records:
        if _rounded(r):
            algbw = r["size_bytes"] / r["time_us"] / 1e3
            r = dict(r, algbw_gbps=algbw if r.get("algbw_gbps") == 0 else r["algbw_gbps"], **{RECOMPUTED: True})
            if r.get("busbw_gbps") == 0 and _run(r) in factor:
                r["busbw_gbps"] = algbw * factor[_run(r)]
        out.append(r)
    return out


def _run(rec):
    return rec.get("run_id"), rec.get("source_file"), group_of(rec), rec.get("world_size")


def _rounded(rec):
    return (rec["tool"] == "commbench" and rec.get("source_format") is not None
            and any(rec.get(k) == 0 and not isinstance(rec.get(k), bool) for k in BANDWIDTHS)
            and isinstance(rec.get("size_bytes"), int) and rec["size_bytes"] > 0 and usable.usable(rec.get("time_us")))


def _loose_pairs(sides):
    """Identities that differ only where one side does not know a field (None: an imported fio file has no
    device, an old log no world size) join when exactly one candidate fits either way: [(base key, new key)]. Keys
    are indexed by which fields they lack, so 10,000 rows a side join in milliseconds, not 10^8 comparisons."""
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
