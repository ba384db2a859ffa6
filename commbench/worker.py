"""The program every rank runs (launched by torchrun or mpirun): `python -m commbench.worker --plan-file PATH`.

One loop over the plan: every size, then --repeats rounds of every case config in turn (interleaved,
each round starting one config later, so drift hits every config alike), each a separate measurement
by the one timed path. On the record node, local rank 0 hands each
record to its launcher through the launch directory (flushed per record). Errors end the rank
with one `commbench-worker:` line on stderr, which the launcher shows. Exit 3: wrong results.
"""
import argparse
import gc
import json
import os
import sys

import torch.distributed as dist

from benchcore.processes import procs
from benchcore.results import schema
from benchcore.results.records import RecordWriter, hostname
from commbench.cases import faults
from commbench.cases.registry import CASES
from commbench.context import Context
from commbench.health.beside import Beside
from commbench.launch import mpirun
from commbench.launch.liveness import CHANNEL, EXIT_HANG, RECORD_NODE_ENV, STATUS_ENV, WORKER_NAME, Liveness
from commbench.plan import Plan
from commbench.timing import BudgetTooSmall, fit_repeats, measure_case
from commbench.transports import mpi

EXIT_WRONG = 3


def run_plan(ctx, emit, announce=lambda index: None, note=lambda fields: None):
    """Measure every step of the plan (Plan.steps: sizes, repeats, configs); emit(record) each; announce(i) before
    step i, outside every timed loop (the launcher shows it); returns the total wrong count. A plan whose time
    budget chooses the repeats runs the first as its calibration (timing.fit_repeats) and note(fields) says what it
    chose."""
    plan, wrong = ctx.plan, 0
    names = list(dict.fromkeys(cfg["case"] for cfg in plan.configs))
    shared = {name: CASES[name].setup(ctx, [c for c in plan.configs if c["case"] == name])
              for name in names if CASES[name].setup}
    first = []   # a time budget's calibration: the first repeat, at 1 iteration
    if plan.time_budget and plan.fit_repeats:
        announce(-1)
        ctx.plan, fields, first = fit_repeats(ctx, shared, CASES)
        plan = ctx.plan
        note(fields)

    def emitted(step, recs):
        for rec in recs:
            emit({**rec, "requested_bytes": step.size, **({"cycle": step.cycle} if plan.cycles > 1 else {}),
                  **({"repeat": step.repeat} if plan.repeats > 1 else {})})
        return sum(rec["wrong"] or 0 for rec in recs)
    for step, recs in first:
        wrong += emitted(step, recs)
    beside = Beside(ctx)    # the GPUs' health beside each measurement (a sampler per node, off the timed path)
    try:
        for i, step in enumerate(plan.steps()):
            if first and step.repeat == 0:
                continue
            announce(i)
            case = CASES[step.cfg["case"]]
            wrong += emitted(step, beside.measured(
                lambda: measure_case(ctx, case, step.cfg, step.run, shared.get(case.name))))
    finally:
        beside.close()
    return wrong


def hang(report, live, writer, ctx):
    """Rank 0's watchdog fired (on the heartbeat thread): the report as worker lines and a `hang` record, then the
    run ends with EXIT_HANG (the main thread is stuck in the collective; records already written are kept)."""
    lines, ranks = report
    end_run(lines + [f"environment in effect: {json.dumps(ctx.env, sort_keys=True)}"], live, writer, EXIT_HANG,
            schema.event("commbench", "hang", lines[0], run_id=ctx.plan.run_id, ranks=ranks, env=ctx.env))


def end_run(lines, live, writer, code, record=None):
    """From the watchdog (a hang, a peer that died): the lines for the user, the record, then exit `code` while the
    main thread is still inside the collective (records already written are kept)."""
    try:
        for line in lines:
            print(f"commbench-worker: {line}", file=sys.stderr, flush=True)
        if writer:
            if record:
                writer.write(record)
            writer.close()
    except (OSError, ValueError):  # the main thread's timeout came first and closed the writer: it still ends here
        pass
    finally:
        live.end(code)
        os._exit(code)


def read_plan(path):
    """The plan the launcher wrote; one worker line, exit 1, where this host cannot read it (no shared directory,
    no sbcast)."""
    try:
        with open(path) as f:
            return Plan.from_json(f.read())
    except (OSError, ValueError, TypeError) as exc:
        rank = os.environ.get("RANK") or mpirun.rank_env().get("RANK", "?")
        why = exc.strerror if isinstance(exc, OSError) else f"not a commbench plan ({exc})"
        print(f"commbench-worker: rank {rank} on {hostname()}: cannot read the plan file {path}: {why}",
              file=sys.stderr, flush=True)
        sys.exit(1)


def main(argv=None):
    procs.set_name(WORKER_NAME)   # forked by the agent, a rank shares its command line
    parser = argparse.ArgumentParser(prog="commbench.worker")
    parser.add_argument("--plan-file", required=True, help="JSON plan file written by the commbench launcher")
    plan = read_plan(parser.parse_args(argv).plan_file)
    if plan.backend == "mpi":  # mpirun / srun name the ranks their own way
        os.environ.update(mpirun.rank_env())
    rank = os.environ.get("RANK", "?")
    code = 0
    live = Liveness(hostname(), plan.hang_timeout)  # heartbeats from before the process group exists
    try:
        ctx = Context(plan)
        ctx.position = live.position
        faults.at_start(ctx)
        writes = os.environ.get(RECORD_NODE_ENV, "1") == "1" and ctx.local_rank == 0 and os.environ.get(STATUS_ENV)
        writer = RecordWriter(os.path.join(os.environ[STATUS_ENV], CHANNEL)) if writes else None
        live.on_hang = lambda report: hang(report, live, writer, ctx)
        live.on_dead = lambda lines: end_run(lines, live, writer, 1)

        def emit(rec):
            if writer:
                writer.write(rec)
            live.progress(1)
        def note(fields):   # what a time budget chose: an event record (the launcher says it, --out keeps it)
            live.announce(-1, fields["repeats"])
            if writer:
                writer.write(schema.event("commbench", "time_budget", f"{fields['repeats']} repeats per size",
                                          run_id=ctx.plan.run_id, **fields))
        try:
            code = EXIT_WRONG if run_plan(ctx, emit, live.announce, note) else 0
        finally:
            live.wait_for_watchdog()
            if writer:
                writer.close()
    except BudgetTooSmall as exc:   # every rank says the same line (the launcher shows it once)
        print(f"commbench-worker: {exc}", file=sys.stderr, flush=True)
        code = 1
    except Exception as exc:  # one line for the user; the launcher shows it
        for line in live.diagnose():  # first the peer behind it, when one stopped beating
            print(f"commbench-worker: {line}", file=sys.stderr, flush=True)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        first = first.split(" This is typically caused")[0]  # Gloo's boilerplate
        print(f"commbench-worker: rank {rank} on {hostname()}: {type(exc).__name__}: {first}",
              file=sys.stderr, flush=True)
        code = 1
        if plan.backend == "mpi":  # MPI has no timeout: the others would wait forever in their next collective
            live.close(code)
            mpi.abort(code)
    finally:
        live.close(code)
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # a dead peer may leave nothing to tear down
                pass
        gc.collect()
    sys.exit(code)


if __name__ == "__main__":
    main()
