"""`commbench pairs`: a node x node link matrix from pairwise tests, and the bad node or link named.

One rank per node; nodes paired off in rounds (commbench/cases/pairs.py), every pair of a round at once, then a
confirm pass in the same launch: every suspect against nodes already known good, every slow link retested.
Each round's record becomes one record per pair (host, peer_host, round; `confirm` in the confirm pass). The
verdict (commbench/cases/pairs_verdict.py) names each bad node (slow against the known-good nodes) and bad link
(slow again, between two nodes that are fine), with its evidence and a confidence; a bad node or link named ends
the run with exit 1 ('error: verdict: ...'). `--simulate` runs that verdict on synthetic matrices instead
(commbench/cases/pairs_simulate.py).
"""
import dataclasses
import sys

import click

from benchcore.errors import UserError, refuse_given, shown, spelled
from benchcore.report import figures
from benchcore.report.render import console, print_table
from benchcore.results import schema
from benchcore.results.records import PLOT_SUFFIXES, new_output_option
from benchcore.results.usable import FRACTION
from benchcore.units import parse_size
from commbench.cases import pairs_verdict as pv
from commbench.cases.case import CaseOptions, refuse_unread
from commbench.cases.pairs import FULL_COVERAGE_UP_TO, tournament
from commbench.cases.registry import CASES
from commbench.commands import history as health
from commbench.commands.options import (MeasureOptions, Output, given_fields, launch_options, launch_specs,
                                        measure_options, no_leftovers, take)
from commbench.planning import build_plan
from commbench.runner import run_plan

RANDOM_ROUNDS = 4   # random rounds beyond FULL_COVERAGE_UP_TO nodes (pairs_simulate.py: enough for 10,000)
DEFAULT_ROUNDS = lambda n: len(tournament(n)) if n <= FULL_COVERAGE_UP_TO else RANDOM_ROUNDS  # noqa: E731
# Rounds x nodes: every rank holds the whole schedule (a partner per node and round), and the CLI one record per
# pair, operation and round (about 2 KB in memory each) for the verdict: 250,000 keeps those near 500 MB.
PAIR_SLOTS_MAX = 250_000
SHARED = ("run_id", "size_bytes", "count", "dtype", "wrong", "backend", "launcher", "env", "topology", "versions",
          "timestamp", "iters", "warmup", "command", "confirm")
SIMULATE_ONLY = ("simulate", "noise", "trials", "bad_rate", "rounds", "min_fraction")


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
        algbw = pv.pair_busbw(rec["size_bytes"], rec["rank_time_us"][a], rec["rank_time_us"][b])
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


def arrays(pairs):
    """(hosts, P, W, C, CW) of sendrecv pair records: random rounds (P, W) and the confirm pass (C, CW) as
    pairs_verdict takes them, on host indices."""
    np = pv.np
    hosts = sorted({h for r in pairs for h in (r["host"], r["peer_host"])})
    index = {h: i for i, h in enumerate(hosts)}

    def grid(recs):
        rows = {x: i for i, x in enumerate(sorted({r["round"] for r in recs}))}
        P = np.full((len(rows), len(hosts)), -1, dtype=np.int64)
        W = np.full(P.shape, np.nan)
        for r in recs:
            a, b, i = index[r["host"]], index[r["peer_host"]], rows[r["round"]]
            P[i, a], P[i, b], W[i, a], W[i, b] = b, a, r["busbw_gbps"], r["busbw_gbps"]
        return P, W
    return (hosts, *grid([r for r in pairs if r.get("confirm") is None]),
            *grid([r for r in pairs if r.get("confirm") is not None]))


def verdict(records, min_fraction, run_id):
    pairs = [r for r in records if not r.get("event") and r.get("peer_host") and r["collective"] == "sendrecv"]
    if not pairs:
        return []
    if all(len(r["hosts"]) == 1 for r in pairs):   # emulated nodes: there is no link between them to judge
        reason = (f"nodes emulated on one machine ({pairs[0]['hosts'][0]}) share its CPU and loopback: no link or "
                  "node is judged; the matrix shows the numbers only")
        return [schema.event("commbench", "verdict", reason, run_id=run_id, check="pairs", bad_nodes=[],
                             bad_links=[], matrix=None, passed=None)]
    hosts, P, W, C, CW = arrays(pairs)
    v = pv.judge(P, W, C, CW, min_fraction)
    named = lambda ev: {**ev, "peers": [hosts[p] for p in ev["peers"]]}  # noqa: E731
    accused = [{"node": hosts[s], **named(ev)} for s, ev in v.bad_nodes] + \
              [{"link": [hosts[a], hosts[b]], **named(ev)} for (a, b), ev in v.bad_links]
    bad_nodes, bad_links = [a["node"] for a in accused if "node" in a], [a["link"] for a in accused if "link" in a]
    grid = {}
    for (a, b), bw in matrix(pairs).items():
        grid.setdefault(a, {})[b] = grid.setdefault(b, {})[a] = bw
    parts = ([f"bad node(s): {', '.join(bad_nodes)}"] if bad_nodes else []) + \
            ([f"bad link(s): {', '.join(' - '.join(p) for p in bad_links)}"] if bad_links else [])
    reason = ("; ".join(parts) if parts else "no bad node or link") + \
        f" (sendrecv busbw below {min_fraction:g} of the median link, against known-good nodes in the confirm pass)"
    why = {a["node"]: f"bad node: {a['median_ratio']:.2f} of the median link against {a['pairings']} known-good "
           f"node(s)" for a in accused if "node" in a}
    nodes = [{"host": h, "passed": h not in why, "reason": why.get(h)} for h in hosts]
    return [schema.event("commbench", "verdict", reason, run_id=run_id, check="pairs", bad_nodes=bad_nodes,
                         bad_links=bad_links, accused=accused, node_verdicts=nodes, healthy_busbw_gbps=v.healthy,
                         link_noise=v.noise, suspects=v.suspects, cleared=[hosts[s] for s in v.cleared],
                         untested=[hosts[s] for s in v.untested], matrix=grid, passed=not parts)]


