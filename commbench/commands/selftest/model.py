"""`commbench selftest model`: check the alpha-beta model against two namespace nodes with shaped links (eth0
between them, lo inside each): ring all_reduce and hierarchical measured against their predictions, then
`commbench model --fit` on the records recovers the configured rate."""
import json
import subprocess
import sys
import time

import click

from benchcore.emulate import netns
from benchcore.errors import UserError
from benchcore.processes import procs
from benchcore.progress import quiet_option
from benchcore.report.render import console, print_table
from benchcore.results import schema
from benchcore.results.records import output_file
from benchcore.results.usable import SECONDS
from benchcore.units import format_size, parse_size, size_range
from commbench.cases.case import TOTAL
from commbench.cases.registry import record_label
from commbench.commands.model import fit
from commbench.commands.selftest.nodes import (JUDGED, PrivateNodes, best_of_cycles, check_ports, cycles_run, launch,
                                               need_namespaces, save)
from commbench.model.topology import from_dict

MODEL_RANGE = (0.90, 1.10)   # measured / predicted busbw, and fitted / configured rate (TCP ceiling included)
MODEL_JUDGED_MIN = 64 << 20  # ring all_reduce judged from this size on (smaller ones are latency-bound)
HIER_JUDGED_MIN = 32 << 20   # hierarchical (4 ranks, 2 cores) judged from here: one CI run put 16M at 0.890, 32M 0.969


def _node_topology(prefix):
    """The topology `commbench topo` detects inside node 0 (what its ranks predicted with)."""
    argv = netns.exec_argv(0, [sys.executable, "-m", "commbench.commands.cli", "topo", "--json"], prefix)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if proc.returncode:
        raise netns.ClusterError(f"commbench topo in node 0: {procs.one_line(proc.stderr)}")
    found = json.loads(proc.stdout)
    return from_dict(found["in_effect"]), found


def _model_row(rec, judged):
    predicted = rec["time_us"] and rec.get("predicted_time_us")
    ratio = rec["predicted_time_us"] / rec["time_us"] if predicted else None  # = measured busbw / predicted busbw
    ok = ratio is not None and MODEL_RANGE[0] <= ratio <= MODEL_RANGE[1]
    return {"kind": record_label(rec), "size": format_size(rec["size_bytes"]), "size_bytes": rec["size_bytes"],
            "busbw_gbps": rec["busbw_gbps"], "predicted_busbw_gbps": rec["busbw_gbps"] / ratio if ratio else None,
            "ratio": ratio, "tier": rec.get("link_tier"), "verdict": ("ok" if ok else "OFF") if judged else "info"}


def judge(records, topo, bits):
    """(best record per case and size, rows, the fitted inter-node row or None, fit errors) of the cycles so far."""
    best = best_of_cycles(records)
    rows = [_model_row(r, (r["collective"] == JUDGED and not r.get("strategy") and r["size_bytes"] >= MODEL_JUDGED_MIN)
                       or (r.get("strategy") == "hierarchical" and r.get("phase") == TOTAL
                           and r["size_bytes"] >= HIER_JUDGED_MIN)) for r in best.values()]
    fitted, fit_row, errors = None, None, []
    ring = [r for r in best.values() if r["collective"] == JUDGED and not r.get("strategy")]
    if ring and topo:
        try:
            tiers, _ = fit(ring, topo)
            fitted = next((t for t in tiers if t["tier"] == "inter-node"), None)
        except UserError as exc:
            errors.append(str(exc))
    if fitted and fitted["gbps"]:
        expect = bits / 8e9 * topo.payload_fraction
        ratio = fitted["gbps"] / expect
        fit_row = {"alpha_us": fitted["alpha_us"], "fitted_gbps": fitted["gbps"], "expected_gbps": expect,
                   "ratio": ratio, "verdict": "ok" if MODEL_RANGE[0] <= ratio <= MODEL_RANGE[1] else "OFF"}
    return best, rows, fit_row, errors


def good(rows, fit_row):
    """Every judged row and the fitted beta within the range."""
    judged = [r for r in rows if r["verdict"] != "info"]
    return bool(judged) and all(r["verdict"] == "ok" for r in judged) and fit_row is not None and \
        fit_row["verdict"] == "ok"


@click.command("model")
@quiet_option
@click.option("--rate", default="1gbit", show_default=True, help="tbf rate of the link between the nodes.")
@click.option("--lo-rate", default="500mbit", show_default=True,
              help="tbf rate of each node's loopback, the intra-node link (one queue both directions share).")
