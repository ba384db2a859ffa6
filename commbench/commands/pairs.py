"""`commbench pairs`: a node x node link matrix from pairwise tests, and the bad node or link named.

One rank per node; nodes paired off in rounds (commbench/cases/pairs.py), every pair of a round at once.
Each round's record becomes one record per pair (host, peer_host, round). The verdict works on each
pair's sendrecv busbw, the best of the rounds it was tested in (other load only ever slows a link, so
the best is the link; by default every pair is tested twice):
  - a node is bad when its links' median is below --min-fraction of the median of the links it is not on
    (with 2 nodes there are none: no node is judged);
  - a link is bad when it is below --min-fraction of the median link between fine nodes, both its ends fine.
A bad node or link named ends the run with exit 1 ('error: verdict: ...').
"""
import dataclasses
import statistics
import sys

import click

from benchcore.errors import UserError, refuse_given, shown
from benchcore.report.render import console, print_table, save_figure
from benchcore.results import schema
from benchcore.results.records import PLOT_SUFFIXES, new_output_option
from benchcore.results.usable import FRACTION
from benchcore.units import parse_size
from commbench.cases.case import CaseOptions, refuse_unread
from commbench.cases.pairs import FULL_COVERAGE_UP_TO, tournament
from commbench.cases.registry import CASES
from commbench.commands.options import (MeasureOptions, Output, given_fields, launch_options, launch_specs,
                                        measure_options, no_leftovers, take)
from commbench.planning import build_plan
from commbench.runner import run_plan

DEFAULT_ROUNDS = lambda n: 2 * len(tournament(n)) if n <= FULL_COVERAGE_UP_TO else 16  # noqa: E731
# Rounds x nodes: every rank holds the whole schedule (a partner per node and round), and the CLI one record per
# pair, operation and round (about 2 KB in memory each) for the verdict: 250,000 keeps those near 500 MB (the
# default 16 rounds up to 15,625 nodes).
PAIR_SLOTS_MAX = 250_000
SHARED = ("run_id", "size_bytes", "count", "dtype", "wrong", "backend", "launcher", "env", "topology", "versions",
          "timestamp", "iters", "warmup", "command")


def pair_records(rec):
    """One record per pair of a round record (a bye has none)."""
    if rec.get("event") or rec.get("partner") is None:
        return [rec]
    hosts = rec["rank_hosts"]
    if len(set(hosts)) < len(hosts):   # nodes emulated on one machine: told apart by rank
        hosts = [f"{h}:{r}" for r, h in enumerate(hosts)]
    out = []
    for a, b in enumerate(rec["partner"]):
        if b is None or b < a:
            continue
        t = max(rec["rank_time_us"][a], rec["rank_time_us"][b])   # the pair ends when both ends are done
        algbw = rec["size_bytes"] / t / 1e3
        out.append(schema.measurement(
            "commbench", collective=rec["kind"], time_us=t, algbw_gbps=algbw, busbw_gbps=algbw, world_size=2,
            nodes=2, hosts=sorted({rec["rank_hosts"][a], rec["rank_hosts"][b]}), host=hosts[a], peer_host=hosts[b],
            round=rec["round"], in_place=rec["kind"] == "all_reduce",
            **{k: rec.get(k) for k in SHARED}))
    return out


def matrix(records, kind="sendrecv"):
    """{(host, peer): best busbw over its rounds} of one operation."""
    per = {}
    for rec in records:
        if not rec.get("event") and rec.get("peer_host") and rec["collective"] == kind:
            per.setdefault(tuple(sorted((rec["host"], rec["peer_host"]))), []).append(rec["busbw_gbps"])
    return {pair: max(v) for pair, v in per.items()}


def judge(links, min_fraction):
    """(bad nodes, bad links) from {(a, b): busbw}. Each node is set against the links it is not on, so its own
    slow links never lower its yardstick (with 4 nodes, half the links touch any one of them)."""
    ranked = sorted(links, key=links.get)   # linear in links after this sort: each node's own links by index
    values, mine = [links[pair] for pair in ranked], {}
    for i, pair in enumerate(ranked):
        for h in pair:
            mine.setdefault(h, []).append(i)
    hosts = sorted(mine)
    score = {h: statistics.median(values[i] for i in mine[h]) for h in hosts}
    others = {h: _median_without(values, mine[h]) for h in hosts}
    bad_nodes = [h for h in hosts if others[h] is not None and score[h] < min_fraction * others[h]]
    bad = set(bad_nodes)
    fine = {pair: bw for pair, bw in links.items() if not set(pair) & bad}
    typical = statistics.median(fine.values()) if fine else 0
    bad_links = [list(pair) for pair, bw in sorted(fine.items()) if bw < min_fraction * typical]
    return bad_nodes, bad_links


