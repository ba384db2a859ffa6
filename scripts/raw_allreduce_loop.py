"""Minimal hand-written torch.distributed all_reduce timing loop: the reference for bench-overhead.

Run by torchrun: python raw_allreduce_loop.py ITERS WARMUP SIZE [SIZE...]; rank 0 prints
one JSON line per size with the rank-averaged seconds per iteration.
"""
import json
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

iters, warmup, sizes = int(sys.argv[1]), int(sys.argv[2]), [int(s) for s in sys.argv[3:]]
dist.init_process_group("gloo", timeout=timedelta(seconds=300))
for size in sizes:
    buf = torch.ones(size // 4, dtype=torch.float32)
    for _ in range(warmup):
        dist.all_reduce(buf)
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    t = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
    dist.all_reduce(t)
    if dist.get_rank() == 0:
        print(json.dumps({"size": size, "seconds": t.item() / dist.get_world_size()}), flush=True)
dist.destroy_process_group()