@click.option("-b", "--min-bytes", default="4M", show_default=True, help="Smallest ring all_reduce size (fit).")
@click.option("-e", "--max-bytes", default="256M", show_default=True, help="Largest ring all_reduce size.")
@click.option("-f", "--step-factor", type=int, default=4, show_default=True)
@click.option("--hierarchical-sizes", default="16M,32M", show_default=True,
              help="Payloads of the hierarchical all-reduce on 2 nodes x 2 local ranks.")
@click.option("-n", "--iters", type=int, default=3, show_default=True)
@click.option("-w", "--warmup", type=int, default=1, show_default=True)
@click.option("-N", "--cycles", type=int, default=2, show_default=True,
              help="Measure everything up to this many times, each its own launch, and judge the best (other load "
                   "only slows links down); stops at the first cycle with which the check passes.")
@click.option("--timeout", type=SECONDS, default=120, show_default=True, help="Process-group timeout (s).")
@click.option("--rdzv-timeout", type=SECONDS, default=60, show_default=True)
@click.option("--port", type=int, default=29420, show_default=True,
              help="Rendezvous port on node 0 (cycle c of launch i uses PORT + i + 2c).")
@click.option("--out", default=None, metavar="FILE", help="Append the measurements and a verdict record.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def model_check(rate, lo_rate, hierarchical_sizes, out, fmt, port, **args):
    """Check the alpha-beta model against two tc-shaped network namespaces.

    Needs root. Node links: eth0 shaped to --rate between the nodes, lo shaped to --lo-rate inside each.
    The ranks predict from the topology they detect (commbench topo in each node: the shaped rates,
    TCP payload ceiling included). Passes when ring all_reduce (1 rank per node) at 64 MiB and above
    and the hierarchical all-reduce (2 nodes x 2 local ranks) reach 0.90-1.10 of the predicted busbw,
    and the inter-node beta fitted to the ring sizes is within 0.90-1.10 of the configured rate x the
    TCP payload ceiling. On your own pair of nodes the same check is `commbench ring --nodes 2` between
    them (records carry predicted_time_us and link_utilization from the topology each node detects)
    followed by `commbench model --fit` on its records.

    \b
    Example:
      commbench selftest model
      commbench selftest model --rate 2gbit --lo-rate 1gbit --out model.jsonl
    """
    try:
        bits, lo_bits = netns.parse_rate(rate), netns.parse_rate(lo_rate)
    except netns.ClusterError as exc:
        raise UserError(str(exc)) from None
    ring_sizes, hier = _sizes(args, hierarchical_sizes)
    check_ports(port, 2, args["cycles"])
    need_namespaces("selftest model")
    out_path = output_file(out)
    ring_args, hier_args, deadline = _launch_args(args, ring_sizes, hier, bits, lo_bits)
    t0 = time.monotonic()
    records, errors, topo = _measure(rate, lo_rate, bits, lo_bits, port, ring_args, hier_args, deadline, fmt)
    best, rows, fit_row, fit_errors = judge(records, topo, bits)
    errors += fit_errors
    passed = not errors and good(rows, fit_row) and not any(r.get("wrong") for r in best.values())
    verdict = _verdict(records, rows, fit_row, errors, passed, topo, bits, round(time.monotonic() - t0, 1))
    if save(out_path, records, verdict, fmt):
        _show(records, rows, fit_row, passed, topo, bits, verdict["seconds"], args["cycles"])
    for err in errors:
        click.echo(f"error: {err}", err=True)
    sys.exit(0 if passed else 1)


def _sizes(args, hierarchical_sizes):
    """(ring all_reduce sizes, hierarchical sizes) the options give."""
    ring_sizes = size_range(parse_size(args["min_bytes"], "-b/--min-bytes"),
                            parse_size(args["max_bytes"], "-e/--max-bytes"), args["step_factor"])
    hier = [parse_size(s, "--hierarchical-sizes") for s in hierarchical_sizes.split(",") if s.strip()]
    if not hier or args["cycles"] < 1:
        raise UserError("--hierarchical-sizes needs a size and -N/--cycles at least 1")
    return ring_sizes, hier


def _launch_args(args, ring_sizes, hier, bits, lo_bits):
    """(ring launch's arguments, hierarchical launch's arguments, the deadline of each launch in s: 4 x what its
    bytes take at the shaped rates, every iteration and cycle)."""
    per_round = sum(ring_sizes) * 8 / bits + sum(hier) * 8 * (3 / lo_bits + 1 / bits) * 2
    deadline = args["rdzv_timeout"] + 60 + 4 * per_round * (args["iters"] + args["warmup"] + 1) * args["cycles"]
    common = {k: args[k] for k in ("iters", "warmup", "cycles", "timeout", "rdzv_timeout")}
    ring_args = {**common, "min_bytes": args["min_bytes"], "max_bytes": args["max_bytes"],
                 "step_factor": args["step_factor"]}
    hier_args = {**common, "min_bytes": str(min(hier)), "max_bytes": str(max(hier)),
                 "step_factor": max(2, max(hier) // min(hier)) if len(hier) > 1 else 2,
                 "chunk_size": "2M", "threshold": "16M", "extra": ["--nproc-per-node", "2"]}
    return ring_args, hier_args, deadline


def _measure(rate, lo_rate, bits, lo_bits, port, ring_args, hier_args, deadline, fmt):
    """(records, errors, the topology node 0 detects) of ring all_reduce, then the hierarchical all-reduce, on two
    namespace nodes shaped to the rates (no topology where the nodes did not come up: errors say why)."""
    errors, topo = [], None
    with PrivateNodes("cbsm") as run:
        prefix, tmp = run.prefix, run.path
        took = netns.up(2, rate, prefix, lo_rate=lo_rate)
        topo, _ = _node_topology(prefix)
        if fmt == "table":
            console(stderr=True).print(
                f"selftest model: 2 namespaces, eth0 shaped to {netns.format_rate(bits)}, lo to "
                f"{netns.format_rate(lo_bits)} (up in {took:.2f} s); node 0 detects: intra-node {topo.fabric} "
                f"{topo.intra_gbps:g} GB/s, inter-node {topo.nic_gbps:g} GB/s x {topo.payload_fraction:.4f} payload")
        passes = lambda recs: good(*judge(recs, topo, bits)[1:3])  # noqa: E731
        errors += launch(["all_reduce"], port, ring_args, tmp, prefix, deadline, passes)
        if not errors:
            errors += launch(["hierarchical"], port + 1, hier_args, tmp, prefix, deadline, passes)
    return run.records, errors + run.errors, topo


def _verdict(records, rows, fit_row, errors, passed, topo, bits, seconds):
    """The verdict record: passed, why not, the rows judged and the fitted beta."""
    return schema.event("commbench", "verdict", "; ".join(errors) or None,
                        run_id=records[0]["run_id"] if records else None, check="selftest model", passed=passed,
                        rate_bps=bits, ceiling_fraction=topo.payload_fraction if topo else None,
                        pass_range=list(MODEL_RANGE), seconds=seconds, cycles=cycles_run(records),
                        rows=[{k: r[k] for k in ("kind", "size_bytes", "busbw_gbps", "predicted_busbw_gbps",
                                                  "ratio", "tier", "verdict")} for r in rows] +
                        ([{"kind": "fitted inter-node beta", **fit_row}] if fit_row else []))


def _show(records, rows, fit_row, passed, topo, bits, seconds, cycles):
    """The table of measured against predicted, the fitted beta, and the one-line verdict."""
    print_table(rows, [("kind", "case", None), ("size", "size", None), ("busbw_gbps", "busbw GB/s", ".4f"),
                       ("predicted_busbw_gbps", "predicted GB/s", ".4f"), ("ratio", "measured / predicted", ".3f"),
                       ("tier", "bound by", None), ("verdict", "verdict", None)],
                title=f"measured against the model (best of {cycles_run(records)} of at most {cycles}; "
                      f"pass {MODEL_RANGE[0]:.2f}-{MODEL_RANGE[1]:.2f})")
    if fit_row:
        click.echo(f"fitted inter-node: alpha {fit_row['alpha_us']:.1f} us, 1/beta {fit_row['fitted_gbps']:.4f} "
                   f"GB/s = {fit_row['ratio']:.3f} x the configured {netns.format_rate(bits)} x "
                   f"{topo.payload_fraction:.4f} TCP payload ({fit_row['verdict']})")
    judged = [r for r in rows if r["verdict"] != "info"]
    summary = ", ".join(f"{r['kind']} {r['size']} {r['ratio']:.3f}" for r in judged if r["ratio"])
    click.echo(f"selftest model: {'PASS' if passed else 'FAIL'} (measured / predicted: {summary}) in {seconds:.0f} s")
