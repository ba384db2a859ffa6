"""`commbench sweep`: environment matrices, one launch per config."""
import dataclasses
import itertools
import math
import os
import signal
import sys
import time

import click

from benchcore import inputs
from benchcore.errors import UserError, refuse_given
from benchcore.progress import Reporter
from benchcore.report.render import console, line_plot, print_table
from benchcore.results import schema, stats
from benchcore.results.records import PLOT_SUFFIXES, RecordWriter, new_output_option, new_run_id, output_file
from benchcore.results.usable import SECONDS
from benchcore.units import format_size
from commbench import rankstats
from commbench.cases.case import TOTAL, ReadOptions, refuse_unread
from commbench.cases.registry import CASES, COLLECTIVE_NAMES, STRATEGY_NAMES, parse_names, record_label
from commbench.commands import verdict
from commbench.commands.options import (CaseOptionsText, MeasureOptions, case_options, given_fields, launch_options,
                                        launch_specs, measure_options, no_leftovers, parse_budget, repeats_option, take)
from commbench.commands.sweep_resume import backend_of, fingerprint, measured_options, resumable
from commbench.launch.execute import EXIT_TERM, Terminated, execute, on_sigterm
from commbench.output import render
from commbench.planning import build_plan
from commbench.runner import budget_lines, dry_run_estimate, launches, measured_once, step_text
from commbench.evidence.applied import judge_settings
from commbench.transports.envvars import read_by, split_values, validate

BASELINE = "baseline"
DEFAULT_OUT = "commbench-sweep.jsonl"


def parse_env_option(text):
    """'NCCL_ALGO=Ring,Tree' -> ('NCCL_ALGO', ['Ring', 'Tree']); a value with commas is quoted:
    'NCCL_PROTO="LL,LL128",Simple' -> ('NCCL_PROTO', ['LL,LL128', 'Simple'])."""
    name, sep, values = text.partition("=")
    values = split_values(values)
    if not sep or not name.strip() or not values:
        raise UserError(f"--env {text!r} is not NAME=VALUE[,VALUE...]")
    return name.strip(), values


MATRIX_KEYS = ("env", "configs", "exclude", "baseline")
MAX_CONFIGS = 10000     # configs are launched one by one: past this, a matrix is a mistake (and a memory bomb)


def _scalar(v):
    return isinstance(v, (str, int, float)) and not isinstance(v, bool)


def load_matrix(path):
    """YAML: env (name -> value or list, crossed), configs (explicit dicts), exclude (partial dicts), baseline
    (bool). Read as hostile input (benchcore.inputs); a wrong shape is one line naming the file and the key."""
    where = f"--matrix {inputs.name(path)}"
    data = inputs.load_yaml(path, "--matrix") or {}
    if not isinstance(data, dict) or not all(k in MATRIX_KEYS for k in data):
        raise UserError(f"{where}: expected a mapping with keys {', '.join(MATRIX_KEYS)}")
    env = data.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and (_scalar(v) or isinstance(v, list) and v and
                                                                     all(_scalar(x) for x in v))
                                            for k, v in env.items()):
        raise UserError(f"{where}: env is a mapping of variable names to a value or a list of values")
    parts = {}
    for key in ("configs", "exclude"):
        parts[key] = data.get(key) or []
        if not isinstance(parts[key], list) or not all(isinstance(c, dict) and all(
                isinstance(k, str) and _scalar(v) for k, v in c.items()) for c in parts[key]):
            raise UserError(f"{where}: {key} is a list of mappings of variable names to one value each")
    if not isinstance(data.get("baseline", True), bool):
        raise UserError(f"{where}: baseline is true or false")
    return ({k: [str(v) for v in (vals if isinstance(vals, list) else [vals])] for k, vals in env.items()},
            [{k: str(v) for k, v in c.items()} for c in parts["configs"]],
            [{k: str(v) for k, v in c.items()} for c in parts["exclude"]], data.get("baseline", True))


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
    if math.prod(len(v) for v in axes.values()) + len(explicit) > MAX_CONFIGS:
        raise UserError(f"more than {MAX_CONFIGS} configs to sweep: fewer values, or configs/exclude in --matrix")
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


def read_config(rec, by_key):
    """The part of a record's sweep config its backend reads."""
    return {k: v for k, v in by_key[rec["sweep_config"]].items() if rec["backend"] in read_by(k)}


