"""What every measuring command shares: size/iteration/output options, the plan, the run."""
import os
import sys
import tempfile
from pathlib import Path

import click

from benchcore.errors import UserError
from benchcore.records import new_run_id
from benchcore.report import FORMATS, emit
from benchcore.units import parse_size, size_range
from commbench import launch
from commbench.collectives import COLLECTIVES, DTYPES, OPS, check_size

BLOCKING_HELP = (
    "Wait for each collective before starting the next (nccl-tests -z). Default: on NCCL, "
    "back-to-back launches on one CUDA stream, which the GPU serialises; on Gloo, blocking, "
    "because Gloo runs async operations concurrently on its worker threads and would report "
    "the overlap as bandwidth (measured: 0.65 GB/s async vs 0.29-0.38 GB/s blocking for a 1 MiB "
    "all_reduce on 2 ranks).")


def measure_options(min_bytes="8", max_bytes="256M"):
    """Size, iteration, type and output options shared by the measuring commands."""
    options = [
        click.option("-b", "--min-bytes", default=min_bytes, show_default=True,
                     help="Smallest size (8, 1K, 64M, 1G)."),
        click.option("-e", "--max-bytes", default=max_bytes, show_default=True, help="Largest size."),
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

    def decorate(fn):
        for option in reversed(options):
            fn = option(fn)
        return fn
    return decorate


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
        fd, path = tempfile.mkstemp(prefix="commbench-", suffix=".jsonl")
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
