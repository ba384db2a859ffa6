"""Minimal hand-written torch.distributed all_reduce timing loop: the reference for bench-overhead, and the count
of Gloo's sends per call the model's gloo_segments rests on (commbench/model/alphabeta.py).

Run by torchrun: python raw_allreduce_loop.py ITERS WARMUP SIZE [SIZE...]; rank 0 prints one JSON line per size
with the rank-averaged seconds per iteration and write system calls per iteration (Linux's /proc/self/io syscw:
every socket send Gloo's threads make; nothing else of this process writes while the loop runs).
"""
import json
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def writes():
    with open("/proc/self/io") as f:
        return int(next(ln.split()[1] for ln in f if ln.startswith("syscw:")))


iters, warmup, sizes = int(sys.argv[1]), int(sys.argv[2]), [int(s) for s in sys.argv[3:]]
dist.init_process_group("gloo", timeout=timedelta(seconds=300))
for size in sizes:
    buf = torch.ones(max(1, size // 4), dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(buf)
    dist.barrier()
    w0, t0 = writes(), time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    t = torch.tensor([(time.perf_counter() - t0) / iters, (writes() - w0) / iters], dtype=torch.float64)
    dist.all_reduce(t)
    if dist.get_rank() == 0:
        n = dist.get_world_size()
        print(json.dumps({"size": size, "seconds": t[0].item() / n, "writes_per_call": t[1].item() / n}), flush=True)
dist.destroy_process_group()