def judge_sweep(records, configs, label_of=lambda rec: rec["sweep_config"], stand_ins=None):
    """Outcomes per measured item and size; configs whose env the backend reads identically are one group;
    label_of names a config's rows (verdict.on_evidence marks the unproven); stand_ins: {a config not launched: the
    one measured for it} (same_operations), named in the group of the one that stood for it."""
    by_key = {config_key(c): c for c in configs}

    def work(rec):
        return verdict.record_work(rec), config_key(read_config(rec, by_key))
    mine = [r for r in records if r.get("sweep_config") in by_key]
    outcomes = verdict.judge(mine, label_of, record_label, work)
    for out in outcomes:
        for group in out.groups:
            group.labels += [key for label in list(group.labels) for key, by in (stand_ins or {}).items()
                             if by == label.removesuffix(verdict.UNPROVEN)]
    return outcomes


def same_operations(configs, backend):
    """{config key: the earlier config's key that runs the same operations for it}: configs whose env differs only
    in variables the backend does not read (NCCL_* on Gloo) run the same operations (the equivalence judge_sweep
    groups them by): only the first of them is launched."""
    first, stand_ins = {}, {}
    for config in configs:
        read = config_key({k: v for k, v in config.items() if backend in read_by(k)})
        by = first.setdefault(read, config_key(config))
        if by != config_key(config):
            stand_ins[config_key(config)] = by
    return stand_ins


def on_evidence(records, configs):
    """verdict.on_evidence over a sweep's measurements: each config's settings its backend reads, judged on the
    evidence its runs recorded (commbench/evidence/applied.py; no evidence: unknown)."""
    by_key = {config_key(c): c for c in configs}
    mine = [r for r in records if r.get("sweep_config") in by_key]
    return verdict.on_evidence(mine, lambda r: r["sweep_config"],
                               lambda r: judge_settings(read_config(r, by_key), r.get("effective")))


def settings_rows(settings):
    return [{"config": key, "setting": var, "status": st["status"], "evidence": st["evidence"]}
            for key, found in settings.items() for var, st in found.items()]


def ranking_rows(outcomes):
    """Per item and size: the fastest group and its time ratio to the baseline's, with the 95% interval."""
    rows = []
    for out in outcomes:
        best = out.groups[0]
        base = next((g for g in out.groups if BASELINE in g.labels), None)
        r = stats.ratio_interval(best.times, base.times) if base and base is not best else None
        win = out.winner
        rows.append({"item": out.item, "size": format_size(out.size), "best": best.name, "time_us": best.time,
                     "vs": verdict.interval_text(r, 3) if r else ("baseline" if base is best else ""),
                     "verdict": f"{win.name} fastest" if win else "no significant difference"
                     if len(out.groups) > 1 else "nothing to rank: one group"})
    return rows


def print_ranking(outcomes, verdicts, failed, notes, settings=None, evidence=()):
    if settings and settings_rows(settings):
        print_table(settings_rows(settings), [("config", "config", None), ("setting", "setting", None),
                                              ("status", "applied?", None), ("evidence", "evidence", None)],
                    title="settings: applied or not, on the evidence each run recorded (worst run shown)")
    print_table(ranking_rows(outcomes), [("item", "measured", None), ("size", "size", None),
                                         ("best", "fastest config", None), ("time_us", "time us", ".1f"),
                                         ("vs", "time / baseline [95% CI]", None), ("verdict", "verdict", None)],
                title="sweep ranking (geometric mean over rounds)")
    out = console()
    if any(row["vs"].endswith(verdict.NO_CONCLUSION) for row in ranking_rows(outcomes)):
        out.print(verdict.NO_CONCLUSION_RULE)
    out.print(f"verdicts ({stats.METHOD}):")
    said = [v["reason"] for v in verdicts if v["event"] == "verdict"]   # not_applied events: said below
    for line in said + verdict.equivalence_lines(outcomes) + notes:
        out.print(f"  {line}")
    for line in evidence:
        out.print(line, markup=False)
    for key, reason in failed.items():
        out.print(f"failed: {key}: {reason}")


@click.command()
@click.option("--env", "env_options", multiple=True, metavar="NAME=V1,V2",
              help="A variable and the values to sweep; several --env are crossed.")
@click.option("--matrix", default=None, metavar="FILE",
              help="YAML with env (crossed), configs (explicit), exclude, baseline.")
@click.option("--collective", "collectives", default="all_reduce", show_default=True,
              help="Comma list: " + ",".join(COLLECTIVE_NAMES))
@click.option("--strategy", default=None, help="Sweep a strategy instead: " + ",".join(STRATEGY_NAMES))
@click.option("--allow-unknown", is_flag=True, help="Pass variables and values the catalogue does not know.")
@click.option("--resume", is_flag=True, help="Skip configs (per round) already done or failed in --out by a sweep "
                                            "with the same measured options (a sweep with others is refused).")
