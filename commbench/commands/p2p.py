"""`commbench p2p`: OSU-style point-to-point (latency, bw, bibw) on one or more transports, one table."""
import dataclasses

import click
from click.core import ParameterSource

from benchcore.errors import UserError, refuse_given
from benchcore.report.render import print_table
from benchcore.units import format_size
from commbench.cases.p2p import LARGE, MODES, WINDOW, case_name, osu_counts
from commbench.commands.options import launch_options, measure_options, parse, parse_backends, parse_budget
from commbench.output.tables import ranks_on
from commbench.runner import measure

# mode -> its columns: (name, header, format, the value of a record). Latency: OSU's average beside the median and
# the 99th percentile of the iterations (rankstats.py), since a few descheduled iterations can make the average
COLUMNS = {  # alone misleading (Gloo, 1 B, busy machine: average 386.8 us, p50 30.7, p99 3832)
    "latency": [("latency", "latency us", ".2f", lambda r: r["time_us"]),
                ("p50", "p50 us", ".2f", lambda r: r.get("time_us_p50")),
                ("p99", "p99 us", ".1f", lambda r: r.get("time_us_p99"))],
    "bw": [("bw", "bw MB/s", ".2f", lambda r: r["busbw_gbps"] * 1e3)],
    "bibw": [("bibw", "bibw MB/s", ".2f", lambda r: r["busbw_gbps"] * 1e3)],
}


