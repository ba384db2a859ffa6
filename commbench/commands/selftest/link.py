"""`commbench selftest link`: check the tool's busbw against a link of known rate.

Two network namespaces joined by a veth pair shaped with tc tbf (benchcore/emulate/netns.py, the code
behind scripts/netns-cluster) are two real nodes: one torchrun agent in each, a real c10d
rendezvous across the link. On 2 ranks all_reduce moves the payload once each way at the same
time (busbw factor 1), so a faithful tool measures the link itself: TCP payload at MTU 1500 tops
out at 1448/1514 of the configured rate. Passing means ring all_reduce lands within
[0.90, 1.00] of that ceiling at every size, judged on the best of --cycles passes, each its own launch
(other load on the machine only ever slows a link down, and a launch can stay slow for its whole life).
"""
import sys
import time

import click

from benchcore.emulate import netns
from benchcore.errors import UserError, refuse_given
from benchcore.progress import quiet_option
from benchcore.report.render import console, print_table
from benchcore.results import schema
from benchcore.results.records import output_file
from benchcore.results.usable import SECONDS
from benchcore.units import format_size, parse_size, size_range
from commbench.cases.case import TOTAL
from commbench.cases.registry import CASES, case_of, record_label
from commbench.commands.selftest.nodes import (JUDGED, PrivateNodes, best_of_cycles, check_ports, cycles_run, launch,
                                               need_namespaces, save)

CEILING = 1448 / 1514      # TCP payload per Ethernet frame at MTU 1500 (timestamps on), as tbf counts it
PASS_RANGE = (0.90, 1.00)  # of the ceiling
KINDS = tuple(CASES)


def row(rec, bits):
    kind, label = case_of(rec).name, record_label(rec)
    link_gbps = rec["busbw_gbps"] * 8  # GB/s (1e9 B/s) -> Gbit/s
    of_rate = link_gbps * 1e9 / bits
    of_ceiling = of_rate / CEILING
    verdict = ("ok" if PASS_RANGE[0] <= of_ceiling <= PASS_RANGE[1] else "LOW" if of_ceiling < PASS_RANGE[0]
               else "HIGH") if kind == JUDGED else "info"
    return {"kind": label, "size": format_size(rec["size_bytes"]), "size_bytes": rec["size_bytes"],
            "busbw_gbps": rec["busbw_gbps"], "gbit": link_gbps, "of_rate": of_rate, "of_ceiling": of_ceiling,
            "verdict": verdict, "wrong": rec.get("wrong")}


def judge(records, bits, kinds):
    """(rows of the best cycle per collective and size, whether they pass)."""
    rows = [row(r, bits) for r in best_of_cycles([r for r in records if r.get("phase") in (None, TOTAL)]).values()]
    judged = [r for r in rows if r["verdict"] != "info"]
    return rows, (bool(rows) and (bool(judged) or JUDGED not in kinds)
                  and all(r["verdict"] in ("ok", "info") for r in rows) and not any(r["wrong"] for r in rows))


@click.command("link")
@quiet_option
@click.option("--rate", default="1gbit", show_default=True, help="tbf rate of the link (500mbit, 1gbit, 2gbit).")
@click.option("--collective", "collectives", default="all_reduce", show_default=True,
              help="Comma list of " + ", ".join(KINDS) + "; only all_reduce is judged, the rest is reported.")
@click.option("-b", "--min-bytes", default="64M", show_default=True)
@click.option("-e", "--max-bytes", default="256M", show_default=True)
@click.option("-f", "--step-factor", type=int, default=4, show_default=True)
@click.option("-n", "--iters", type=int, default=3, show_default=True)
@click.option("-w", "--warmup", type=int, default=1, show_default=True)
@click.option("-N", "--cycles", type=int, default=2, show_default=True,
              help="Measure every size up to this many times, each its own launch, and judge the best: other load "
                   "on the machine only ever slows a link down, so the best pass is the link's own rate; stops at "
                   "the first cycle with which the check passes.")
@click.option("--chunk-size", default="2M", show_default=True, help="Chunk size of the chunked strategy.")
@click.option("--threshold", default="16M", show_default=True, help="Chunked strategy threshold.")
@click.option("--timeout", type=SECONDS, default=120, show_default=True, help="Process-group timeout (s).")
@click.option("--rdzv-timeout", type=SECONDS, default=60, show_default=True)
@click.option("--port", type=int, default=29400, show_default=True,
              help="Rendezvous port on node 0 (cycle c of launch i uses PORT + i + 2c).")
