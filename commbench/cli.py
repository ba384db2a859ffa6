"""The commbench command line."""
import os
import sys
from pathlib import Path

import click

from benchcore.errors import UserError, run_cli
from benchcore.records import new_run_id
from benchcore.report import FORMATS, emit
from benchcore.units import parse_size, size_range
from commbench import launch
from commbench.collectives import COLLECTIVES, DTYPES, OPS, check_size, parse_collectives
from commbench.output import print_collective_tables

BLOCKING_HELP = (
    "Wait for each collective before starting the next (nccl-tests -z). Default: on NCCL, "
    "back-to-back launches on one CUDA stream, which the GPU serialises; on Gloo, blocking, "
    "because Gloo runs async operations concurrently on its worker threads and would report "
    "the overlap as bandwidth (measured: 0.65 GB/s async vs 0.29-0.38 GB/s blocking for a 1 MiB "
    "all_reduce on 2 ranks).")
PLACES = {"both": ["out", "in"], "out": ["out"], "in": ["in"]}


def measure_options(fn):
    """Size, iteration, type and output options shared by the measuring commands."""
    options = [
        click.option("-b", "--min-bytes", default="8", show_default=True, help="Smallest size (8, 1K, 64M, 1G)."),
        click.option("-e", "--max-bytes", default="256M", show_default=True, help="Largest size."),
        click.option("-f", "--step-factor", type=int, default=2, show_default=True, help="Size multiplier."),
        click.option("-n", "--iters", type=int, default=20, show_default=True, help="Timed iterations."),
        click.option("-w", "--warmup", type=int, default=5, show_default=True, help="Warm-up iterations."),
        click.option("--dtype", default="float32", show_default=True, help="/".join(DTYPES)),
        click.option("--op", default="sum", show_default=True, help="/".join(OPS) + " (reductions)."),
        click.option("--check/--no-check", default=True, show_default=True,
                     help="Check every element of the result against the exact expected value."),
        click.option("--agg", type=click.Choice(["avg", "min", "max"]), default="avg", show_default=True,
                     help="How per-rank times combine (nccl-tests -a); min and max are always kept."),
        click.option("--blocking/--no-blocking", default=None, help=BLOCKING_HELP),
        click.option("--out", type=click.Path(dir_okay=False), default=None,
                     help="Append records to this JSONL file (never overwritten)."),
        click.option("--format", "fmt", type=click.Choice(FORMATS), default="table", show_default=True,
                     help="What goes to stdout."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def base_plan(kw, spec):
    """Validated plan fields common to every measuring command (pops them from kw)."""
    dtype, op = kw.pop("dtype"), kw.pop("op")
    if dtype not in DTYPES:
        raise UserError(f"unknown dtype {dtype!r}; known: {', '.join(DTYPES)}")
    if op not in OPS:
        raise UserError(f"unknown op {op!r}; known: {', '.join(OPS)}")
    iters, warmup = kw.pop("iters"), kw.pop("warmup")
    if iters < 1 or warmup < 0:
        raise UserError("-n/--iters must be at least 1 and -w/--warmup at least 0")
    sizes = size_range(parse_size(kw.pop("min_bytes"), "-b/--min-bytes"),
                       parse_size(kw.pop("max_bytes"), "-e/--max-bytes"), kw.pop("step_factor"))
    return {"run_id": new_run_id(), "sizes": sizes, "dtype": dtype, "op": op, "iters": iters,
            "warmup": warmup, "check": kw.pop("check"), "agg": kw.pop("agg"), "blocking": kw.pop("blocking"),
            "backend": spec.backend, "timeout": spec.timeout, "launcher": spec.launcher, "topology": None}


def output_path(out):
    """The records file: the user's (appended, checked writable now) or a private temporary one."""
    if out is None:
        fd, path = __import__("tempfile").mkstemp(prefix="commbench-", suffix=".jsonl")
        os.close(fd)
        return path, True
    path = Path(out)
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise UserError(f"--out {out} is a directory")
    if not parent.is_dir():
        raise UserError(f"--out {out}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"--out {out} is not writable")
    return str(path), False


def run_measurement(spec, plan, expected, fmt, table_fn, out, label="measuring"):
    """Launch, render, and exit non-zero on failure or wrong results."""
    plan["out"], temporary = output_path(out) if not spec.dry_run else (out or "results.jsonl", False)
    try:
        result = launch.execute(spec, plan, expected, label)
        if spec.dry_run:
            return
        if result.records:
            emit(result.records, fmt, table_fn)
    finally:
        if temporary:
            os.unlink(plan["out"])
    wrong = sum(r.get("wrong") or 0 for r in result.records)
    if wrong:
        click.echo(f"error: {wrong} wrong elements: the collective returned incorrect data", err=True)
        sys.exit(1)
    if result.returncode:
        for reason in result.errors:
            click.echo(f"error: {reason}", err=True)
        sys.exit(result.returncode if result.returncode > 0 else 1)
    if len(result.records) < expected and spec.launcher != "torchrun":
        click.echo(f"error: only {len(result.records)} of {expected} measurements were recorded", err=True)
        sys.exit(1)


def collective_plan(kw, spec, collectives, places):
    plan = base_plan(kw, spec)
    for name in collectives:
        for size in plan["sizes"]:
            check_size(name, size, plan["dtype"], spec.world_size)
    plan.update(collectives=collectives, places=places)
    expected = len(plan["sizes"]) * sum(
        len([p for p in COLLECTIVES[c].placements if p in places]) for c in collectives)
    return plan, expected


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 110})
def cli():
    """Collective-communication benchmarks: nccl-tests-grade numbers through torchrun.

    \b
    Example:
      commbench ring --nodes 2 -b 1K -e 64M
      commbench run --collective all_reduce,all_gather -b 8 -e 256M -f 2 --out results.jsonl
    """


@cli.command()
@click.option("-c", "--collective", "collectives", default="all_reduce", show_default=True,
              help="Comma list: " + ",".join(COLLECTIVES))
@click.option("--place", type=click.Choice(list(PLACES)), default="both", show_default=True,
              help="Out-of-place, in-place or both, where torch.distributed offers the variant.")
@measure_options
@launch.launch_options
def run(collectives, place, fmt, out, **kw):
    """Measure collectives over a size sweep (nccl-tests style).

    \b
    Example:
      commbench run --collective all_reduce,all_gather -b 8 -e 256M -f 2 -n 20 -w 5 --out results.jsonl
    """
    spec = launch.spec_from_options(kw)
    plan, expected = collective_plan(kw, spec, parse_collectives(collectives), PLACES[place])
    run_measurement(spec, plan, expected, fmt, print_collective_tables, out)


@cli.command()
@measure_options
@launch.launch_options
def ring(fmt, out, **kw):
    """Ring-AllReduce across nodes (all_reduce; NCCL_ALGO=Ring on NCCL).

    Without Slurm or --rdzv-endpoint, the nodes are emulated on this machine:
    N torchrun agents joined by a real c10d rendezvous on 127.0.0.1.

    \b
    Example:
      commbench ring --nodes 2 -b 1K -e 256M
      commbench ring --nodes 2 --rdzv-endpoint node0:29500 --node-rank 0   # on node0, then node-rank 1 on node1
    """
    spec = launch.spec_from_options(kw)
    algo = os.environ.get("NCCL_ALGO")
    if algo and algo.lower() != "ring":
        raise UserError(f"commbench ring runs NCCL_ALGO=Ring, but NCCL_ALGO={algo} is set; "
                        "unset it or use commbench run")
    plan, expected = collective_plan(kw, spec, ["all_reduce"], ["in"])
    plan["strategy"] = "ring"
    run_measurement(spec, plan, expected, fmt, print_collective_tables, out, "ring all_reduce")


def main():
    run_cli(cli)


if __name__ == "__main__":
    main()
