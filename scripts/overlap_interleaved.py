"""commbench's overlap phases against bare torch loops of the same work, interleaved in one launch on the same
buffers and GEMM shapes (scripts/bench-overlap).

Run by torchrun (Gloo): python overlap_interleaved.py ROUNDS ITERS THREADS SIZE [SIZE ...]. Per size and pattern
(ddp with 4 buckets, pipelined with 4 chunks; compute calibrated to ratio 1 by commbench), ROUNDS rounds, the order
of the two sides alternating per round:
  commbench  its four phases as commbench.timing.measure_case runs them, in its order (comm, compute, sequential,
             total), each refilled, warmed up (1 run) and timed (ITERS runs) by commbench.timing.time_loop;
  bare       hand-written loops of the same work: THREADS-thread torch.matmul calls of the kernel's shape (as many as
             the pattern's steps), the pattern's communication alone, and the pattern overlapped.
Rank 0 prints one JSON line per size and pattern: every round's rank-averaged seconds per run of each (and the CPU
seconds of each compute loop: the work's cost whatever share of the cores the scheduler gave it), and the load
average at the line's end.
"""
import collections
import json
import os
import sys
import time
from types import SimpleNamespace

import torch
import torch.distributed as dist

from commbench.cases.case import TOTAL
from commbench.cases.registry import CASES
from commbench.launch.liveness import Position
from commbench.timing import time_loop
from commbench.transports.torch_dist import torch_primitives

STEPS = 4
dist.init_process_group("gloo")
rank, n = dist.get_rank(), dist.get_world_size()
plan = SimpleNamespace(agg_iters=1, cuda_graph=0, cpu_time=False, iters=1, warmup=0)
ctx = SimpleNamespace(plan=plan, device=torch.device("cpu"), rank=rank, world_size=n, position=Position(),
                      comm=torch_primitives(torch.device("cpu")), barrier=dist.barrier, node_of=[0] * n)


def bare_ddp(buf, call):
    """DDP's buckets by hand: call() (a GEMM, or nothing), then bucket i's all_reduce async; all waited at the end."""
    edges = [round(i * buf.numel() / STEPS) for i in range(STEPS + 1)]
    works = []
    for lo, hi in zip(edges, edges[1:]):
        call()
        works.append(dist.all_reduce(buf[lo:hi], async_op=True))
    for work in works:
        work.wait()


def bare_pipelined(buf, call):
    """Megatron's pipelined all_gather by hand: chunk i+1 gathered while call() (the GEMM of chunk i) runs."""
    per = buf.numel() // STEPS
    chunks = [buf[i * per:(i + 1) * per] for i in range(STEPS)]
    mine = [c[rank * (per // n):(rank + 1) * (per // n)] for c in chunks]
    pending = collections.deque([dist.all_gather_into_tensor(chunks[0], mine[0], async_op=True)])
    for i in range(STEPS):
        pending.popleft().wait()
        if i + 1 < STEPS:
            pending.append(dist.all_gather_into_tensor(chunks[i + 1], mine[i + 1], async_op=True))
        call()


def timed(fn, iters, cpu=None):
    """Seconds per run of fn over iters runs after one warm-up run, as time_loop times a phase; cpu, a list, gets
    this process's CPU seconds per run (what the work cost, whatever the scheduler gave it)."""
    fn()
    dist.barrier()
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(iters):
        fn()
    if cpu is not None:
        cpu.append((time.process_time() - c0) / iters)
    return (time.perf_counter() - t0) / iters


def commbench_phases(t, iters):
    """{phase: seconds per run}: the phases in commbench's order, each refilled, warmed up and timed; and the compute
    phase's CPU seconds per run."""
    out = {}
    for phase in ("comm", "compute", "sequential", TOTAL):
        t.refill()
        time_loop(ctx, t.phases[phase], 1, True)
        c0 = time.process_time()
        out[phase] = time_loop(ctx, t.phases[phase], iters, True)
        if phase == "compute":
            out["compute_cpu"] = (time.process_time() - c0) / iters
        t.fields(phase)   # read and forget the phase's kernel times, as measure_case does
    return out


def averaged(seconds):
    mine = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(mine)
    return mine.item() / n


# the layouts of the bare loops above: ddp's buckets all outstanding (as commbench's ddp), one gather in flight
LAYOUT = {"ddp": lambda size: {"buckets": STEPS}, "pipelined": lambda size: {"chunk_bytes": size // STEPS,
                                                                            "inflight": 1}}
rounds, iters, threads = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
for size in map(int, sys.argv[4:]):
    for name, bare in (("ddp", bare_ddp), ("pipelined", bare_pipelined)):
        cfg = {"case": name, "dtype": "float32", "in_place": True, "compute_kernel": "gemm", "compute_threads": threads,
               "gemm": None, "compute_ratio": 1.0, **LAYOUT[name](size)}
        case = CASES[name]
        shared = case.setup(ctx, [cfg]) if case.setup else None
        t = case.build(ctx, cfg, size // 4, torch.float32, shared)   # sets torch's threads to `threads`, calibrates
        m = t.fields(TOTAL)["gemm_m"]
        a, w, out = torch.ones(m, m), torch.ones(m, m), torch.empty(m, m)
        buf = torch.zeros(size // 4)
        matmul = lambda: torch.matmul(a, w, out=out)  # noqa: E731
        cpu = []

        def bare_side():
            return {"compute": timed(lambda: [matmul() for _ in range(STEPS)], iters, cpu), "compute_cpu": cpu.pop(),
                    "comm": timed(lambda: bare(buf, lambda: None), iters),
                    TOTAL: timed(lambda: bare(buf, matmul), iters)}
        sides = {"commbench": lambda: commbench_phases(t, iters), "bare": bare_side}
        res = {"size": size, "pattern": name, "gemm": m, "threads": torch.get_num_threads(),
               **{f"{side}_{phase}": [] for side in sides
                  for phase in ("comm", "compute", "compute_cpu", "sequential", TOTAL)}}
        for i in range(rounds):
            for side in (("commbench", "bare") if i % 2 == 0 else ("bare", "commbench")):
                for phase, seconds in sides[side]().items():
                    res[f"{side}_{phase}"].append(averaged(seconds))
        res["load"] = os.getloadavg()[0]
        if rank == 0:
            print(json.dumps(res), flush=True)
dist.destroy_process_group()
os._exit(0)
