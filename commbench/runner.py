"""A measurement from a command's parsed options (commbench/commands/options.py): its plan (commbench/planning.py),
its launches, the records to --out, the rendering, the exit status."""
import dataclasses
import os
import sys
import time

import click

from benchcore.errors import UserError
from benchcore.processes import procs
from benchcore.progress import Reporter
from benchcore.report.render import console
from benchcore.results import metrics, schema
from benchcore.results.records import RecordWriter, hostname, output_file
from benchcore.units import format_size
from commbench import rankstats
from commbench.cases import compute
from commbench.cases.case import ReadOptions, refuse_unread
from commbench.cases.collectives import DTYPES
from commbench.cases.registry import CASES, record_label
from commbench.launch.execute import execute
from commbench.launch.spec import gpu_memories
from commbench.launch.torchrun import check_endpoint
from commbench.output import render
from commbench.output.nccltests import NcclStream
from commbench.output.tables import print_collective_tables
from commbench.planning import build_plan
from commbench.output.stream import table_stream


def launches(spec, plan):
    """[(spec, plan)] per launch; a case's NCCL variables conflict with none the shell sets."""
    nccl = spec.may_use_nccl()
    for env, part in plan.launches(nccl):
        for name, value in env.items():
            have = spec.env.get(name, os.environ.get(name))
            if have is not None and have.lower() != value.lower():
                who = ", ".join(sorted({c["case"] for c in part.configs}))
                raise UserError(f"{who} runs {name}={value}, but {name}={have} is set; unset it or use commbench run")
    parts = plan.launches(nccl)
    if plan.time_budget and len(parts) > 1:   # each launch's share of the budget: its share of the measurements
        every = len(plan.steps())
        parts = [(env, dataclasses.replace(p, time_budget=plan.time_budget * len(p.steps()) / every))
                 for env, p in parts]
    return [(dataclasses.replace(spec, env={**spec.env, **env}), part) for env, part in parts]


def measured_once(parts):
    """What the launches' plans measure once for several configs (Plan.stand_ins): ([the line to say, one per config
    stood for, with the measurements saved], [its same_operations event, for the records: the tables show the config
    as the one measured for it])."""
    found, backends = {}, {s.backend for s, _ in parts}
    for spec, plan in parts:
        backend = spec.backend if spec.backend != "auto" else "nccl" if spec.may_use_nccl() else "gloo"
        for (size, i), j in plan.stand_ins().items():
            cfg, by = plan.configs[i], plan.configs[j]
            key = (backend, record_label(cfg), record_label(by))
            run = plan.size_run(cfg, size)
            mine = found.setdefault(key, {"sizes": set(), "saved": 0, "cfg": cfg, "by": by, "plan": plan,
                                          "what": CASES[cfg["case"]].work(cfg, run // DTYPES[cfg["dtype"]].bytes,
                                                                          plan.world_size,
                                                                          DTYPES[cfg["dtype"]].bytes)[0]})
            mine["sizes"].add(run)
            mine["saved"] += plan.cycles * (1 if plan.fit_repeats else plan.repeats)
    lines, events = [], []
    for (backend, label, by), f in found.items():
        sizes = sorted(f["sizes"])
        where = format_size(sizes[0]) + (f"-{format_size(sizes[-1])}" if len(sizes) > 1 else "")
        on = f" on {backend}" if len(backends) > 1 else ""
        saved = f"{f['saved']} measurement{'s' * (f['saved'] != 1)} saved" + (" a repeat" if f["plan"].fit_repeats
                                                                              else "")
        lines.append(f"{label} at {where}{on} runs the same operations as {by} ({f['what']}): measured once, as "
                     f"{by} ({saved})")
        events.append(schema.event("commbench", "same_operations", lines[-1], run_id=f["plan"].run_id, sizes=sizes,
                                   config={**f["cfg"], "backend": backend},
                                   measured_by={**f["by"], "backend": backend}))
    return lines, events


