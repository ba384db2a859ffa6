"""`commbench selftest overlap`: check the overlap patterns and their schedule where the answer is physical.

Across two network-namespace nodes joined by a tc-shaped link, with one rank per node, the link is the
bottleneck. It does not leave the cores idle, though: both nodes share this machine's two cores, and the
communication's kernel TCP, Gloo copies and sums compete with the GEMMs. At 1 Gbit/s that competition decides
(measured 2026-12-05, 16M, four runs: pipelined efficiency 0.49-0.67 with its kernels 1.17-1.75x slower beside the
communication, ddp 0.78-0.84), so the default link is 500 Mbit/s, where the same bytes take twice the time and the
communication half the CPU share (pipelined 0.91-1.00, ddp 0.85-0.89 in three runs); --rate 1gbit checks a
machine with more cores. Compute is about half the communication (--compute-ratio 0.5), so that the link is the
one critical resource, as it is where overlap pays. ddp and pipelined (16 steps, pipelined with 2 gathers in
flight) must measure their overlapped time within 0.85-1.15 of the schedule replayed with each step's
communication alone and kernel alone (the model's fill + max + drain, fed with this run's own phases; the link
model's overlapped time is printed beside it, not judged: `selftest model` checks the link model) and an overlap
efficiency of at least 0.8 (16 steps leave one step of fill or drain: the schedule's own efficiency is 0.94); in
the same records the negative control, the kernels and then the communication as communication alone issues it,
must show an efficiency below 0.2. The link's tbf bucket is 128 KiB (2 ms at 500 Mbit/s; when the control waited
each step's communication after its kernel, the bucket refilled during every kernel and each step started with a
bucket's worth at veth speed: 256 KiB at 1 Gbit/s put that control at 0.29-0.47 at 16-32M; a smaller bucket costs so
many timer wake-ups that the GEMMs ran 1.5-2x slower). Each cycle
is its own launch, up to -N 3 (the first with which the check passes ends them: at 16M the efficiency of one
cycle ranged 0.74-1.00); per pattern, a cycle that passes is shown and judged (the shortest overlapped time among
those), else the cycle with the shortest overlapped time.
"""
import sys
import time

import click

from benchcore.emulate import netns
from benchcore.errors import UserError
from benchcore.progress import quiet_option
from benchcore.report.render import console, print_table
from benchcore.results import schema
from benchcore.results.records import output_file
from benchcore.units import format_size, parse_size, size_range
from commbench.cases.case import TOTAL
from commbench.cases.overlap_model import simulate
from commbench.cases.overlap_schedule import AHEAD
from commbench.cases.registry import record_label
from commbench.commands.selftest.nodes import PrivateNodes, check_ports, cycles_run, launch, need_namespaces, save

PATTERNS = ["ddp", "pipelined"]
STEPS = 16
RATIO = 0.5                   # compute alone / communication alone
INFLIGHT = 2                  # pipelined's gathers in flight (1 leaves the link idle between chunks)
BURST = 128 * 1024            # tbf bucket (2 ms at 500 Mbit/s); see the module docstring
MODEL_RANGE = (0.85, 1.15)    # measured / replayed overlapped time
MIN_EFFICIENCY = 0.8          # the patterns' overlap efficiency
CONTROL_MAX = 0.2             # the sequential run's (nothing overlaps)


def _best(records):
    """Per pattern config and size, the total record of the best cycle: the shortest overlapped time among the
    cycles that pass, else among all. (The shortest alone is biased: it is often the cycle whose communication
    alone ran slow, so that its overlapped time fell more than the noise under that floor and its efficiency is
    n/a, while another cycle passed: seen in CI, pipelined 6.6 % under.)"""
    best = {}
    for rec in records:
        if not rec.get("event") and rec.get("phase") == TOTAL and rec.get("overlapped_us") is not None:
            key, rank = (record_label(rec), rec["size_bytes"]), (_row(rec)["verdict"] != "ok", rec["overlapped_us"])
            if key not in best or rank < best[key][0]:
                best[key] = (rank, rec)
    return {key: rec for key, (_, rec) in best.items()}


def replayed(rec):
    """The pattern's schedule replayed with its own communication alone and kernel alone, per step."""
    steps = rec["steps"]
    return simulate(AHEAD[rec["pattern"]], [rec["comm_us"] / steps] * steps, [rec["compute_us"] / steps] * steps,
                    rec.get("inflight") or steps)


def _row(rec):
    pred = replayed(rec)
    ratio = rec["overlapped_us"] / pred
    ok = (MODEL_RANGE[0] <= ratio <= MODEL_RANGE[1]
          and (rec["overlap_efficiency"] or 0) >= MIN_EFFICIENCY and rec["sequential_efficiency"] < CONTROL_MAX
          and rec["wrong"] == 0)
    return {"kind": rec["pattern"], "size": format_size(rec["size_bytes"]), "size_bytes": rec["size_bytes"],
            "comm_us": rec["comm_us"], "compute_us": rec["compute_us"], "overlapped_us": rec["overlapped_us"],
            "replayed_us": pred, "ratio": ratio,
            "link_model_us": rec.get("predicted_overlapped_us"), "efficiency": rec["overlap_efficiency"],
            "model_efficiency": rec.get("predicted_overlap_efficiency"),
            "control_efficiency": rec["sequential_efficiency"], "compute_slowdown": rec.get("compute_slowdown"),
            "verdict": "ok" if ok else "OFF"}


def judge(records, sizes):
    """(rows of the best cycle per pattern and size, whether every pattern at every size is ok)."""
    rows = [_row(r) for r in _best(records).values()]
    return rows, len(rows) == len(PATTERNS) * len(sizes) and all(r["verdict"] == "ok" for r in rows)


