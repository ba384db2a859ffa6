"""`commbench selftest overlap`: check the overlap patterns and their model where the answer is physical.

Across two network-namespace nodes joined by a tc-shaped 1 Gbit/s link, with one rank per node, the
communication is bound by the link and leaves the cores mostly idle (kernel TCP does the copying), so a GEMM
beside it must be nearly fully hidden: ddp and pipelined with 8 steps and compute about equal to the
communication (--compute-ratio 1) must measure their overlapped time within 0.85-1.15 of the model (the
schedule replayed with the link's predicted time per step and the kernel's measured time alone) and an
overlap efficiency of at least 0.8 (8 steps leave one step of fill or drain: the model's own efficiency is
0.875); in the same records the negative control, each step's kernel and communication in turn, must show an
efficiency below 0.2. Each cycle is its own launch; the best overlapped time of the cycles is judged.
"""
import sys
import time

import click

from benchcore import schema
from benchcore.errors import UserError
from benchcore.records import output_file
from benchcore.report import console, print_table
from benchcore.units import format_size, parse_size, size_range
from commbench.cases.case import TOTAL
from commbench.cases.registry import record_label
from commbench.commands.selftest.nodes import PrivateNodes, check_ports, launch, need_namespaces, save
from commbench.launch import netns

PATTERNS = ["ddp", "pipelined"]
STEPS = 8
MODEL_RANGE = (0.85, 1.15)    # measured / predicted overlapped time
MIN_EFFICIENCY = 0.8          # the patterns' overlap efficiency
CONTROL_MAX = 0.2             # the sequential run's (nothing overlaps)


def _best(records):
    """Per pattern config and size, the total record of the cycle with the shortest overlapped time."""
    best = {}
    for rec in records:
        if not rec.get("event") and rec.get("phase") == TOTAL and rec.get("overlapped_us") is not None:
            key = (record_label(rec), rec["size_bytes"])
            if key not in best or rec["overlapped_us"] < best[key]["overlapped_us"]:
                best[key] = rec
    return best


def _row(rec):
    pred = rec.get("predicted_overlapped_us")
    ratio = rec["overlapped_us"] / pred if pred else None
    ok = (ratio is not None and MODEL_RANGE[0] <= ratio <= MODEL_RANGE[1]
          and rec["overlap_efficiency"] >= MIN_EFFICIENCY and rec["sequential_efficiency"] < CONTROL_MAX
          and rec["wrong"] == 0)
    return {"kind": rec["pattern"], "size": format_size(rec["size_bytes"]), "size_bytes": rec["size_bytes"],
            "comm_us": rec["comm_us"], "compute_us": rec["compute_us"], "overlapped_us": rec["overlapped_us"],
            "predicted_us": pred, "ratio": ratio, "efficiency": rec["overlap_efficiency"],
            "model_efficiency": rec.get("predicted_overlap_efficiency"),
            "control_efficiency": rec["sequential_efficiency"], "compute_slowdown": rec.get("compute_slowdown"),
            "verdict": "ok" if ok else "OFF"}


@click.command("overlap")
@click.option("--rate", default="1gbit", show_default=True, help="tbf rate of the link between the nodes.")
@click.option("-b", "--min-bytes", default="16M", show_default=True)
@click.option("-e", "--max-bytes", default="32M", show_default=True)
@click.option("-f", "--step-factor", type=int, default=2, show_default=True)
@click.option("-n", "--iters", type=int, default=3, show_default=True)
@click.option("-w", "--warmup", type=int, default=1, show_default=True)
@click.option("-N", "--cycles", type=int, default=2, show_default=True,
              help="Measure everything this many times, each its own launch, and judge the best.")
@click.option("--timeout", type=float, default=120, show_default=True, help="Process-group timeout (s).")
@click.option("--rdzv-timeout", type=float, default=60, show_default=True)
@click.option("--port", type=int, default=29440, show_default=True,
              help="Rendezvous port on node 0 (cycle c uses PORT + 2c).")