@click.option("--per-config-timeout", type=SECONDS, default=None, help="Seconds before a config counts as hung.")
@repeats_option(3)
@click.option("--time-budget", default=None, metavar="SECONDS",
              help="End near this many seconds: every config run of the --repeats rounds gets an equal share, "
                   "start-up included, and each measurement fits its iterations (at most -n) to it, warm-up first. "
                   "A first run that takes more than twice its share ends the sweep (the budget is too small).")
@case_options(place_default="both")
@click.option("--plot", default=None, callback=new_output_option("--plot", PLOT_SUFFIXES),
              help="PNG: time vs size, log-log, one line per config (geometric mean over rounds; a new file).")
@measure_options("1M", "1G")
@launch_options
def sweep(env_options, matrix, collectives, strategy, allow_unknown, resume, per_config_timeout, repeats, time_budget,
          plot, fmt, out, show_stats, **kw):
    """Sweep NCCL/Gloo settings: every config is its own launch, in rounds, then verdicts.

    NCCL reads its environment when a communicator is created, so each config
    gets a fresh torchrun launch with exactly that environment, plus the
    baseline with none of the swept variables set. Configs run in --repeats
    rounds (each round every config once, the baseline included, in a rotated
    order); a config is called faster only when the 95% interval of its time
    ratio excludes 1. Configs whose variables the backend ignores (NCCL_* on
    Gloo) are one group, never ranked. A config whose setting did not take
    effect (the run's own evidence: NCCL's INFO lines, Gloo's sockets, Open
    MPI's selection) is said "not applied" and never ranked; one that no
    evidence proves is ranked, marked (unproven). A config that crashes, hangs
    or returns wrong data is recorded as failed and the sweep goes on. SIGTERM
    (a time limit) ends the sweep at once, exit 143; --resume runs what is left.

    \b
    Example:
      commbench sweep --env NCCL_ALGO=Ring,Tree --env NCCL_PROTO=LL,LL128,Simple \\
          --collective all_reduce -b 1M -e 1G --nodes 2 --out sweep.jsonl --resume
      commbench sweep --env 'NCCL_PROTO=^LL128,"LL,Simple"' --env NCCL_ALGO=allreduce:tree -b 1M -e 64M
    """
    spec = launch_specs(kw)[0]
    configs = build_configs(env_options, matrix, allow_unknown)
    swept = {name for config in configs for name in config}
    for name in sorted(swept & set(os.environ)):  # the baseline means: none of the swept variables set
        console(stderr=True).print(f"note: {name}={os.environ.pop(name)} from the shell is not used by the sweep")
    if strategy:
        refuse_given(["collectives"], "not with --strategy, which sweeps a strategy instead")
    names = parse_names(strategy, "strategy", "--strategy") if strategy else \
        parse_names(collectives, "collective", "--collective")
    case_opts = ReadOptions(take(kw, CaseOptionsText).parse())
    plan = build_plan(names, take(kw, MeasureOptions), case_opts, spec)
    refuse_unread(case_opts, [CASES[n] for n in names], given_fields())
    table_fn = rankstats.with_stats(lambda _: print_ranking(outcomes, found, failed, notes, settings, evidence),
                                    show_stats, fmt)
    no_leftovers(kw)
    out_file = output_file(out or DEFAULT_OUT)
    options = measured_options(plan, spec)
    previous, settled, discarded = resumable(out_file, options) if resume and out_file else ([], set(), "")
    for text in dict.fromkeys(spec.notes):   # once, as the other commands say them (emulated nodes, rounded sizes),
        console(stderr=True).print(f"note: {text}")   # once what the user gave is known to be usable
    backend = backend_of(spec)
    ignored = sorted(name for name in swept if backend not in read_by(name))
    stand_ins = same_operations(configs, backend)   # configs the backend runs alike: one launched for them all
    per_run = len(plan.launches(spec.may_use_nccl()))   # launches of one config run (NCCL: one per case env)
    runs = len(configs) - len(stand_ins)
    if ignored:
        alike = len(stand_ins) + len(set(stand_ins.values()))
        console(stderr=True).print(
            f"note: {', '.join(ignored)} {'is' if len(ignored) == 1 else 'are'} not read by {backend}, which this "
            f"sweep runs on: " + (f"{alike} configs run the same operations; each set is launched once: "
                                  f"{launches_text(runs, repeats, per_run)} instead of {len(configs) * repeats * per_run}"
                                  f" ({len(stand_ins) * repeats * per_run} saved)" if stand_ins else
                                  "the configs differ in what it reads too"))
    if out is None and not spec.dry_run:
        console(stderr=True).print(f"note: records go to {DEFAULT_OUT} (append; --out FILE to choose, --out /dev/null "
                                   "for none); --resume reads them back")
    failed_keys = {r["sweep_config"] for r in previous if r.get("event") == "failed"}
    launched = [c for c in configs if config_key(c) not in stand_ins]
    todo = [(config, rnd) for rnd in range(repeats) for config in rotated(launched, rnd)
            if (config_key(config), rnd) not in settled and config_key(config) not in failed_keys]
    for text in measured_once([(spec, plan)] * len(todo))[0]:   # strategies a plan measures once for others
        console(stderr=True).print(f"note: {text}", markup=False)
    budget = parse_budget(time_budget)
    if budget and todo:   # each run's share; the fingerprint above holds what is measured, not the share
        plan = dataclasses.replace(plan, time_budget=budget / len(todo))
    if spec.dry_run:
        click.echo(dry_run_estimate([plan] * len(todo), [spec] * len(todo))
                   + (f": {runs_text(todo, repeats, per_run, budget)}" if budget else ""), err=True)
        for config, _ in todo[:len(launched)]:
            for part_spec, part in launches(dataclasses.replace(spec, env=dict(config)), plan):
                execute(part_spec, part)
        return
    if resume:
        console(stderr=True).print(f"resuming: {len(settled)} of {len(launched) * repeats} config runs "
                                   f"({len(launched)} configs x {repeats} rounds) done, {len(todo)} to run{discarded}")
    started = time.monotonic()
    ran, stopped = run_configs(spec, plan, todo, out_file, options, per_config_timeout)
    for line in budget_lines(ran, budget, time.monotonic() - started):
        console(stderr=True).print(f"{line}: {runs_text(todo, repeats, per_run, budget)}",
                                   markup=False)
    records = previous + ran
    failed = {r["sweep_config"]: r["reason"] for r in records if r.get("event") == "failed"}
    cut = {r["run_id"] for r in records if r.get("event") == "interrupted"}   # never ranked: --resume reruns it
    good = [r for r in records if not r.get("event") and r["sweep_config"] not in failed and r["run_id"] not in cut]
    ranked, label_of, dropped, unproven, settings = on_evidence(good, configs)   # not applied: never ranked
    evidence = verdict.evidence_lines(dropped, unproven)
    outcomes = judge_sweep(ranked, configs, label_of, stand_ins)
    found = verdict.verdicts(outcomes, plan.run_id) + [
        schema.event("commbench", "not_applied", f"{key}: {why}", run_id=plan.run_id, sweep_config=key,
                     applied=settings[key]) for key, why in dropped.items()]
    if out_file:
        with RecordWriter(out_file) as writer:
            for rec in found:
                writer.write(rec)
    notes = [f"{', '.join(ignored)}: ignored by {backend}"] if ignored else []
    render(good if fmt == "nccl-tests" else records + found, fmt, table_fn)
    if plot:
        plot_sweep(good, plot)
    if dropped:
        click.echo(f"warning: {len(dropped)} of {len(configs)} configs ran without their setting (not applied: not "
                   "ranked)", err=True)
    if failed:
        click.echo(f"error: {len(failed)} of {len(configs)} configs failed", err=True)
    if stopped:
        ended = {(r["sweep_config"], r["repeat"]) for r in ran if r.get("event") in ("config_done", "failed")}
        left = sum(1 for c, rnd in todo if config_key(c) not in failed and (config_key(c), rnd) not in ended)
        click.echo(f"error: {stopped}; --resume with the same options and --out runs the {left} config runs not "
                   "done", err=True)
        sys.exit(EXIT_TERM)
    if failed:
        sys.exit(1)