@click.option("--out", default=None, metavar="FILE",
              help="Append the measurements and a verdict record to this JSONL file.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def link(rate, collectives, out, fmt, port, **args):
    """Measure busbw across two tc-shaped network namespaces and compare it with the link rate.

    Needs root (ip netns, tc). The namespaces are private to this run and always removed.
    Passes (exit 0) when ring all_reduce reaches 0.90-1.00 of the TCP payload ceiling
    (1448/1514 of --rate) at every size; exit 1 otherwise. On a real cluster, the same
    check is `commbench ring --nodes 2` between two nodes whose NIC rate you know.

    \b
    Example:
      commbench selftest link --rate 1gbit
      commbench selftest link --rate 500mbit --collective all_reduce,all_gather,chunked --out link.jsonl
    """
    try:
        bits = netns.parse_rate(rate)
    except netns.ClusterError as exc:
        raise UserError(str(exc)) from None
    kinds = [k.strip() for k in collectives.split(",") if k.strip()]
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise UserError(f"unknown collective {bad[0] if bad else collectives!r}; known: {', '.join(KINDS)}")
    if "chunked" not in kinds:
        refuse_given(["chunk_size", "threshold"], "goes with chunked in --collective (the one strategy that reads it)")
    sizes = size_range(parse_size(args["min_bytes"], "-b/--min-bytes"), parse_size(args["max_bytes"], "-e/--max-bytes"),
                       args["step_factor"])
    need_namespaces("selftest link")
    by_kind = [[k for k in kinds if CASES[k].kind == kind] for kind in ("collective", "strategy")]
    launches = [group for group in by_kind if group]
    per_op = sum(sizes) * 8 / (bits * 0.5)  # all_gather runs at about half the link
    if args["cycles"] < 1:
        raise UserError("-N/--cycles must be at least 1")
    check_ports(port, len(launches), args["cycles"])
    deadline = args["rdzv_timeout"] + 60 + 3 * per_op * (args["iters"] + args["warmup"] + 1) * len(kinds) * \
        args["cycles"]
    out_path = output_file(out)
    errors, t0 = [], time.monotonic()
    with PrivateNodes("cbst") as run:
        prefix, tmp = run.prefix, run.path
        took = netns.up(2, rate, prefix)
        if fmt == "table":
            console(stderr=True).print(f"selftest link: 2 namespaces, veth shaped to {netns.format_rate(bits)} "
                                       f"(up in {took:.2f} s); measuring {', '.join(kinds)} at "
                                       f"{', '.join(format_size(s) for s in sizes)}")
        for i, group in enumerate(launches):
            errors += launch(group, port + i, args, tmp, prefix, deadline, lambda recs: judge(recs, bits, kinds)[1])
            if errors:
                break
    errors += run.errors
    records = run.records
    rows, ok = judge(records, bits, kinds)
    judged = [r for r in rows if r["verdict"] != "info"]
    passed = not errors and ok
    verdict = schema.event("commbench", "verdict", "; ".join(errors) or None,
                           run_id=records[0]["run_id"] if records else None, check="selftest link", passed=passed,
                           rate_bps=bits, ceiling_fraction=CEILING, pass_range=list(PASS_RANGE),
                           seconds=round(time.monotonic() - t0, 1), cycles=cycles_run(records),
                           rows=[{k: r[k] for k in ("kind", "size_bytes", "busbw_gbps", "of_rate", "of_ceiling",
                                                     "verdict")} for r in rows])
    if save(out_path, records, verdict, fmt):
        print_table(rows, [("kind", "collective", None), ("size", "size", None), ("busbw_gbps", "busbw GB/s", ".4f"),
                           ("gbit", "busbw Gbit/s", ".3f"), ("of_rate", "/ rate", ".3f"),
                           ("of_ceiling", "/ TCP ceiling", ".3f"), ("verdict", "verdict", None)],
                    title=f"busbw against a {netns.format_rate(bits)} link, best of {cycles_run(records)} of at most "
                          f"{args['cycles']} (TCP payload ceiling {CEILING:.3f} of the rate; pass "
                          f"{PASS_RANGE[0]:.2f}-{PASS_RANGE[1]:.2f} of it)")
        summary = ", ".join(f"{r['size']} {r['of_ceiling']:.3f}" for r in judged)
        click.echo(f"selftest link: {'PASS' if passed else 'FAIL'}"
                   f"{f' (all_reduce / ceiling: {summary})' if judged else ''} in {verdict['seconds']:.0f} s")
    for err in errors:
        click.echo(f"error: {err}", err=True)
    sys.exit(0 if passed else 1)