def _median_without(values, skip):
    """Median of sorted values without the indices in skip (ascending), in O(len(skip)); None if none is left."""
    left = len(values) - len(skip)

    def nth(rank):
        for i in skip:
            if i > rank:
                break
            rank += 1
        return values[rank]
    return (nth((left - 1) // 2) + nth(left // 2)) / 2 if left else None


def verdict(records, min_fraction, run_id):
    links = matrix(records)
    if not links:
        return []
    pairs = [r for r in records if r.get("peer_host")]
    if all(len(r["hosts"]) == 1 for r in pairs):   # emulated nodes: there is no link between them to judge
        reason = (f"nodes emulated on one machine ({pairs[0]['hosts'][0]}) share its CPU and loopback: no link or "
                  "node is judged; the matrix shows the numbers only")
        return [schema.event("commbench", "verdict", reason, run_id=run_id, check="pairs", bad_nodes=[],
                             bad_links=[], matrix=None, passed=None)]
    bad_nodes, bad_links = judge(links, min_fraction)
    grid = {}
    for (a, b), bw in links.items():
        grid.setdefault(a, {})[b] = grid.setdefault(b, {})[a] = bw
    parts = ([f"bad node(s): {', '.join(bad_nodes)}"] if bad_nodes else []) + \
            ([f"bad link(s): {', '.join(' - '.join(p) for p in bad_links)}"] if bad_links else [])
    reason = ("; ".join(parts) if parts else "no bad node or link") + \
        f" (sendrecv busbw below {min_fraction:g} of the median link: a node's median against the links it is not on)"
    return [schema.event("commbench", "verdict", reason, run_id=run_id, check="pairs", bad_nodes=bad_nodes,
                         bad_links=bad_links, matrix=grid, passed=not parts)]


def print_pairs(records):
    links = matrix(records)
    hosts = sorted({h for pair in links for h in pair})
    rows = [{"host": h, **{p: links.get(tuple(sorted((h, p)))) for p in hosts if p != h}} for h in hosts]
    print_table(rows, [("host", "sendrecv busbw GB/s", None)] + [(h, h, ".3f") for h in hosts],
                title="node x node link matrix (best of its rounds)")
    for rec in records:
        if rec.get("event") == "verdict":
            console().print(f"verdict: {rec['reason']}")


def plot_matrix(records, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    links = matrix(records)
    hosts = sorted({h for pair in links for h in pair})
    grid = [[links.get(tuple(sorted((a, b))), float("nan")) if a != b else float("nan") for b in hosts] for a in hosts]
    fig, ax = plt.subplots(figsize=(1.2 * len(hosts) + 3, 1.2 * len(hosts) + 2))
    image = ax.imshow(grid, cmap="viridis")
    ax.set_xticks(range(len(hosts)), hosts, rotation=45, ha="right")
    ax.set_yticks(range(len(hosts)), hosts)
    fig.colorbar(image, label="sendrecv busbw (GB/s)")
    ax.set_title("commbench pairs")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


@click.command()
@click.option("--rounds", type=click.IntRange(1, 10000), default=None,
              help="Rounds of pairings [default: two round-robins (every pair twice) up to 32 nodes, else 16 "
                   "random rounds]; more than a round-robin plays it again.")
@click.option("--size", default="256M", show_default=True, help="Bytes each pair moves per operation.")
@click.option("--min-fraction", type=FRACTION, default=0.7, show_default=True,
              help="A link (or a node's median link) below this fraction of the median is bad.")
@click.option("--plot", default=None, callback=new_output_option("--plot", PLOT_SUFFIXES),
              help="Heat map PNG of the matrix (a new file).")
@measure_options()
@launch_options
def pairs(rounds, size, min_fraction, **kw):
    """Pairwise link test: a node x node bandwidth matrix, and which node or link is bad.

    One rank per node. Nodes are paired off in rounds, N/2 pairs at once, a different pairing each
    round; each pair runs sendrecv and a 2-rank all_reduce on its own process group. Records: one per
    pair, operation and round (host, peer_host, round), then a verdict (bad_nodes, bad_links); exit 1
    when it names a bad node or link.

    \b
    Example:
      commbench pairs --nodes 4 --size 64M --plot matrix.png                # emulated here
      srun -N 16 ... commbench pairs --size 256M --out pairs.jsonl          # inside a Slurm allocation
    """
    if kw.get("nproc_per_node") not in (None, 1):
        raise UserError("pairs runs one rank per node: --nproc-per-node 1")
    kw["nproc_per_node"] = 1
    spec = launch_specs(kw)[0]
    if spec.world_size < 2:
        raise UserError("pairs needs at least 2 nodes (--nodes N)")
    if (kw["min_bytes"], kw["max_bytes"]) != ("8", "256M"):
        raise UserError("pairs measures one size: give it as --size, not -b/-e")
    kw["min_bytes"] = kw["max_bytes"] = str(parse_size(size, "--size"))
    rounds = rounds or DEFAULT_ROUNDS(spec.world_size)
    if rounds * spec.world_size > PAIR_SLOTS_MAX:
        raise UserError(f"{rounds} rounds x {spec.world_size} nodes is past {PAIR_SLOTS_MAX:,} (every rank holds "
                        "the schedule, and the records of every pair, operation and round stay in memory for the "
                        f"verdict): at most --rounds {max(1, PAIR_SLOTS_MAX // spec.world_size)} here")
    plan = build_plan(["pair"], take(kw, MeasureOptions), CaseOptions(), spec)
    refuse_unread(None, [CASES["pair"]], given_fields())
    configs = [{**cfg, "round": r, "partner": partner}
               for r, partner in enumerate(tournament(spec.world_size, rounds)) for cfg in plan.configs]
    plan = dataclasses.replace(plan, configs=configs, iter_stats=True)   # pairs need every rank's own time
    output = take(kw, Output)
    refuse_given(["show_stats"], "pairs shows its node x node matrix, not the per-rank statistics table")
    no_leftovers(kw)
    records = run_plan([(spec, plan)], output, print_pairs, "pairs", plot_matrix,
                       judge=lambda recs: verdict(recs, min_fraction, plan.run_id), derive=pair_records)
    named = [r for r in records or [] if r.get("event") == "verdict" and r.get("passed") is False]
    if named:   # a bad node or link fails the run, as a health check's exit status; accept judges the record
        click.echo(f"error: verdict: {shown(named[-1]['reason'], 1000)}", err=True)
        sys.exit(1)