def launches_text(configs, repeats, per_run):
    """'3 launches (1 config x 3 rounds)'; under NCCL a config run may be several launches ('x 2 launches')."""
    total = configs * repeats * per_run
    return (f"{total} launch{'es' * (total != 1)} ({configs} config{'s' * (configs != 1)} x {repeats} "
            f"round{'s' * (repeats != 1)}" + (f" x {per_run} launches" if per_run > 1 else "") + ")")


def runs_text(todo, repeats, per_run, budget):
    """What the sweep will launch, its config runs (config, round) as launches_text says them, and each one's share
    of the budget: '3 launches (1 config x 3 rounds) of 10.0 s each'."""
    configs = len({config_key(c) for c, _ in todo})
    total = len(todo) * per_run
    text = launches_text(configs, repeats, per_run) if len(todo) == configs * repeats else \
        f"{total} launch{'es' * (total != 1)} ({len(todo)} config runs left)"
    share = budget / len(todo)
    return f"{text} of {share:.1f} s each" if per_run == 1 else f"{text}, {share:.1f} s per config run"


def rotated(configs, rnd):
    """Round rnd's order: each round starts one config later, so no config always runs first or last."""
    turn = rnd % len(configs)
    return configs[turn:] + configs[:turn]


def plot_sweep(records, path):
    series = {}
    for rec in records:
        if rec.get("phase", TOTAL) == TOTAL:
            series.setdefault(f"{rec['sweep_config']} [{record_label(rec)}]", []).append(
                (rec["size_bytes"], rec["time_us"]))
    line_plot(path, series, "size", "time (us; median, bars: min-max over rounds)",
              "commbench sweep: time per environment config (lower is better)", log_y=True)


