"""commbench's overlap patterns against hand-written torch.distributed loops of the same patterns, interleaved in
one launch on the same buffers and GEMM shapes (scripts/bench-overlap).

Run by torchrun (2 ranks, Gloo): python overlap_interleaved.py ROUNDS ITERS SIZE [SIZE ...]. Per size and pattern
(ddp with 4 buckets, pipelined with 4 chunks; compute calibrated to ratio 1 by commbench), ROUNDS pairs of blocks of
ITERS runs, the order alternating per pair: commbench's overlapped phase through commbench.timing.time_loop, then a
bare loop written here; likewise commbench's compute phase against a bare torch.matmul loop of the same shape.
Rank 0 prints one JSON line per size and pattern with every block's rank-averaged seconds per run.
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

dist.init_process_group("gloo")
torch.set_num_threads(1)
rank, n = dist.get_rank(), dist.get_world_size()
plan = SimpleNamespace(agg_iters=1, cuda_graph=0, cpu_time=False, iters=1, warmup=0)
ctx = SimpleNamespace(plan=plan, device=torch.device("cpu"), rank=rank, world_size=n, position=Position(),
                      comm=torch_primitives(torch.device("cpu")), barrier=dist.barrier, node_of=[0] * n)


def bare_ddp(buf, a, w, out, steps):
    """DDP's buckets by hand: GEMM i, then bucket i's all_reduce async; all waited at the end."""
    edges = [round(i * buf.numel() / steps) for i in range(steps + 1)]
    works = []
    for lo, hi in zip(edges, edges[1:]):
        torch.matmul(a, w, out=out)
        works.append(dist.all_reduce(buf[lo:hi], async_op=True))
    for work in works:
        work.wait()


def bare_pipelined(buf, a, w, out, steps):
    """Megatron's pipelined all_gather by hand: chunk i+1 gathered while the GEMM of chunk i runs."""
    per = buf.numel() // steps
    chunks = [buf[i * per:(i + 1) * per] for i in range(steps)]
    mine = [c[rank * (per // n):(rank + 1) * (per // n)] for c in chunks]
    pending = collections.deque([dist.all_gather_into_tensor(chunks[0], mine[0], async_op=True)])
    for i in range(steps):
        pending.popleft().wait()
        if i + 1 < steps:
            pending.append(dist.all_gather_into_tensor(chunks[i + 1], mine[i + 1], async_op=True))
        torch.matmul(a, w, out=out)


def timed(fn, iters):
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


# the layouts of the bare loops above: ddp's buckets all outstanding (as commbench's ddp), one gather in flight
LAYOUT = {"ddp": lambda size: {"buckets": 4}, "pipelined": lambda size: {"chunk_bytes": size // 4, "inflight": 1}}
rounds, iters = int(sys.argv[1]), int(sys.argv[2])
for size in map(int, sys.argv[3:]):
    for name, bare in (("ddp", bare_ddp), ("pipelined", bare_pipelined)):
        cfg = {"case": name, "dtype": "float32", "in_place": True, "compute_kernel": "gemm", "compute_threads": 1,
               "gemm": None, "compute_ratio": 1.0, **LAYOUT[name](size)}
        case = CASES[name]
        shared = case.setup(ctx, [cfg]) if case.setup else None
        t = case.build(ctx, cfg, size // 4, torch.float32, shared)
        t.refill()
        m = t.fields(TOTAL)["gemm_m"]
        a, w, out = torch.ones(m, m), torch.ones(m, m), torch.empty(m, m)
        buf = torch.zeros(size // 4)
        sides = {"commbench": lambda: time_loop(ctx, t.phases[TOTAL], iters, True),
                 "bare": lambda: timed(lambda: bare(buf, a, w, out, 4), iters),
                 "commbench_compute": lambda: time_loop(ctx, t.phases["compute"], iters, True),
                 "bare_compute": lambda: timed(lambda: [torch.matmul(a, w, out=out) for _ in range(4)], iters)}
        for side in sides.values():
            side()   # warm-up
        res = {"size": size, "pattern": name, "gemm": m, **{k: [] for k in sides}}
        for i in range(rounds):
            for pair in (("commbench", "bare"), ("commbench_compute", "bare_compute")):
                for key in pair if i % 2 == 0 else pair[::-1]:
                    mine = torch.tensor([sides[key]()], dtype=torch.float64)
                    dist.all_reduce(mine)
                    res[key].append(mine.item() / n)
        if rank == 0:
            print(json.dumps(res), flush=True)
dist.destroy_process_group()
os._exit(0)