def print_pairs(records):
    links = matrix(records)
    hosts = sorted({h for pair in links for h in pair})
    rows = [{"host": h, **{p: links.get(tuple(sorted((h, p)))) for p in hosts if p != h}} for h in hosts]
    print_table(rows, [("host", "sendrecv busbw GB/s", None)] + [(h, h, ".3f") for h in hosts],
                title="node x node link matrix (best of its rounds)")
    for rec in records:
        if rec.get("event") == "verdict":
            console().print(f"verdict: {rec['reason']}")


def matrix_figure(records):
    """The node x node heat map of sendrecv busbw (best of each pair's rounds), each cell's GB/s written in it."""
    links = matrix(records)
    hosts = sorted({h for pair in links for h in pair})
    grid = [[links.get(tuple(sorted((a, b))), float("nan")) if a != b else float("nan") for b in hosts] for a in hosts]
    fig, ax = figures.pyplot().subplots(figsize=(1.2 * len(hosts) + 3, 1.2 * len(hosts) + 2))
    image = ax.imshow(grid, cmap="viridis")
    ax.set_xticks(range(len(hosts)), hosts, rotation=45, ha="right")
    ax.set_yticks(range(len(hosts)), hosts)
    middle = (image.norm.vmin + image.norm.vmax) / 2 if image.norm.vmin is not None else 0
    for i, row in enumerate(grid):
        for j, value in enumerate(row):
            text = "-" if i == j else "n/a" if value != value else f"{value:.3g}"   # nan: a pair never measured
            ax.text(j, i, text, ha="center", va="center", fontsize="small",
                    color="black" if value == value and value > middle else "white" if value == value else "grey")
    fig.colorbar(image, label="sendrecv busbw (GB/s)")
    ax.set_title("commbench pairs: sendrecv busbw per node pair (GB/s, best of its rounds)")
    fig.tight_layout()
    return fig


def plot_matrix(records, path):
    figures.save(matrix_figure(records), path)


@click.command()
@click.option("--rounds", type=click.IntRange(1, 10000), default=None,
              help=f"Rounds of pairings before the confirm pass [default: a round-robin (every pair once) up to "
                   f"{FULL_COVERAGE_UP_TO} nodes, else {RANDOM_ROUNDS} random rounds]; more than a round-robin "
                   f"plays it again. The confirm pass adds {pv.CONFIRM_ROUNDS} rounds (suspects only).")
@click.option("--size", default="256M", show_default=True, help="Bytes each pair moves per operation.")
@click.option("--min-fraction", type=FRACTION, default=0.7, show_default=True,
              help="A link (or a node's median link) below this fraction of the healthy rate is bad.")
@click.option("--plot", default=None, callback=new_output_option("--plot", PLOT_SUFFIXES),
              help="Heat map PNG of the matrix (a new file).")
@click.option("--simulate", default=None, metavar="NODES[,NODES...]",
              help="Measure the verdict instead of the links: synthetic matrices at these node counts (e.g. "
                   "3,4,8,64,1024,10000; from 3 nodes a slow node is told from a slow link), a table of detection, "
                   "false accusations and rounds used; nothing is launched.")
@click.option("--noise", default="0.05,0.1,0.2", show_default=True,
              help="--simulate: link noise levels (relative standard deviation of a link's busbw).")
@click.option("--trials", type=click.IntRange(1, 100000), default=200, show_default=True,
              help="--simulate: runs per row.")
@click.option("--bad-rate", type=FRACTION, default=0.5, show_default=True,
              help="--simulate: the bad node's (or link's) busbw as a fraction of the healthy rate.")
