"""The one timed path: every case, every phase, timed and checked the same way.

On GPU, CUDA events around the loop; on CPU, a barrier then perf_counter. The per-iteration time
of every rank is gathered and aggregated as nccl-tests does (average by default, min/max kept).
The check runs on fresh input into a poisoned output, so a result left over from the timed loop
cannot pass.
"""
import dataclasses
import math
import resource
import time

import torch

from benchcore.processes.busy import host_busy_s, host_key, others_fraction
from commbench import rankstats
from commbench.cases import faults
from commbench.cases.case import TOTAL, label
from commbench.cases.collectives import DTYPES, torch_dtype

HOST = host_key()   # ranks with rank 0's key share its host's CPUs (over_ranks)


def time_loop(ctx, run_once, iters, blocking, samples=None, departures=True):
    """Seconds per operation on this rank: iters iterations of the plan's agg_iters operations each. samples, a
    list, gets the per-iteration record commbench/rankstats.py reads: host clock readings at each iteration's
    arrival and departure (blocking loops; without departures, each arrival and the loop's end), from CUDA events
    each iteration's time."""
    plan = ctx.plan
    ops = iters * plan.agg_iters
    ctx.barrier()
    if ctx.device.type == "cuda" and plan.cuda_graph:
        return _graph_loop(ctx, run_once, ops)
    if ctx.device.type == "cuda" and not plan.cpu_time:
        return _event_loop(ctx, run_once, iters, blocking, samples)
    pos = ctx.position
    step = _repeated(run_once, plan.agg_iters, pos) if plan.agg_iters > 1 else run_once
    clock = time.perf_counter   # looked up once, like mark: at 1 us per operation (p2p latency) every step shows
    mark = samples.append if samples is not None else None
    leave = mark if departures else None
    t0 = clock()
    if blocking:  # the watchdog sees each operation entered and left; the marks are the statistics' input
        for _ in range(iters):
            if mark:
                mark(clock())
            pos.entered += 1
            step(False)
            pos.left += 1
            if leave:
                leave(clock())
        if mark and not leave:
            mark(clock())
    else:
        works = [run_once(True) for _ in range(ops)]
        for work in works:
            if work is not None:
                work.wait()
    if ctx.device.type == "cuda":
        torch.cuda.synchronize()
    return (clock() - t0) / ops


def _repeated(run_once, agg, pos):
    """agg operations as one timed iteration (nccl-tests -m), each entered and left for the watchdog as in the
    loop (which counts the first's entry and the last's exit)."""
    def step(async_op):
        for _ in range(agg - 1):
            run_once(async_op)
            pos.left += 1
            pos.entered += 1
        run_once(async_op)
    return step


def _event_loop(ctx, run_once, iters, blocking, samples):
    """CUDA events around the loop; with samples, an event pair per iteration too, read after the loop."""
    agg = ctx.plan.agg_iters
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(iters + 1)] if samples is not None else None
    start.record()
    for i in range(iters):
        if marks:
            marks[i].record()
        for _ in range(agg):
            run_once(False)
            if blocking:
                torch.cuda.synchronize()
    if marks:
        marks[iters].record()
    end.record()
    end.synchronize()
    if marks:
        samples.extend(a.elapsed_time(b) / 1e3 for a, b in zip(marks, marks[1:]))
    return start.elapsed_time(end) / 1e3 / (iters * agg)


def rank_stats(ctx, samples, per_rank=False, per_run=1, departures=True):
    """Per-iteration statistics over every rank (commbench/rankstats.py), gathered outside the timed loop; per
    operation, per_run operations to a run (p2p: the messages of a window)."""
    marks = ctx.device.type != "cuda" or ctx.plan.cpu_time
    keep = rankstats.MAX_ITERS * (2 if marks and departures else 1) + (0 if departures else 1)
    every = ctx.comm.gather_floats(samples[-keep:])
    return rankstats.summarize(every, ctx.rank_hosts, marks, ctx.plan.agg_iters * per_run, per_rank, departures)