# Per rank beyond the case's own buffers (measured on this 2-core VM with Gloo, torch 2.13): ~300 MiB of
# runtime, and Gloo's copies of up to 0.9x the buffers (all_gather 256M out of place: 627 MiB for 384 MiB of
# buffers). On a GPU: the CUDA context and NCCL's channel buffers.
RUNTIME_BYTES = {"cpu": 512 << 20, "gpu": 1 << 30}
SCRATCH_FACTOR = {"cpu": 2.0, "gpu": 1.25}


def check_memory(spec, plan):
    """Refuse, before anything starts, a plan whose largest measurement cannot fit in a rank's share."""
    buffers, cfg, size = plan.largest(spec.world_size)
    gpus = gpu_memories()
    kind = "gpu" if gpus and spec.may_use_nccl() else "cpu"
    need = int(buffers * SCRATCH_FACTOR[kind]) + RUNTIME_BYTES[kind]
    have = min(gpus) if kind == "gpu" else procs.mem_available() // spec.nproc_per_node
    if need <= have:
        return
    where = "GPU memory" if kind == "gpu" else f"available RAM / {spec.nproc_per_node} ranks on this node"
    there = f"there is {format_size(have, approx=True)} ({where})"
    if RUNTIME_BYTES[kind] > have:   # not one byte of buffer fits: the ranks are too many
        raise UserError(f"--nproc-per-node {spec.nproc_per_node}: a rank needs about "
                        f"{format_size(RUNTIME_BYTES[kind], approx=True)} before any buffer and {there}: fewer ranks "
                        "per node")
    kernel = compute.footprint(cfg["compute_kernel"], *cfg["gemm"]) if cfg.get("gemm") else 0
    if int(kernel * SCRATCH_FACTOR[kind]) + RUNTIME_BYTES[kind] > have:   # the GEMM alone does not fit
        raise UserError(f"--gemm {','.join(map(str, cfg['gemm']))}: its A, W and output need about "
                        f"{format_size(kernel, approx=True)} per rank and {there}: a smaller --gemm")
    raise UserError(f"{record_label(cfg)} at {format_size(size)} needs about {format_size(need, approx=True)} "
                    f"per rank; {there}: use a smaller -e/--max-bytes")


FIXED_BYTES = 1 << 20   # a step's weight beyond its payload: what each measurement costs whatever its size (buffers,
#                         the check, gathering the times; about 1 MiB's worth of transfer on the machines tried)


def step_text(plan, step):
    """'overlap ddp R=1 16M repeat 2/3': what a step measures."""
    return (f"{record_label(step.cfg)} {format_size(step.run)}"
            + (f" repeat {step.repeat + 1}/{plan.repeats}" if plan.repeats > 1 else "")
            + (f" cycle {step.cycle + 1}/{plan.cycles}" if plan.cycles > 1 else ""))


class Followed:
    """The launches of a command on one Reporter (benchcore.progress): every launch's steps (Plan.steps) in turn;
    shown(i) is what launch i's Supervisor tells of the step its ranks announce. A step's weight is its payload plus
    FIXED_BYTES (under a time budget too: its iterations are capped by -n, so larger payloads still take longer)."""

    def __init__(self, title, plans, enabled=True, reporter=None):
        self.plans = list(plans)
        self.steps = [p.steps() for p in self.plans]
        budget = sum(p.time_budget or 0 for p in self.plans) or None
        self.reporter = reporter or Reporter(title, self._weights(), expect_s=budget, enabled=enabled)

    def _weights(self):
        return [st.run + FIXED_BYTES for steps in self.steps for st in steps]

    def shown(self, i):
        def at(step, repeats):
            if repeats and repeats != self.plans[i].repeats:   # a time budget chose the repeats
                self.plans[i] = dataclasses.replace(self.plans[i], repeats=repeats)
                self.steps[i] = self.plans[i].steps()
                self.reporter.resize(self._weights())
            first = sum(len(s) for s in self.steps[:i])
            if step < 0:
                self.reporter.step(first, "calibrating the time budget")
            elif step < len(self.steps[i]):
                self.reporter.step(first + step, step_text(self.plans[i], self.steps[i][step]))
        return at


