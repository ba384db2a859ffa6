"""`commbench sweep` and `commbench env`: environment matrices, one launch per config."""
import dataclasses
import hashlib
import itertools
import json
import os
import sys
import time

import click
import yaml
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from benchcore import schema
from benchcore.errors import UserError
from benchcore.records import RecordWriter, new_run_id, output_file, read_records
from benchcore.report import console, line_plot, print_table
from commbench import launch
from commbench.case import TOTAL
from commbench.envvars import CATALOGUE, validate
from commbench.output import render
from commbench.plan import CaseOptionsText, MeasureOptions, build_plan, case_options, measure_options, no_leftovers, take
from commbench.registry import COLLECTIVE_NAMES, STRATEGY_NAMES, parse_names, record_label
from commbench.runner import launches

BUCKETS = [("small", 0, 1 << 20), ("medium", 1 << 20, 64 << 20), ("large", 64 << 20, float("inf"))]
BASELINE = "baseline"
DEFAULT_OUT = "commbench-sweep.jsonl"


def parse_env_option(text):
    """'NCCL_ALGO=Ring,Tree' -> ('NCCL_ALGO', ['Ring', 'Tree'])."""
    name, sep, values = text.partition("=")
    values = [v.strip() for v in values.split(",") if v.strip()]
    if not sep or not name.strip() or not values:
        raise UserError(f"--env {text!r} is not NAME=VALUE[,VALUE...]")
    return name.strip(), values