def _graph_loop(ctx, run_once, ops):
    """nccl-tests -G: the ops captured once in a CUDA graph, the graph replayed plan.cuda_graph times."""
    graph, stream = torch.cuda.CUDAGraph(), torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream), torch.cuda.graph(graph, stream=stream):
        for _ in range(ops):
            run_once(False)
    torch.cuda.synchronize()
    ctx.barrier()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    t0 = time.perf_counter()
    start.record()
    for _ in range(ctx.plan.cuda_graph):
        graph.replay()
    end.record()
    end.synchronize()
    seconds = time.perf_counter() - t0 if ctx.plan.cpu_time else start.elapsed_time(end) / 1e3
    return seconds / (ops * ctx.plan.cuda_graph)


def over_ranks(ctx, seconds, busy=None):
    """(aggregated, min, max) of every rank's time, aggregated by the plan's --agg, and the share of rank 0's host's
    CPUs that processes other than the ranks took meanwhile (busy: this rank's (host busy s, own CPU s, wall s)
    over the loop; every rank on rank 0's host counts as the run's own; None without busy)."""
    host_busy, own, wall = busy or (0.0, 0.0, 0.0)
    rows = ctx.comm.gather_floats([seconds, host_busy, own, wall, HOST])
    every = [row[0] for row in rows]
    avg, lo, hi = sum(every) / len(every), min(every), max(every)
    first = rows[0]
    others = others_fraction(first[1], sum(row[2] for row in rows if row[4] == first[4]), first[3]) if busy else None
    return {"avg": avg, "min": lo, "max": hi, "rank0": every[0]}[ctx.plan.agg], lo, hi, others


def check(ctx, timed):
    """(wrong elements over every rank, the case's own check fields)."""
    timed.poison()
    timed.refill()  # in place, the input shares the output's storage: poison first, then the input
    timed.phases[TOTAL](False)
    if ctx.device.type == "cuda":
        torch.cuda.synchronize()
    mine, fields = timed.check()
    return ctx.comm.reduce_int(mine, "sum"), fields


def time_source(ctx):
    if ctx.device.type != "cuda" or ctx.plan.cpu_time:
        return "cpu"
    return "cuda_graph" if ctx.plan.cuda_graph else "cuda_events"


def measure_case(ctx, case, cfg, size, shared):
    """One record per phase of case config cfg at size bytes."""
    plan = ctx.plan
    count = size // DTYPES[cfg["dtype"]].bytes
    timed = case.build(ctx, cfg, count, torch_dtype(cfg["dtype"]), shared)
    blocking = ctx.blocking if timed.blocking is None else timed.blocking
    rows, counts = [], []
    pos = ctx.position
    for phase in case.phases:
        samples = [] if plan.iter_stats else None
        run_once = faults.timed_run(ctx, case, timed.phases[phase], samples)
        pos.at("refill", f"{label(case, {**cfg, 'phase': phase})} at {size} B")
        filled = time.perf_counter()
        timed.refill()
        filled = time.perf_counter() - filled
        warmup, iters = plan.warmup, plan.iters
        if plan.time_budget:
            pos.at("calibrating")
            warmup, iters = fit_budget(ctx, run_once, blocking, len(case.phases), size, filled)
        elif warmup:
            pos.at("warm-up")
            time_loop(ctx, run_once, warmup, blocking)
        counts.append({"iters": iters, "warmup": warmup})
        pos.at("timed loop")
        host_before, cpu_before, wall_before = host_busy_s(), time.process_time(), time.perf_counter()
        seconds = time_loop(ctx, run_once, iters, blocking, samples, timed.departures) / timed.per_run
        busy = (host_busy_s() - host_before, time.process_time() - cpu_before, time.perf_counter() - wall_before)
        pos.at("gathering the times")
        t, t_min, t_max, others = over_ranks(ctx, seconds, busy)
        stats = rank_stats(ctx, samples, timed.per_rank, timed.per_run, timed.departures) if samples else {}
        moved = timed.factors[phase] is not None   # a phase that moves no payload (compute) has no bandwidth
        algbw = size / t / 1e9 if moved else None
        rows.append({"phase": phase, "blocking": blocking, "time_source": time_source(ctx), "time_us": t * 1e6,
                     "time_us_min": t_min * 1e6, "time_us_max": t_max * 1e6, "algbw_gbps": algbw,
                     "busbw_gbps": algbw * timed.factors[phase] if moved else None, "others_cpu_fraction": others,
                     **stats, **timed.fields(phase),
                     **({"time_budget_s": plan.time_budget} if plan.time_budget else {})})
    pos.at("check")
    wrong, fields = check(ctx, faults.checked(ctx, case, timed)) if plan.check else (None, {})
    pos.at("peak memory")
    peak = peak_memory(ctx)
    records = [{**ctx.record(case, cfg, row, size_bytes=size, count=count, wrong=wrong, peak_mem_bytes=peak, **fields),
                **ran} for row, ran in zip(rows, counts)]   # the iterations run (a time budget fits them)
    ctx.measured += 1
    if timed.summary:   # figures drawn from every phase, on the whole operation's record
        records[-1].update(timed.summary({rec.get("phase", TOTAL): rec for rec in records}))
    return records