class Tee:
    """Every record to each writer given (the user's --out, the rows streamed to stdout)."""

    def __init__(self, *writers):
        self.writers = [w for w in writers if w]

    def write(self, rec):
        for writer in self.writers:
            writer.write(rec)


class Derived:
    """A record writer that writes derive(record)'s records instead of each record (pairs: one per pair)."""

    def __init__(self, writer, derive):
        self.writer, self.derive = writer, derive

    def write(self, rec):
        for out in self.derive(rec):
            self.writer.write(out)


def run_plan(rounds, output, table_fn, label="measuring", plot_fn=None, judge=None, derive=None, rows=None):
    """Launch rounds ([(spec, plan)], one after another: several with compare --backends), judge (verdict records,
    written after the measurements), render (and plot) as output (Output) says, and exit non-zero on failure or
    wrong results; the records, where it returns. derive: record -> the records written and shown in its place
    (pairs); rows: a writer that prints the table's rows as they are measured (output.stream.TableStream)."""
    spec = rounds[0][0]
    parts = [part for s, p in rounds for part in launches(s, p)]
    path = None if spec.dry_run else output_file(output.out)
    if not spec.dry_run:
        for s, p in rounds:
            check_memory(s, p)
            check_endpoint(s)
    for text in dict.fromkeys(n for s, _ in rounds for n in s.notes):  # on stderr: stdout stays a table, JSON or CSV
        click.echo(f"note: {text}", err=True)
    alike, stood = measured_once(parts)
    for text in alike:
        click.echo(f"note: {text}", err=True)
    if spec.dry_run:
        for part_spec, part in parts:
            execute(part_spec, part)
        # on stderr: stdout stays the script a shell runs
        click.echo(dry_run_estimate([p for _, p in parts], [s for s, _ in parts]), err=True)
        return
    writer = RecordWriter(path) if path else None
    sink = Derived(writer, derive) if writer and derive else writer
    # in a pipe (a Slurm log, tee) nccl-tests' text reaches stdout row by row as nccl-tests prints it
    places = {}
    for _, part in parts:
        for cfg in part.configs:
            places.setdefault(cfg["case"], set()).add(bool(cfg.get("in_place")))
    stream = NcclStream(places) if output.fmt == "nccl-tests" and not derive and not sys.stdout.isatty() else None
    sink = Tee(sink, stream, rows) if stream or rows else sink
    records, errors, code, raw, started = [], [], 0, 0, time.monotonic()
    for rec in stood if writer else ():
        writer.write(rec)
    followed = Followed(label, [p for _, p in parts], enabled=not spec.verbose)
    expected = sum(p.records_expected() for _, p in rounds)
    try:
        with followed.reporter:
            for i, (part_spec, part) in enumerate(parts):
                if part.time_budget:   # its share of the budget counts from its start
                    part = dataclasses.replace(part, launched_at=time.time())
                result = execute(part_spec, part, sink, followed.shown(i))
                raw += sum(1 for r in result.records if not r.get("event"))
                records += [d for r in result.records for d in derive(r)] if derive else result.records
                chose = next((r["repeats"] for r in result.records if r.get("event") == "time_budget"), None)
                if chose:   # the repeats its time budget chose: the measurements to expect
                    expected += dataclasses.replace(part, repeats=chose).records_expected() - part.records_expected()
                if result.returncode:
                    code, errors = result.returncode, result.errors
                    break
        records = stood + records if records else records   # what was measured once for others, where any was
        if judge and records and not code:
            for rec in judge(records):
                records.append(rec)
                if writer:
                    writer.write(rec)
    finally:
        if writer:
            writer.close()
        if stream:
            stream.close()
    measured = [r for r in records if not r.get("event")]
    if records:   # a run that measured nothing (a rank hung at its first operation) has its events shown only
        if not stream:   # a stream printed its rows as they came
            render(records, output.fmt, table_fn if measured else lambda _: console().print("no measurements"))
        if output.plot and measured:
            plot_fn(records, output.plot)
    metrics.publish(records, "commbench")   # --metrics, --pushgateway
    wrong = sum(r.get("wrong") or 0 for r in measured)
    if wrong:
        click.echo(f"error: {wrong} wrong elements: the collective returned incorrect data", err=True)
        sys.exit(1)
    if code:
        for reason in errors:
            click.echo(f"error: {reason}", err=True)
        sys.exit(code if code > 0 else 1)
    if spec.launcher == "torchrun" and spec.node_rank != 0:  # every node says how it ended
        click.echo(f"node rank {spec.node_rank} on {hostname()}: done; node rank 0 prints and writes the records",
                   err=True)
    elif raw < expected:
        click.echo(f"error: only {raw} of {expected} measurements were recorded", err=True)
        sys.exit(1)
    for line in budget_lines(records, sum(p.time_budget or 0 for _, p in parts),
                             time.monotonic() - started):
        click.echo(line, err=True)
    return records