def run_config(spec, plan, writer, max_seconds, reporter):
    """(records, the event that ends the config run: config_done, failed or interrupted (SIGTERM reached the
    launch), why) of one config's launches."""
    records = []
    try:
        parts = launches(spec, plan)
    except UserError as exc:
        return records, "failed", f"refused: {exc}"
    for part_spec, part in parts:
        if part.time_budget:   # its share of the budget counts from its start
            part = dataclasses.replace(part, launched_at=time.time())
        steps = part.steps()
        result = execute(part_spec, part, writer, lambda i, _: reporter.detail(step_text(part, steps[i])) if
                         0 <= i < len(steps) else None, max_seconds=max_seconds)
        records += result.records
        if result.returncode == EXIT_TERM:
            return records, "interrupted", "; ".join(result.errors)
        if result.returncode or result.hung:
            return records, "failed", ("hang: " if result.hung else "crash: ") + "; ".join(result.errors)
    wrong = sum(r.get("wrong") or 0 for r in records)
    if wrong:
        return records, "failed", f"wrong results: {wrong} elements"
    if len(records) < plan.records_expected():
        return records, "failed", f"only {len(records)} of {plan.records_expected()} measurements recorded"
    return records, "config_done", None


def run_configs(spec, plan, todo, out_file, options, per_config_timeout):
    """Launch each (config, round); the event that ended it after it (config_done, failed or interrupted), holding
    the sweep's measured options.
    Returns (every record, events included; why the sweep stopped short, or None): a config that failed is not run
    in later rounds; SIGTERM ends the sweep at once, the run it reached marked interrupted (--resume runs it again).
    Under a time budget (plan.time_budget: each run's share) a first run that took more than twice its share ends
    the sweep: the budget cannot hold the runs."""
    writer = RecordWriter(out_file) if out_file else None
    records, failed, stopped, fp = [], set(), None, fingerprint(options)
    on_term = signal.signal(signal.SIGTERM, on_sigterm)   # between launches too
    reporter = Reporter("sweep", [1] * len(todo), expect_s=plan.time_budget and plan.time_budget * len(todo),
                        enabled=not spec.verbose)
    try:
        with reporter:
            for i, (config, rnd) in enumerate(todo):
                key = config_key(config)
                reporter.step(i, f"{key} (round {rnd + 1})")
                if key in failed:
                    continue
                tags = {"sweep_config": key, "sweep_fingerprint": fp, "repeat": rnd}
                run = dataclasses.replace(plan, run_id=new_run_id(), tags=tags)
                started = time.monotonic()
                measured, kind, reason = run_config(dataclasses.replace(spec, env=dict(config)), run, writer,
                                                    per_config_timeout, reporter)
                event = schema.event("commbench", kind, reason, run_id=run.run_id, config_env=config,
                                     seconds=round(time.monotonic() - started, 1), sweep_options=options, **tags)
                if writer:
                    writer.write(event)
                records += measured + [event]
                if kind == "interrupted":
                    stopped = f"{key} (round {rnd + 1}): {reason}"
                    break
                if kind == "failed":
                    failed.add(key)
                if plan.time_budget and i == 0 and event["seconds"] > 2 * plan.time_budget:
                    raise UserError(f"--time-budget {plan.time_budget * len(todo):g} s is too small: a config run "
                                    f"takes {event['seconds']:.0f} s here (start-up included), its share is "
                                    f"{plan.time_budget:.1f} s; the {len(todo)} runs need about "
                                    f"{event['seconds'] * len(todo):.0f} s (or fewer configs or --repeats)")
    except Terminated:
        stopped = "terminated by SIGTERM (a time limit, scancel or kill) between launches"
    finally:
        if not stopped:   # stopped: SIGTERM stays ignored until what was measured is written and the sweep exits
            signal.signal(signal.SIGTERM, on_term)
        if writer:
            writer.close()
    return records, stopped