@click.option("--out", default=None, metavar="FILE", help="Append the measurements and a verdict record.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def overlap_check(rate, out, fmt, port, **args):
    """Check overlap (ddp, pipelined) and its model across two tc-shaped network namespaces.

    Needs root. Passes when, at every size, both patterns' overlapped time is within 0.85-1.15 of the model and
    their overlap efficiency is at least 0.8, while the sequential control stays below 0.2. On unshaped
    loopback (commbench overlap on one machine) Gloo's copies and the GEMMs share the cores: efficiency is
    reported there, not judged.

    \b
    Example:
      commbench selftest overlap
      commbench selftest overlap --rate 2gbit -b 32M -e 64M --out overlap.jsonl
    """
    try:
        bits = netns.parse_rate(rate)
    except netns.ClusterError as exc:
        raise UserError(str(exc)) from None
    sizes = size_range(parse_size(args["min_bytes"], "-b/--min-bytes"), parse_size(args["max_bytes"], "-e/--max-bytes"),
                       args["step_factor"])
    if args["cycles"] < 1:
        raise UserError("-N/--cycles must be at least 1")
    check_ports(port, 1, args["cycles"])
    need_namespaces("selftest overlap")
    out_path = output_file(out)
    chunk = max(4, min(sizes) // STEPS)
    run_args = {**{k: args[k] for k in ("iters", "warmup", "cycles", "timeout", "rdzv_timeout", "step_factor")},
                "min_bytes": args["min_bytes"], "max_bytes": args["max_bytes"],
                "extra": ["--compute-ratio", "1", "--buckets", str(STEPS), "--chunk-size", str(chunk)]}
    per_round = sum(sizes) * 8 / bits * 6 * len(PATTERNS)   # four timings, sequential and calibration included
    deadline = args["rdzv_timeout"] + 60 + 3 * per_round * (args["iters"] + args["warmup"] + 2) * args["cycles"]
    errors, t0 = [], time.monotonic()
    with PrivateNodes("cbso") as run:
        took = netns.up(2, rate, run.prefix)
        if fmt == "table":
            console(stderr=True).print(f"selftest overlap: 2 namespaces, eth0 shaped to {netns.format_rate(bits)} "
                                       f"(up in {took:.2f} s); ddp and pipelined, {STEPS} steps, compute ratio 1")
        errors += launch(PATTERNS, port, run_args, run.path, run.prefix, deadline)
    errors += run.errors
    records = run.records
    rows = [_row(r) for r in _best(records).values()]
    passed = not errors and len(rows) == len(PATTERNS) * len(sizes) and all(r["verdict"] == "ok" for r in rows)
    verdict = schema.event("commbench", "verdict", "; ".join(errors) or None,
                           run_id=records[0]["run_id"] if records else None, check="selftest overlap", passed=passed,
                           rate_bps=bits, pass_range=list(MODEL_RANGE), seconds=round(time.monotonic() - t0, 1),
                           rows=[{k: v for k, v in r.items() if k != "size"} for r in rows])
    if save(out_path, records, verdict, fmt):
        print_table(rows, [("kind", "pattern", None), ("size", "size", None), ("comm_us", "comm us", ".0f"),
                           ("compute_us", "compute us", ".0f"), ("overlapped_us", "overlapped us", ".0f"),
                           ("predicted_us", "model us", ".0f"), ("ratio", "measured / model", ".3f"),
                           ("efficiency", "efficiency", ".3f"), ("model_efficiency", "model eff.", ".3f"),
                           ("control_efficiency", "control eff.", ".3f"), ("compute_slowdown", "compute x", ".3f"),
                           ("verdict", "verdict", None)],
                    title=f"overlap across a {netns.format_rate(bits)} link (best of {args['cycles']}; pass: "
                          f"{MODEL_RANGE[0]:.2f}-{MODEL_RANGE[1]:.2f} of the model, efficiency >= {MIN_EFFICIENCY}, "
                          f"control < {CONTROL_MAX})")
        click.echo(f"selftest overlap: {'PASS' if passed else 'FAIL'} in {verdict['seconds']:.0f} s")
    for err in errors:
        click.echo(f"error: {err}", err=True)
    sys.exit(0 if passed else 1)