def load_matrix(path):
    """YAML: env (name -> list, crossed), configs (explicit dicts), exclude (partial dicts), baseline (bool)."""
    try:
        with open(path, encoding="utf-8") as f:
            data = yaml.safe_load(f) or {}
    except OSError as exc:
        raise UserError(f"--matrix {path}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise UserError(f"--matrix {path} is not valid YAML: {str(exc).splitlines()[0]}") from None
    if not isinstance(data, dict) or set(data) - {"env", "configs", "exclude", "baseline"}:
        raise UserError(f"--matrix {path}: expected keys env, configs, exclude, baseline")
    env = {k: [str(v) for v in (vals if isinstance(vals, list) else [vals])] for k, vals in (data.get("env") or {}).items()}
    configs = [{k: str(v) for k, v in c.items()} for c in data.get("configs") or []]
    exclude = [{k: str(v) for k, v in c.items()} for c in data.get("exclude") or []]
    return env, configs, exclude, bool(data.get("baseline", True))


def build_configs(env_options, matrix, allow_unknown):
    """Ordered, de-duplicated configs: the baseline ({}), the cartesian product, explicit configs."""
    axes = {}
    for text in env_options:
        name, values = parse_env_option(text)
        axes.setdefault(name, []).extend(v for v in values if v not in axes.get(name, []))
    explicit, exclude, baseline = [], [], True
    if matrix:
        m_axes, explicit, exclude, baseline = load_matrix(matrix)
        for name, values in m_axes.items():
            axes.setdefault(name, []).extend(v for v in values if v not in axes[name])
    for name, values in axes.items():
        validate(name, values, allow_unknown)
    for config in explicit + exclude:
        for name, value in config.items():
            validate(name, [value], allow_unknown)
    names = list(axes)
    configs = [{}] if baseline else []
    configs += [dict(zip(names, combo)) for combo in itertools.product(*(axes[n] for n in names))] if names else []
    configs += explicit
    keep, seen = [], set()
    for config in configs:
        key = config_key(config)
        if key in seen or any(config and all(config.get(k) == v for k, v in ex.items()) for ex in exclude):
            continue
        seen.add(key)
        keep.append(config)
    if len(keep) <= (1 if baseline else 0):
        raise UserError("nothing to sweep: give --env NAME=V1,V2 or --matrix FILE")
    return keep


def config_key(config):
    return " ".join(f"{k}={v}" for k, v in sorted(config.items())) or BASELINE


def fingerprint(plan, spec):
    """What makes two sweeps the same measurement (for --resume)."""
    keys = ("sizes", "iters", "warmup", "agg_iters", "cuda_graph", "cpu_time", "cycles", "configs")
    basis = {k: getattr(plan, k) for k in keys}
    basis.update(world_size=spec.world_size, nodes=spec.nodes)
    return hashlib.sha1(json.dumps(basis, sort_keys=True).encode()).hexdigest()[:12]


def rank_configs(records, keys):
    """Per (item, size bucket): mean busbw of each config; best, gain over baseline, slower ones."""
    rows = []
    measured = [r for r in records if not r.get("event") and r.get("phase", TOTAL) == TOTAL]
    items = list(dict.fromkeys(record_label(r) for r in measured))
    for item in items:
        for bucket, lo, hi in BUCKETS:
            per_config = {}
            for rec in measured:
                if record_label(rec) == item and lo <= rec["size_bytes"] < hi:
                    per_config.setdefault(rec["sweep_config"], []).append(rec["busbw_gbps"])
            if not per_config:
                continue
            mean = {k: sum(v) / len(v) for k, v in per_config.items()}
            best = max(mean, key=mean.get)
            base = mean.get(BASELINE)
            rows.append({"item": item, "bucket": bucket, "best": best, "busbw": mean[best],
                         "gain": (mean[best] / base - 1) * 100 if base else None,
                         "slower": ", ".join(k for k in keys if base and k in mean and mean[k] < base) or "-"})
    return rows


def print_ranking(records, keys, failed):
    print_table(rank_configs(records, keys), [("item", "measured", None), ("bucket", "sizes", None),
                                      ("best", "best config", None), ("busbw", "busbw GB/s", ".3f"),
                                      ("gain", "gain vs baseline %", "+.1f"), ("slower", "slower than baseline", None)],
                title="sweep ranking (small < 1M <= medium < 64M <= large)")
    out = console()
    for key, reason in failed.items():
        out.print(f"failed: {key}: {reason}")


def plot_sweep(records, path):
    series = {}
    for rec in records:
        if not rec.get("event") and rec.get("phase", TOTAL) == TOTAL:
            series.setdefault(f"{rec['sweep_config']} [{record_label(rec)}]", []).append(
                (rec["size_bytes"], rec["busbw_gbps"]))
    line_plot(path, series, "size (bytes)", "busbw (GB/s)", "commbench sweep")


@click.command()
@click.option("--env", "env_options", multiple=True, metavar="NAME=V1,V2",
              help="A variable and the values to sweep; several --env are crossed.")
@click.option("--matrix", type=click.Path(dir_okay=False), default=None,
              help="YAML with env (crossed), configs (explicit), exclude, baseline.")
@click.option("--collective", "collectives", default="all_reduce", show_default=True,
              help="Comma list: " + ",".join(COLLECTIVE_NAMES))
@click.option("--strategy", default=None, help="Sweep a strategy instead: " + ",".join(STRATEGY_NAMES))
@click.option("--allow-unknown", is_flag=True, help="Pass variables and values the catalogue does not know.")
@click.option("--resume", is_flag=True, help="Skip configs already done or failed in --out.")
@click.option("--per-config-timeout", type=float, default=None, help="Seconds before a config counts as hung.")
@case_options(place_default="both")
@click.option("--plot", type=click.Path(dir_okay=False), default=None, help="busbw vs size PNG, one line per config.")
@measure_options("1M", "1G")
@launch.launch_options
def sweep(env_options, matrix, collectives, strategy, allow_unknown, resume, per_config_timeout, plot,
          fmt, out, **kw):
    """Sweep NCCL/Gloo settings: every config is its own launch, then a ranking.

    NCCL reads its environment when a communicator is created, so each config
    gets a fresh torchrun launch with exactly that environment, plus the
    baseline with none of the swept variables set. A config that crashes,
    hangs or returns wrong data is recorded as failed and the sweep goes on.

    \b
    Example:
      commbench sweep --env NCCL_ALGO=Ring,Tree --env NCCL_PROTO=LL,LL128,Simple \\
          --collective all_reduce -b 1M -e 1G --nodes 2 --out sweep.jsonl --resume
    """
    spec = launch.spec_from_options(kw)
    configs = build_configs(env_options, matrix, allow_unknown)
    swept = {name for config in configs for name in config}
    for name in sorted(swept & set(os.environ)):  # the baseline means: none of the swept variables set
        console(stderr=True).print(f"note: {name}={os.environ.pop(name)} from the shell is not used by the sweep")
    names = parse_names(strategy, "strategy", "--strategy") if strategy else \
        parse_names(collectives, "collective", "--collective")
    plan = build_plan(names, take(kw, MeasureOptions), take(kw, CaseOptionsText).parse(), spec)
    no_leftovers(kw)
    if out is None and not spec.dry_run:
        console(stderr=True).print(f"note: records go to {DEFAULT_OUT} (append; --out FILE to choose, --out /dev/null "
                                   "for none); --resume reads them back")
    out_file = output_file(out or DEFAULT_OUT)
    fp = fingerprint(plan, spec)
    previous = [r for r in read_records(out_file) if r.get("sweep_fingerprint") == fp] if resume and out_file else []
    settled = {r["sweep_config"] for r in previous if r.get("event") in ("config_done", "failed")}
    previous = [r for r in previous if r["sweep_config"] in settled]  # a config cut short runs again, whole
    todo = [c for c in configs if config_key(c) not in settled]
    keys = [config_key(c) for c in configs]
    if spec.dry_run:
        for config in todo:
            for part_spec, part in launches(dataclasses.replace(spec, env=dict(config)), plan):
                launch.execute(part_spec, part)
        return
    if resume:
        console(stderr=True).print(f"resuming: {len(configs) - len(todo)} of {len(configs)} configs done, "
                                   f"{len(todo)} to run")
    records = previous + run_configs(spec, plan, todo, out_file, fp, per_config_timeout)
    failed = {r["sweep_config"]: r["reason"] for r in records if r.get("event") == "failed"}
    good = [r for r in records if not r.get("event") and r["sweep_config"] not in failed]
    render(good if fmt == "nccl-tests" else records, fmt, lambda _: print_ranking(good, keys, failed))
    if plot:
        plot_sweep(good, plot)
    if failed:
        click.echo(f"error: {len(failed)} of {len(configs)} configs failed", err=True)
        sys.exit(1)


def run_config(spec, plan, writer, max_seconds):
    """(records, reason it failed or None) of one config's launches."""
    records = []
    try:
        parts = launches(spec, plan)
    except UserError as exc:
        return records, f"refused: {exc}"
    for part_spec, part in parts:
        result = launch.execute(part_spec, part, writer, progress=False, max_seconds=max_seconds)
        records += result.records
        if result.returncode or result.hung:
            return records, ("hang: " if result.hung else "crash: ") + "; ".join(result.errors)
    wrong = sum(r.get("wrong") or 0 for r in records)
    if wrong:
        return records, f"wrong results: {wrong} elements"
    if len(records) < plan.records_expected():
        return records, f"only {len(records)} of {plan.records_expected()} measurements recorded"
    return records, None


def run_configs(spec, plan, todo, out_file, fp, per_config_timeout):
    """Launch each config; a config_done or failed event after it. Returns every record, events included."""
    writer = RecordWriter(out_file) if out_file else None
    records = []
    columns = (TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total} configs"),
               TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn())
    try:
        with Progress(*columns, console=console(stderr=True), disable=spec.verbose) as bar:
            task = bar.add_task("sweep", total=len(todo))
            for config in todo:
                key = config_key(config)
                bar.update(task, description=key)
                tags = {"sweep_config": key, "sweep_fingerprint": fp}
                run = dataclasses.replace(plan, run_id=new_run_id(), tags=tags)
                started = time.monotonic()
                measured, reason = run_config(dataclasses.replace(spec, env=dict(config)), run, writer,
                                              per_config_timeout)
                event = schema.event("commbench", "failed" if reason else "config_done", reason, run_id=run.run_id,
                                     config_env=config, seconds=round(time.monotonic() - started, 1), **tags)
                if writer:
                    writer.write(event)
                records += measured + [event]
                bar.advance(task)
    finally:
        if writer:
            writer.close()
    return records


@click.command(name="env")
def env_catalogue():
    """List the NCCL / PyTorch / Gloo variables commbench sweep knows.

    \b
    Example:
      commbench env
    """
    rows = []
    for var in CATALOGUE.values():
        allowed = list(var.choices or []) + ([f"{var.int_range[0]}..{var.int_range[1]}"] if var.int_range else [])
        rows.append({"name": var.name, "allowed": ", ".join(allowed) or "text", "meaning": var.meaning})
    print_table(rows, [("name", "variable", None), ("allowed", "values", None), ("meaning", "meaning", None)],
                title="commbench sweep: known variables")