# What a measurement costs beside its loops, in payload fills (commbench/timing.py measure_case and check): the fill
# before the loops, then the check's poison, fill and comparison of the result
FILLS_BESIDE = 4
FLOOR = 16
# The room a pass at 1 iteration must leave beside the calibration's time: on a 2-core VM at load 3-4 the pass after
# the calibration took 1.0-1.3x its time (compare -b 1M -e 256M --time-budget 60: 68 s with no margin)
MARGIN = 1.3


def fit_budget(ctx, run_once, blocking, phases, size, fill_s=0.0):
    """(warm-up, iterations) of a measurement of size bytes under plan.time_budget: its share of the time the launch
    has left, calibrated as pyperf calibrates loops: runs of 1, 2, 4, ... iterations (the warm-up; at most half the
    plan's iterations in all) until one takes a tenth of the share, then the iterations that fill what the share has
    left: at most the plan's (OSU's counts), at least 1. The share is what is left once the least of this measurement
    and of every one still to come is set aside (the largest sizes: 1 warm-up, 1 iteration and the check's operation
    each, and FILLS_BESIDE fills of the payload, both scaled from this one's: fill_s took to fill it), divided among
    them all (at least a FLOOR-th of an equal share of what is left): a budget whose sizes grow keeps room for the
    largest. The ranks agree on every step (the least share, the slowest rank's time), so each runs the same
    iterations."""
    plan = ctx.plan
    steps = plan.steps()
    todo = max(len(steps) - ctx.measured, 1)   # this measurement and those still to come
    took = _agree(ctx, time_loop(ctx, run_once, 1, blocking) * plan.agg_iters, "max")
    per_byte = (3 * took * phases + FILLS_BESIDE * fill_s) / max(size, 1)
    later = sum(st.run for st in steps[-todo:][1:])   # the last todo steps: the largest, as sizes grow
    left = plan.launched_at + plan.time_budget - time.time() - took
    spare = left - per_byte * later - (todo - 1) * ctx.overhead_s - (took + FILLS_BESIDE * fill_s)
    # scaled from a small payload, whose time is mostly latency, the reserve is far too large: each measurement may
    # use a FLOOR-th of an equal share of what is left whatever it says (a small payload's loops cost little)
    share = _agree(ctx, max(spare / todo, left / todo / FLOOR, 0) / phases, "min")
    n, warm, spent = 1, 1, took
    while not (took >= share / 10 or 4 * n > plan.iters):
        n *= 2
        took = _agree(ctx, time_loop(ctx, run_once, n, blocking) * n * plan.agg_iters, "max")
        warm, spent = warm + n, spent + took
    return warm, max(1, min(plan.iters, int((share - spent) / max(took / n, 1e-9))))


class BudgetTooSmall(Exception):
    """The budget cannot hold the least measurement that gives a spread; the message is the line to show."""


