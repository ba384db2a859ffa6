"""The one timed path: every case, every phase, timed and checked the same way.

On GPU, CUDA events around the loop; on CPU, a barrier then perf_counter. The per-iteration time
of every rank is gathered and aggregated as nccl-tests does (average by default, min/max kept).
The check runs on fresh input into a poisoned output, so a result left over from the timed loop
cannot pass.
"""
import os
import time

import torch
import torch.distributed as dist

from benchcore.torchrun import rank_sum
from commbench.case import TOTAL
from commbench.collectives import DTYPES, torch_dtype

CORRUPT_ENV = "COMMBENCH_TEST_CORRUPT"   # test only: corrupt this case's result on rank 0 before the check
SKIP_ENV = "COMMBENCH_TEST_SKIP"         # test only: this case's check run does nothing


def time_loop(ctx, run_once, iters, blocking):
    """Seconds per iteration on this rank."""
    ctx.barrier()
    if ctx.device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            run_once(False)
            if blocking:
                torch.cuda.synchronize()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    t0 = time.perf_counter()
    if blocking:
        for _ in range(iters):
            run_once(False)
    else:
        works = [run_once(True) for _ in range(iters)]
        for work in works:
            if work is not None:
                work.wait()
    return (time.perf_counter() - t0) / iters


def over_ranks(ctx, seconds):
    """(aggregated, min, max) of every rank's time, aggregated by the plan's --agg."""
    mine = torch.tensor([seconds], dtype=torch.float64, device=ctx.device)
    every = torch.empty(ctx.world_size, dtype=torch.float64, device=ctx.device)
    dist.all_gather_into_tensor(every, mine)
    every = every.cpu().tolist()
    avg, lo, hi = sum(every) / len(every), min(every), max(every)
    return {"avg": avg, "min": lo, "max": hi}[ctx.plan.agg], lo, hi


def check(ctx, case, timed):
    """(wrong elements over every rank, the case's own check fields)."""
    timed.poison()
    timed.refill()  # in place, the input shares the output's storage: poison first, then the input
    if os.environ.get(SKIP_ENV) != case.name:
        timed.phases[TOTAL](False)
    if ctx.device.type == "cuda":
        torch.cuda.synchronize()
    if os.environ.get(CORRUPT_ENV) == case.name and ctx.rank == 0:
        timed.result().reshape(-1)[0] += 1
    mine, fields = timed.check()
    return rank_sum(mine, ctx.device), fields


def measure_case(ctx, case, cfg, size, shared):
    """One record per phase of case config cfg at size bytes."""
    plan = ctx.plan
    count = size // DTYPES[plan.dtype].bytes
    timed = case.build(ctx, cfg, count, torch_dtype(plan.dtype), shared)
    blocking = ctx.blocking if timed.blocking is None else timed.blocking
    rows = []
    for phase in case.phases:
        run_once = timed.phases[phase]
        timed.refill()
        if plan.warmup:
            time_loop(ctx, run_once, plan.warmup, blocking)
        t, t_min, t_max = over_ranks(ctx, time_loop(ctx, run_once, plan.iters, blocking))
        algbw = size / t / 1e9
        rows.append({"phase": phase, "blocking": blocking, "time_us": t * 1e6, "time_us_min": t_min * 1e6,
                     "time_us_max": t_max * 1e6, "algbw_gbps": algbw, "busbw_gbps": algbw * timed.factors[phase],
                     **timed.fields(phase)})
    wrong, fields = check(ctx, case, timed) if plan.check else (None, {})
    return [ctx.record(case, cfg, row, size_bytes=size, count=count, wrong=wrong, **fields) for row in rows]
