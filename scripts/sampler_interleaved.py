"""The GPU sampler's cost on a measurement, in one launch (bench-overhead --sampler-overhead): Gloo all_reduce blocks
alternate between the sampler beside them (commbench/health/beside.py as the worker uses it: the NVML thread on local
rank 0, the counters read and the nodes' summaries gathered around the block) and none, the order flipped every
pair so drift hits both alike; per size the median of the pairs' busbw ratios (on/off) and their range.

Run by torchrun: python sampler_interleaved.py PAIRS BLOCK_SECONDS SIZE [SIZE...]; rank 0 prints one JSON line per
size. NVML comes from wherever commbench/health/boundary.py finds it (bench-overhead points it at a capture).
"""
import json
import os
import statistics
import sys
import time
from datetime import timedelta
from types import SimpleNamespace

import torch
import torch.distributed as dist

from commbench.health.beside import Beside

pairs, block_s, sizes = int(sys.argv[1]), float(sys.argv[2]), [int(s) for s in sys.argv[3:]]
dist.init_process_group("gloo", timeout=timedelta(seconds=300))
ctx = SimpleNamespace(local_rank=int(os.environ.get("LOCAL_RANK", "0")), plan=SimpleNamespace(backend="gloo"))


def block(buf, iters):
    """Seconds per all_reduce over iters, the same on every rank (rank 0's, broadcast)."""
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(buf)
    t = torch.tensor([(time.perf_counter() - t0) / iters], dtype=torch.float64)
    dist.broadcast(t, 0)
    return t.item()


def sampled(buf, iters):
    beside = Beside(ctx)
    try:
        (rec,) = beside.measured(lambda: [{"t": block(buf, iters)}])
    finally:
        beside.close()
    return rec["t"], "gpu_health" in rec


for size in sizes:
    buf = torch.ones(max(1, size // 4), dtype=torch.float32)
    block(buf, 3)
    per = block(buf, 5)
    iters = max(5, int(block_s / per))
    ratios, carried = [], True
    for i in range(pairs):
        order = ("on", "off") if i % 2 == 0 else ("off", "on")
        times = {}
        for mode in order:
            if mode == "on":
                times["on"], got = sampled(buf, iters)
                carried &= got
            else:
                times["off"] = block(buf, iters)
        ratios.append(times["off"] / times["on"])   # busbw on / busbw off
    if dist.get_rank() == 0:
        print(json.dumps({"size": size, "iters": iters, "pairs": pairs, "median": statistics.median(ratios),
                          "low": min(ratios), "high": max(ratios), "sampled": carried}), flush=True)
dist.destroy_process_group()