def p2p_table(records):
    """One row per size: every mode on every transport (OSU's units: us, MB/s = 1e6 B/s); n/a where a record lacks
    a figure (--no-iter-stats: no percentiles)."""
    recs = [r for r in records if not r.get("event") and str(r.get("collective", "")).startswith("p2p_")]
    backends = list(dict.fromkeys(r["backend"] for r in recs))
    modes = [m for m in MODES if any(r["collective"] == case_name(m) for r in recs)]
    rows = {}
    for rec in recs:
        mode = rec["collective"][len("p2p_"):]
        row = rows.setdefault(rec["size_bytes"], {"size": rec["size_bytes"], "size_h": format_size(rec["size_bytes"])})
        for name, _, _, value in COLUMNS[mode]:
            row.setdefault(f"{name} {rec['backend']}", []).append(value(rec))
    for row in rows.values():  # the median of repeats, when there are several
        for k, v in row.items():
            if isinstance(v, list):
                v = sorted(x for x in v if x is not None)
                row[k] = v[len(v) // 2] if v else None
    columns = [("size", "size (B)", "d"), ("size_h", "size", None)]
    columns += [(f"{name} {b}", f"{head} {b}" if len(backends) > 1 else head, fmt)
                for m in modes for b in backends for name, head, fmt, _ in COLUMNS[m]]
    first = recs[0] if recs else {"world_size": 2}
    print_table([rows[s] for s in sorted(rows)], columns,
                title=f"p2p: one link between {ranks_on(first)} ({', '.join(backends)}; "
                      f"latency one-way: OSU's average, p50 and p99 of the iterations; bandwidth in windows of "
                      f"{max(r['window'] for r in recs)})", compact=True)   # nccl-tests' look: 2 transports x 3
    #                                                           modes keep within 100 columns
    starved = [r for r in recs if r.get("time_budget_s") and r["iters"] == 1 and r["warmup"] == 1]
    if starved:  # the launches' start-ups took the budget: what was measured is one iteration each, say so
        click.echo(f"note: --time-budget: {len(starved)} of {len(recs)} measurements found their share of the budget "
                   "spent (launch start-ups count against it) and ran 1 iteration; give more seconds", err=True)


def osu_rounds(window, osu, budget=None):
    """The launches' plans with the window set and, where -n/-w were not given, OSU's counts: one launch per size
    class (up to 8 KiB, above) and mode kind (ping-pong, windowed). With a time budget, the small-message counts
    are each launch's most and the size classes share a launch; each launch gets the budget's share of its
    measurements."""
    def reshape(rounds):
        out = []
        for spec, plan in rounds:
            configs = [{**c, "window": window} if c["window"] > 1 else c for c in plan.configs]
            if not osu:
                out.append((spec, dataclasses.replace(plan, configs=configs)))
                continue
            for kind in ("latency", "window"):
                cfgs = [c for c in configs if (c["window"] == 1) == (kind == "latency")]
                classes = [plan.sizes] if budget else [[s for s in plan.sizes if s <= LARGE],
                                                        [s for s in plan.sizes if s > LARGE]]
                for sizes in classes:
                    if cfgs and sizes:
                        iters, warmup = osu_counts("latency" if kind == "latency" else "bw", sizes[0])
                        out.append((spec, dataclasses.replace(plan, configs=cfgs, sizes=sizes, iters=iters,
                                                              warmup=warmup)))
        if budget:
            every = sum(len(p.sizes) * len(p.configs) * p.repeats * p.cycles for _, p in out)
            out = [(s, dataclasses.replace(p, time_budget=budget * len(p.sizes) * len(p.configs) * p.repeats
                                           * p.cycles / every)) for s, p in out]
        return out
    return reshape


@click.command()
@click.option("--mode", "modes", default="latency", show_default=True,
              help="Comma list: latency (osu_latency ping-pong), bw (osu_bw), bibw (osu_bibw).")
@click.option("--backends", default=None, metavar="LIST",
              help="Comma list of transports (gloo,mpi): each one, side by side in one table.")
@click.option("--window", type=click.IntRange(1, 4096), default=WINDOW, show_default=True,
              help="Messages in flight per window of bw and bibw (OSU's -W).")
@click.option("--time-budget", "budget", default=None, metavar="SECONDS",
              help="Fit the whole run in about this long, start-ups included: each measurement calibrates its "
                   "iterations (runs of 1, 2, 4, ... as warm-up) to its share; at most OSU's small-message counts "
                   "(or -n). Without it, OSU's counts.")
@measure_options("1", "4M")
@launch_options
@click.pass_context
def p2p(click_ctx, modes, backends, window, budget, **kw):
    """What one link does: OSU-style point-to-point latency and bandwidth between 2 ranks.

    Ping-pong latency (one-way, us) and windowed uni- and bi-directional bandwidth (MB/s = 1e6 B/s) of
    messages of bytes, on torch.distributed (send/recv) or MPI (mpi4py), as osu_latency, osu_bw and
    osu_bibw measure. Without -n/-w, OSU's counts: up to 8 KiB latency 10000 iterations after 100
    warm-up and bw 100 windows after 10; above, 1000 after 10 and 20 windows after 2; window 64.
    --time-budget fits the iterations to a time instead (a quick look).

    \b
    Example:
      commbench p2p --mode latency,bw,bibw -b 1 -e 4M --backends gloo,mpi
      commbench p2p --time-budget 20
      commbench p2p --mode bw --nodes 2 --nproc-per-node 1 --rdzv-endpoint node0:29500 --node-rank 0
    """
    names = [case_name(m.strip()) for m in modes.split(",") if m.strip()]
    bad = [n for n in names if n[len("p2p_"):] not in MODES]
    if bad or not names:
        raise UserError(f"--mode takes {', '.join(MODES)}, got {modes!r}")
    if kw["nproc_per_node"] is None:  # one link: 2 ranks on one node, else one per node
        kw["nproc_per_node"] = 2 if (kw["nodes"] or 1) == 1 else 1
    refuse_given(["dtype"], "p2p moves bytes (uint8, as OSU's MPI_CHAR)")
    if set(names) == {case_name("latency")}:
        refuse_given(["window"], "goes with --mode bw and bibw (latency is a ping-pong, one message at a time)")
    kw["dtype"] = "uint8"  # bytes, as OSU's MPI_CHAR
    backends = None if backends is None else parse_backends(backends)
    osu = all(click_ctx.get_parameter_source(p) == ParameterSource.DEFAULT for p in ("iters", "warmup"))
    seconds = parse_budget(budget)
    measure(list(dict.fromkeys(names)), parse(kw, backends), p2p_table, "p2p", reshape=osu_rounds(window, osu, seconds))