# A launch's start-up and ending on a CPU machine (a 2-core VM, Gloo, torch 2.13): the whole of `commbench run -b 4
# -e 4 -n 1 -w 0` (imports, torchrun, rendezvous, one 4-byte measurement, the records) took 2.5-3.7 s, median 3.1,
# in 5 runs at load 4.4 (2026-12-06); ring the same, 3.0 s. Not measured on a GPU machine (CUDA and NCCL's init).
CPU_START_S = 3.1


def dry_run_estimate(plans, specs=None):
    """The line a dry run ends with, on stderr: the duration a time budget sets; else, with the launch specs, the
    operations' time by the topology in effect (its model's time per call; its reference rate and latency where it
    states no ceiling) plus each launch's start-up on a CPU machine (CPU_START_S), each part said; what is not known
    said so."""
    budget = sum(p.time_budget or 0 for p in plans)
    if budget:
        return f"estimated duration: about {budget:g} s (--time-budget), start-ups included"
    steps = sum(len(p.steps()) for p in plans)
    counts = "/".join(dict.fromkeys(f"{p.warmup} warm-up + {p.iters}" for p in plans))
    work = f"{len(plans)} launch{'es' * (len(plans) > 1)}, {steps} measurements of {counts} iterations each"
    known = [operations_s(spec, plan) for spec, plan in zip(specs or (), plans)]
    if not known or any(secs is None for secs, _ in known):
        why = next((how for secs, how in known if secs is None), "no launch spec")
        return f"estimated duration: not known before a run: {work} (the operations' time: {why})"
    ops = sum(secs for secs, _ in known)
    how = "; ".join(dict.fromkeys(h for _, h in known))
    gpu = any(spec.may_use_nccl() for spec in specs)
    start = None if gpu else CPU_START_S * len(plans)
    parts = [f"the operations {ops:.1f} s by {how}"] + ([f"{len(plans)} start-up{'s' * (len(plans) > 1)} of about "
                                                         f"{CPU_START_S:g} s (measured on a 2-core CPU VM)"]
                                                        if start is not None else [])
    total = f"about {ops + start:.0f} s" if start is not None else f"over {ops:.1f} s"
    return (f"estimated duration: {total} ({work}): " + " + ".join(parts)
            + ("; the start-up on a GPU machine is not known here (not measured): not counted" if gpu else ""))


