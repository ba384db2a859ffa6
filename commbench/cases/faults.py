"""Test-only faults, injected around a case's runs and its check, never inside the timed loop's code: the tests
make a rank crash, stall, straggle or a result wrong through these variables and see the watchdog, the per-rank
statistics and the check catch it. They act only where the tests set COMMBENCH_TEST_HOOKS=1 in the environment
(commbench.transports.envvars.TEST_SWITCH): no spec, matrix or --env can name a hook without it, and `commbench env`
does not list them.

  COMMBENCH_TEST_EXIT_RANK=RANK          that rank exits (status 17) right after start-up
  COMMBENCH_TEST_SLOW=CASE:SECONDS[,...] a sleep inside every timed run of those cases
  COMMBENCH_TEST_SLOW_RANK=RANK:SECONDS  that rank sleeps before each timed iteration (it arrives late)
  COMMBENCH_TEST_STALL=RANK:OP           that rank stops (alive) before timed operation OP
  COMMBENCH_TEST_SKIP=CASE[,...]         the check's run of those cases does nothing (the check must catch it)
  COMMBENCH_TEST_CORRUPT=CASE            rank 0 corrupts one element of that case's result before the check
"""
import dataclasses
import os
import time

from commbench.cases.case import TOTAL
from commbench.transports.envvars import hooks_on

EXIT_RANK_ENV = "COMMBENCH_TEST_EXIT_RANK"
SLOW_ENV = "COMMBENCH_TEST_SLOW"
SLOW_RANK_ENV = "COMMBENCH_TEST_SLOW_RANK"
STALL_ENV = "COMMBENCH_TEST_STALL"
SKIP_ENV = "COMMBENCH_TEST_SKIP"
CORRUPT_ENV = "COMMBENCH_TEST_CORRUPT"


def _hook(name):
    """The value of a test hook; "" unless the tests turned hooks on."""
    return os.environ.get(name, "") if hooks_on() else ""


def at_start(ctx):
    """EXIT_RANK: this rank ends here when the variable names it."""
    if _hook(EXIT_RANK_ENV) == str(ctx.rank):
        os._exit(17)


def timed_run(ctx, case, run_once, samples=None):
    """run_once (a phase of case, as the timed loops run it) with the faults the variables ask of this case and
    rank; run_once itself when none, so that the loops run nothing of them. SLOW_RANK and STALL act on the
    operations a loop counts for the watchdog (ctx.position: the loops that wait for each run on the host): before
    such a run the loop has marked the iteration's arrival in samples (the list the timed loop is given) and counted
    the operation entered, so a late rank marks its arrival again after its sleep and a stalled one takes the entry
    back: both as if they came before the loop's own steps."""
    delays = dict(item.split(":") for item in _hook(SLOW_ENV).split(",") if ":" in item)
    slow = float(delays.get(case.name, 0))
    late, stall = _rank_number(ctx, SLOW_RANK_ENV), _rank_number(ctx, STALL_ENV)
    if not (slow or late or stall):
        return run_once
    pos, agg, seen = ctx.position, ctx.plan.agg_iters, [ctx.position.entered]

    def faulty(async_op):
        counted, seen[0] = pos.entered != seen[0], pos.entered   # the loop counted this run entered
        if counted and pos.entered == stall:
            pos.entered -= 1
            time.sleep(1e6)
        if counted and late and (pos.entered - 1) % agg == 0:   # the first operation of an iteration (nccl-tests -m)
            time.sleep(late)
            if samples:
                samples[-1] = time.perf_counter()
        if slow:
            time.sleep(slow)
        return run_once(async_op)
    return faulty


def checked(ctx, case, timed):
    """timed as its check sees it, with the faults the variables ask of case: its run does nothing (SKIP), rank 0
    corrupts one element of its result (CORRUPT); timed itself when neither."""
    skip = case.name in _hook(SKIP_ENV).split(",")
    corrupt = _hook(CORRUPT_ENV) == case.name and ctx.rank == 0
    if not (skip or corrupt):
        return timed

    def check():
        if corrupt:
            timed.result().reshape(-1)[0] += 1
        return timed.check()
    return dataclasses.replace(timed, phases={TOTAL: lambda async_op: None} if skip else timed.phases, check=check)


def _rank_number(ctx, name):
    """The number a RANK:NUMBER variable gives this rank (0 when it names another)."""
    rank, _, number = _hook(name).partition(":")
    return float(number) if rank == str(ctx.rank) else 0