@click.option("--history", default=None, metavar="FILE",
              help="Append each judged node's verdict to FILE (JSONL; `commbench health FILE` reads it).")
@measure_options()
@launch_options
def pairs(rounds, size, min_fraction, simulate, noise, trials, bad_rate, history, **kw):
    """Pairwise link test: a node x node bandwidth matrix, and which node or link is bad.

    One rank per node. Nodes are paired off in rounds, N/2 pairs at once, a different pairing each
    round; each pair runs sendrecv and a 2-rank all_reduce on its own process group. Records: one per
    pair, operation and round (host, peer_host, round), then a verdict (bad_nodes, bad_links); exit 1
    when it names a bad node or link. After the rounds, a confirm pass retests every suspect against
    nodes already known good and every slow link again: a bad node is slow against them, a bad link
    slow again between two nodes that are fine; each accusation carries its evidence and a confidence.

    \b
    Example:
      commbench pairs --nodes 4 --size 64M --plot matrix.png                # emulated here
      srun -N 16 ... commbench pairs --size 256M --out pairs.jsonl          # inside a Slurm allocation
      commbench pairs --simulate 64,1024,10000 --noise 0.1                  # how well the verdict works
    """
    if simulate is not None:
        return run_simulation(simulate, noise, trials, bad_rate, rounds, min_fraction)
    refuse_given(["noise", "trials", "bad_rate"], "these set up --simulate")
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
    configs += [{**cfg, "round": rounds + j, "confirm": j, "min_fraction": min_fraction}
                for j in range(pv.CONFIRM_ROUNDS) for cfg in plan.configs if cfg["kind"] == "sendrecv"]
    plan = dataclasses.replace(plan, configs=configs, iter_stats=True)   # pairs need every rank's own time
    output = take(kw, Output)
    refuse_given(["show_stats"], "pairs shows its node x node matrix, not the per-rank statistics table")
    no_leftovers(kw)
    health.check(history)
    records = run_plan([(spec, plan)], output, print_pairs, "pairs", plot_matrix,
                       judge=lambda recs: verdict(recs, min_fraction, plan.run_id), derive=pair_records)
    health.append(history, health.from_pairs(records or [], plan.run_id))
    named = [r for r in records or [] if r.get("event") == "verdict" and r.get("passed") is False]
    if named:   # a bad node or link fails the run, as a health check's exit status; accept judges the record
        click.echo(f"error: verdict: {shown(named[-1]['reason'], 1000)}", err=True)
        sys.exit(1)


def run_simulation(nodes_text, noise_text, trials, bad_rate, rounds, min_fraction):
    """--simulate: the table of commbench/cases/pairs_simulate.py."""
    from commbench.cases import pairs_simulate

    others = [text for name, text in spelled().items() if name not in SIMULATE_ONLY]
    if others:
        raise UserError(f"{', '.join(others)}: --simulate launches nothing (it takes --noise, --trials, --bad-rate, "
                        "--rounds, --min-fraction)")
    nodes, noises = _numbers(nodes_text, "--simulate", int, 2, 100_000), _numbers(noise_text, "--noise", float, 0, 1)
    if max(nodes) * trials > 20_000_000:
        raise UserError(f"--simulate {max(nodes)} x --trials {trials} is past 20,000,000 node-runs (minutes of CPU)")
    rows = pairs_simulate.table(nodes, noises, trials, lambda n: rounds or DEFAULT_ROUNDS(n), bad_rate, min_fraction)
    # two-line headers, said in full under the table: a compact table within 100 columns (was 105, 8 header lines)
    print_table(rows, [("nodes", "\nnodes", None), ("noise", "link\nnoise", ".0%"), ("scenario", "\nscenario", None),
                       ("runs", "\nruns", None), ("detection", "\ndetected", ".1%"),
                       ("link_measured", "bad link\nmet", ".1%"), ("false_per_run", "false\nper run", ".3f"),
                       ("false_per_node", "false\nper node", ".4%"), ("rounds_mean", "rounds\nmean", ".1f"),
                       ("rounds_max", "rounds\nmax", None), ("cpu_s_per_run", "CPU s\nper run", ".3f")],
                title=f"pairs verdict on synthetic matrices: bad node or link at {bad_rate:g} of the healthy rate, "
                      f"--min-fraction {min_fraction:g}", compact=True)
    console().print("bad link met: the runs whose random rounds paired the bad link's two nodes; false per run: the "
                    "healthy nodes or links named bad in a run (mean); false per node: that over the nodes; rounds: "
                    "the rounds a run used, confirmation included")


def _numbers(text, option, kind, low, high):
    try:
        values = [kind(x) for x in str(text).split(",") if x.strip()]
    except ValueError:
        values = []
    if not values or not all(low <= v <= high for v in values):
        raise UserError(f"{option} takes a comma list of numbers from {low} to {high}, got {shown(text, 80)}")
    return values