@click.command("overlap")
@quiet_option
@click.option("--rate", default="500mbit", show_default=True,
              help="tbf rate of the link between the nodes (1gbit on a machine with more than 2 cores).")
@click.option("-b", "--min-bytes", default="16M", show_default=True)
@click.option("-e", "--max-bytes", default="32M", show_default=True)
@click.option("-f", "--step-factor", type=int, default=2, show_default=True)
@click.option("-n", "--iters", type=int, default=6, show_default=True)
@click.option("-w", "--warmup", type=int, default=1, show_default=True)
@click.option("-N", "--cycles", type=int, default=3, show_default=True,
              help="Measure everything up to this many times, each its own launch, and judge the best; stops at "
                   "the first cycle with which the check passes.")
@click.option("--timeout", type=float, default=120, show_default=True, help="Process-group timeout (s).")
@click.option("--rdzv-timeout", type=float, default=60, show_default=True)
@click.option("--port", type=int, default=29440, show_default=True,
              help="Rendezvous port on node 0 (cycle c uses PORT + 2c).")
@click.option("--out", default=None, metavar="FILE", help="Append the measurements and a verdict record.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def overlap_check(rate, out, fmt, port, **args):
    """Check overlap (ddp, pipelined) and its schedule across two tc-shaped network namespaces.

    Needs root. Compute is half the communication, the link 500 Mbit/s: both nodes share this machine's cores,
    and at 1 Gbit/s the communication's CPU share slows the GEMMs beside it (the module's docstring). Passes when,
    at every size, both patterns' overlapped time is within 0.85-1.15 of their schedule replayed with their own
    phases alone and their overlap efficiency is at least 0.8, while the sequential control stays below 0.2. On
    unshaped loopback (commbench overlap on one machine) Gloo's copies and the GEMMs share the cores:
    efficiency is reported there, not judged.

    \b
    Example:
      commbench selftest overlap
      commbench selftest overlap --rate 1gbit -b 32M -e 64M --out overlap.jsonl
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
                "extra": ["--compute-ratio", str(RATIO), "--buckets", str(STEPS), "--chunk-size", str(chunk),
                          "--inflight", str(INFLIGHT)]}
    per_round = sum(sizes) * 8 / bits * 6 * len(PATTERNS)   # four timings, sequential and calibration included
    deadline = args["rdzv_timeout"] + 60 + 3 * per_round * (args["iters"] + args["warmup"] + 2) * args["cycles"]
    errors, t0 = [], time.monotonic()
    with PrivateNodes("cbso") as run:
        took = netns.up(2, rate, run.prefix, burst=BURST)
        if fmt == "table":
            console(stderr=True).print(f"selftest overlap: 2 namespaces, eth0 shaped to {netns.format_rate(bits)} "
                                       f"(up in {took:.2f} s); ddp and pipelined, {STEPS} steps, compute ratio {RATIO}")
        errors += launch(PATTERNS, port, run_args, run.path, run.prefix, deadline,
                         passes=lambda recs: judge(recs, sizes)[1])
    errors += run.errors
    records = run.records
    rows, ok = judge(records, sizes)
    passed = not errors and ok
    verdict = schema.event("commbench", "verdict", "; ".join(errors) or None,
                           run_id=records[0]["run_id"] if records else None, check="selftest overlap", passed=passed,
                           rate_bps=bits, pass_range=list(MODEL_RANGE), seconds=round(time.monotonic() - t0, 1),
                           cycles=cycles_run(records),
                           rows=[{k: v for k, v in r.items() if k != "size"} for r in rows])
    if save(out_path, records, verdict, fmt):
        # compact, times in ms, two-line headers said in full below: within 100 columns in a pipe (was 134)
        times = ("comm_us", "compute_us", "overlapped_us", "replayed_us", "link_model_us")
        shown = [{**r, **{k: r[k] / 1e3 for k in times if r.get(k) is not None}} for r in rows]
        print_table(shown, [("kind", "\npattern", None), ("size", "\nsize", None), ("comm_us", "comm\nms", ".1f"),
                            ("compute_us", "kernel\nms", ".1f"), ("overlapped_us", "overlap\nms", ".1f"),
                            ("replayed_us", "replay\nms", ".1f"), ("ratio", "\nratio", ".3f"),
                            ("link_model_us", "model\nms", ".1f"),
                            ("efficiency", "\neff.", ".3f"), ("model_efficiency", "model\neff.", ".3f"),
                            ("control_efficiency", "seq.\neff.", ".3f"), ("compute_slowdown", "kernel\nx", ".3f"),
                            ("verdict", "\nverdict", None)],
                    title=f"overlap across a {netns.format_rate(bits)} link (best of {cycles_run(records)} of at "
                          f"most {args['cycles']}; pass: "
                          f"{MODEL_RANGE[0]:.2f}-{MODEL_RANGE[1]:.2f} of the replayed schedule, "
                          f"efficiency >= {MIN_EFFICIENCY}, "
                          f"control < {CONTROL_MAX})", compact=True)
        console().print("comm, kernel: the communication and the compute each alone; overlap: the two overlapped; "
                        "replay: the schedule replayed with each step's communication alone and kernel alone; ratio: "
                        "overlap / replay; model: the link model's overlapped time and efficiency (not judged); eff.: "
                        "overlap efficiency; seq. eff.: the sequential control's; kernel x: a kernel's time inside "
                        "the overlapped run over alone")
        click.echo(f"selftest overlap: {'PASS' if passed else 'FAIL'} in {verdict['seconds']:.0f} s")
    for err in errors:
        click.echo(f"error: {err}", err=True)
    sys.exit(0 if passed else 1)