def _agree(ctx, seconds, how):
    return ctx.comm.reduce_int(int(max(seconds, 0) * 1e9), how) / 1e9


def fit_repeats(ctx, shared, cases):
    """(the plan to run, the fields of its time_budget event, [(step, its records)] of the first repeat): the first
    repeat runs as the calibration (every step at 1 warm-up and 1 iteration, checked); the repeats after it are as
    many as fit what is left of the launch's budget (plan.fit_repeats: compare, chunked, overlap), each measurement
    then fitting its iterations to its share (fit_budget). The ranks agree on every figure. cases: the registry."""
    plan = ctx.plan
    least, most = plan.fit_repeats
    ctx.plan = dataclasses.replace(plan, iters=1, warmup=1, repeats=1, time_budget=None, fit_repeats=None)
    startup = _agree(ctx, time.time() - plan.launched_at, "max")
    if startup >= plan.time_budget:   # nothing is left to measure in: no calibration
        raise BudgetTooSmall(f"--time-budget {plan.time_budget:g} s is too small: the start-up alone took "
                             f"{startup:.1f} s")
    steps, loops, t0, measured = ctx.plan.steps(), 0.0, time.perf_counter(), []
    room = (plan.time_budget - startup) / least   # this pass and least - 1 more must fit
    try:
        for done, st in enumerate(steps, 1):
            case = cases[st.cfg["case"]]
            measured.append((st, measure_case(ctx, case, st.cfg, st.run, shared.get(case.name))))
            loops += sum(r["time_us"] for r in measured[-1][1]) * 1e-6 * plan.agg_iters
            spent = _agree(ctx, time.perf_counter() - t0, "max")
            if spent > room and done < len(steps):   # the pass alone overruns its room: said now, not at its end
                need = math.ceil(startup + least * spent / done * len(steps))
                raise BudgetTooSmall(f"--time-budget {plan.time_budget:g} s is too small: the start-up took "
                                     f"{startup:.1f} s and {done} of the {len(steps)} measurements at 1 iteration "
                                     f"{spent:.1f} s; {least} passes over them (the least that gives a spread) need "
                                     f"at least {need} s (the sizes grow; or fewer sizes or configs)")
    finally:
        ctx.plan = plan
    wall, loops = _agree(ctx, time.perf_counter() - t0, "max"), _agree(ctx, loops, "max")
    left = _agree(ctx, plan.launched_at + plan.time_budget - time.time(), "min")
    fixed = max(wall - 2 * loops, 0.0)   # what a pass costs beside its timed loops: buffers, checks, gathering

    def cost(iters):   # one pass at iters iterations, warm-up (fit_budget's runs of 1, 2, 4, ...) about half as many
        return fixed + (iters + max(1, iters // 2)) * loops
    if left < (least - 1) * cost(1) * MARGIN:   # a pass as slow as the calibration's would end past the budget
        need = math.ceil(startup + wall + (least - 1) * cost(1) * MARGIN)
        raise BudgetTooSmall(f"--time-budget {plan.time_budget:g} s is too small: the start-up took {startup:.1f} s "
                             f"and a pass over the {len(steps)} measurements at 1 iteration {wall:.1f} s; "
                             f"{least} passes (the least that gives a spread) need about {need} s (or fewer sizes "
                             "or configs)")
    repeats = max(least, min(most, 1 + int(left // cost(plan.iters))))
    ctx.overhead_s = fixed / len(steps)   # fit_budget leaves it to every measurement beside its share
    fields = {"repeats": repeats, "seconds": round(wall, 2), "time_budget_s": plan.time_budget}
    return dataclasses.replace(plan, repeats=repeats, fit_repeats=None), fields, measured


def peak_memory(ctx):
    """The most memory any rank has held so far: peak RSS on CPU, peak allocated on the GPU."""
    if ctx.device.type == "cuda":
        mine = torch.cuda.max_memory_allocated(ctx.device)
    else:
        mine = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return ctx.comm.reduce_int(mine, "max")