def operations_s(spec, plan):
    """(seconds every timed and warm-up call of the plan takes by the topology in effect, how it was figured), or
    (None, why not)."""
    from commbench.cases.case import TOTAL
    from commbench.model.alphabeta import predict
    from commbench.model.topology import from_dict
    topo = from_dict(plan.topology)
    if topo is None:
        return None, "no topology in effect"
    backend = plan.backend if plan.backend != "auto" else "nccl" if spec.may_use_nccl() else "gloo"
    calls = (plan.warmup + plan.iters) * plan.agg_iters + (1 if plan.check else 0)
    stated = {f"{k}_ceiling": "datasheet" for k in ("intra", "inter", "shm") if getattr(topo, f"{k}_ceiling") == "none"}
    total, how = 0.0, f"topology {topo.name}'s model ({calls} calls a measurement)"
    for step in plan.steps():
        case = CASES[step.cfg["case"]]
        if case.model is None:
            return None, f"{case.name} has no model"
        pred = predict(case, step.cfg, step.run, topo, spec.world_size, spec.nodes, backend).get(TOTAL)
        if pred is not None and pred.reason and stated:   # a reference rate, no ceiling: the time it gives
            pred = predict(case, step.cfg, step.run, dataclasses.replace(topo, **stated), spec.world_size,
                           spec.nodes, backend).get(TOTAL)
            how = (f"topology {topo.name}'s reference rate and latency (it states no ceiling; {calls} calls a "
                   "measurement)")
        if pred is None or pred.time_us is None:
            return None, (pred.reason or pred.time_reason) if pred and (pred.reason or pred.time_reason) else \
                f"the model gives {record_label(step.cfg)} no time"
        total += pred.time_us * 1e-6 * calls
    return total, how


def budget_lines(records, budget, took):
    """What a time budget scaled, from its launches' time_budget events and the iterations the measurements ran:
    'time budget 90 s: 3 repeats per size, the first at 1 iteration (the calibration, 26.5 s), then 2-20 iterations
    per measurement; the run took 92 s' (p2p: 'time budget 20 s: 3-10000 iterations per measurement; ...')."""
    events = [r for r in records if r.get("event") == "time_budget"]
    iters = [r["iters"] for r in records if not r.get("event") and r.get("time_budget_s")]
    if not budget or not (iters or events):
        return []
    fitted = f"{min(iters)}{'' if min(iters) == max(iters) else f'-{max(iters)}'} iterations per measurement" \
        if iters else ""
    if not events:
        return [f"time budget {budget:g} s: {fitted}; the run took {took:.0f} s"]
    repeats = sorted({r["repeats"] for r in events})
    said = "-".join(map(str, dict.fromkeys([repeats[0], repeats[-1]])))
    return [f"time budget {budget:g} s: {said} repeat{'s' if repeats[-1] > 1 else ''} per size, the first at 1 "
            f"iteration (the calibration, {sum(r['seconds'] for r in events):.1f} s)"
            + (f", then {fitted}" if fitted else "") + f"; the run took {took:.0f} s"]


def measure(names, opts, table_fn=print_collective_tables, label="measuring", plot_fn=None, judge=None, reshape=None):
    """Build the plan of the named cases from a command's Options and run it; with several launch specs
    (--backends), --repeats rounds of one launch per spec, each round starting one spec later (drift hits every
    backend alike), every record carrying its round as repeat."""
    case_opts = ReadOptions(opts.cases)
    if len(opts.specs) == 1:
        rounds = [(opts.specs[0], build_plan(names, opts.measure, case_opts, opts.specs[0], opts.repeats))]
    else:
        plans = [build_plan(names, opts.measure, case_opts, spec) for spec in opts.specs]
        pairs = [(s, dataclasses.replace(p, run_id=plans[0].run_id)) for s, p in zip(opts.specs, plans)]
        rounds = [(s, dataclasses.replace(p, tags={**p.tags, "repeat": r}) if opts.repeats > 1 else p)
                  for r in range(opts.repeats) for s, p in pairs[r % len(pairs):] + pairs[:r % len(pairs)]]
    refuse_unread(case_opts, [CASES[n] for n in names], opts.given)
    if opts.time_budget:   # one launch (--backends is refused with it): the ranks fit repeats and iterations
        rounds = [(s, dataclasses.replace(p, time_budget=opts.time_budget, fit_repeats=opts.fit_repeats))
                  for s, p in rounds]
    if reshape:  # the command splits or adjusts the launches (p2p: OSU's iteration counts per size class)
        rounds = reshape(rounds)
    rows = table_stream(rounds, opts.output) if table_fn is print_collective_tables else None   # in a pipe
    table_fn = rankstats.with_stats(rows.close if rows else table_fn, opts.output.show_stats, opts.output.fmt)
    run_plan(rounds, opts.output, table_fn, label, plot_fn, judge, rows=rows)
