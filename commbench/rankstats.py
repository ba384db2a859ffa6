"""Per-rank, per-iteration statistics: the distribution of iteration times and the rank the others wait for.

Every rank marks, on its own clock, when it reaches each timed iteration and when it leaves it. Iteration
k's time is the gap between arrivals k and k+1 (the last one ends at its departure). A rank that reaches
the collectives late holds every other rank up, yet all ranks then see the same iteration time; what
differs is the time spent inside: the others wait there for the late rank. So a rank's lateness is the
median over iterations of the median rank's time inside minus its own: durations on one clock each, never
two clocks compared, so a rank that left the starting barrier a scheduler slice late is not taken for a
straggler. With the median iteration time T and the slowest rank's lateness L, the median rank alone
would take T - L: slowest_excess = T / (T - L). A rank is named an outlier when its lateness is beyond
3.5 robust z-scores (median absolute deviation over ranks, Iglewicz & Hoaglin) and above 5 % of T, so a
microsecond of noise on an otherwise flat set is never a verdict.

On GPUs (CUDA events) only the iteration times are kept: a host clock does not see when a kernel
starts, so nothing is said about lateness there. A slow link slows every rank of a ring alike;
`commbench pairs` tells links apart.
"""
import os
import statistics

from benchcore.errors import UserError
from commbench.cases.registry import record_label

Z_LIMIT = 3.5
MIN_SHARE = 0.05
MAD_TO_SIGMA = 1.4826
CPU_BACKENDS = ("gloo", "mpi")   # ranks that run on cores (NCCL's run on GPUs)
MAX_ITERS = 4096   # per-iteration marks kept per rank (the last ones): bounded memory at any -n


def percentile(values, p):
    """The p-th percentile (0-100) by linear interpolation between closest ranks."""
    values = sorted(values)
    pos = (len(values) - 1) * p / 100
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


def summarize(samples, hosts, marks=True, ops_per_iter=1, per_rank=False, departures=True):
    """Record fields from every rank's samples and each rank's host. marks: samples are host clock readings
    (arrival at and departure from each iteration, in turn; without departures each arrival, then the loop's end:
    no lateness then); otherwise iteration times (CUDA events)."""
    if not marks:
        times = samples
    elif departures:
        times = [[b - a for a, b in zip(m[0::2], m[2::2] + m[-1:])] for m in samples]
    else:
        times = [[b - a for a, b in zip(m, m[1:])] for m in samples]
    flat = [t / ops_per_iter for per_rank in times for t in per_rank]
    if not flat:
        return {}
    mean = statistics.fmean(flat)
    fields = {"time_us_p50": percentile(flat, 50) * 1e6, "time_us_p99": percentile(flat, 99) * 1e6,
              "time_cv": statistics.pstdev(flat) / mean if mean > 0 else None}
    if per_rank:   # each rank's own median iteration time (pairs: every pair runs apart from the others)
        fields.update(rank_time_us=[statistics.median(t) / ops_per_iter * 1e6 for t in times], rank_hosts=hosts)
    if not (marks and departures) or len(samples) < 2:   # CUDA events: no arrivals; one rank: nobody to wait for
        return fields
    late = lateness([[d - a for a, d in zip(m[0::2], m[1::2])] for m in samples])
    slowest = max(range(len(late)), key=late.__getitem__)
    t_iter = statistics.median(t for per_rank in times for t in per_rank)
    behind = late[slowest] - statistics.median(late)
    fields.update(slowest_rank=slowest, slowest_host=hosts[slowest],
                  slowest_excess=t_iter / (t_iter - behind) if behind < t_iter else None,
                  outlier_ranks=outliers(late, t_iter))
    return fields


def lateness(inside):
    """Per rank: median over iterations of the median rank's time inside that iteration minus its own."""
    per_iter = [statistics.median(col) for col in zip(*inside)]
    return [statistics.median(m - t for t, m in zip(ranks, per_iter)) for ranks in inside]


def outliers(late, t_iter):
    """Ranks consistently late beyond Z_LIMIT robust z-scores and MIN_SHARE of an iteration."""
    mid = statistics.median(late)
    mad = statistics.median(abs(v - mid) for v in late) * MAD_TO_SIGMA
    return [r for r, v in enumerate(late)
            if v - mid > MIN_SHARE * t_iter and (mad == 0 or (v - mid) / mad > Z_LIMIT)]


def notes(records, cores=None):
    """One line per rank that is an outlier in some measurement ("consistent" only when in most of them); nothing
    when ranks are alike. CPU ranks beyond the cores of a host (cores: this machine's, by default) wait for the
    scheduler, not for a slow peer: then one line says so and names nobody."""
    cores = cores or len(os.sched_getaffinity(0))
    crowded = [r for r in records if r.get("backend") in CPU_BACKENDS and r.get("world_size") and r.get("hosts")
               and r["world_size"] / len(r["hosts"]) > cores]
    if any(r.get("outlier_ranks") for r in crowded):
        r = crowded[0]
        return [f"note: oversubscribed ({r['world_size'] // len(r['hosts'])} ranks per host on {cores} cores): "
                f"ranks wait for the scheduler, so no rank is named a straggler"]
    seen = {}
    for rec in records:
        for rank in rec.get("outlier_ranks") or []:
            seen.setdefault(rank, []).append(rec)
    lines = []
    for rank, recs in sorted(seen.items()):
        worst = max(recs, key=lambda r: r.get("slowest_excess") or 0)
        host = worst["slowest_host"] if worst.get("slowest_rank") == rank else "?"
        how = "a consistent straggler" if len(recs) > len(records) / 2 else "a straggler"
        line = (f"note: rank {rank} on {host} is {how} in {len(recs)} of {len(records)} measurements "
                f"(robust z > {Z_LIMIT} over ranks): the others wait for it")
        if worst.get("slowest_rank") == rank and worst.get("slowest_excess"):
            line += (f"; worst: the median rank would take 1/{worst['slowest_excess']:.2f} of the time "
                     f"({worst['collective']} at {worst['size_bytes']} B)")
        lines.append(line)
    return lines


def print_stats(records):
    """--stats: one row per measurement with its per-iteration statistics."""
    from benchcore.report.render import print_table  # here: every rank imports this module, and never renders

    rows = [{**r, "label": record_label(r), "place": "in" if r.get("in_place") else "out"}
            for r in records if not r.get("event") and r.get("time_us_p50") is not None]
    if rows:
        print_table(rows, STATS_COLUMNS, title="per-iteration statistics over every rank (commbench/rankstats.py)")


def with_stats(table_fn, show, fmt="table"):
    """table_fn, then (with --stats) the statistics table, then the straggler notes. --stats is a table: with
    --format json, csv or nccl-tests it would be shown nowhere, and is refused."""
    if show and fmt != "table":
        raise UserError(f"--stats shows a table: not with --format {fmt} (the records hold the same figures)")
    def tables(records):
        from benchcore.report.render import console  # here: every rank imports this module, and never renders

        table_fn(records)
        if show:
            print_stats(records)
        out = console()
        for line in notes([r for r in records if not r.get("event")]):
            out.print(line)
    return tables


STATS_COLUMNS = [("label", "measured", None), ("size_bytes", "size (B)", "d"), ("place", "place", None),
                 ("time_us", "time us", ".1f"), ("time_us_p50", "p50 us", ".1f"), ("time_us_p99", "p99 us", ".1f"),
                 ("time_cv", "cv", ".3f"), ("slowest_rank", "slowest rank", "d"), ("slowest_host", "host", None),
                 ("slowest_excess", "excess", ".2f")]
