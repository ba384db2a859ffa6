"""commbench's p2p ping-pong against mpi4py.bench's, interleaved in one launch (scripts/bench-mpi, part 6).

Run by mpirun on 2 ranks: python mpi_pingpong_interleaved.py BLOCKS ITERS SIZE [SIZE ...]. Per size, BLOCKS pairs of
blocks of ITERS ping-pongs, the order alternating per pair: one through commbench's timed loop
(commbench.timing.time_loop, marks as in a record) and the p2p latency case as commbench builds it on its MPI
table, one by mpi4py.bench's own pingpong (`-l ITERS -s 10`). Rank 0 prints one JSON line per size: each side's
block averages (one-way: half the round trip; commbench times the whole loop as OSU does, mpi4py.bench each
ping-pong apart) and every iteration's one-way time (commbench: between its clock marks; mpi4py.bench: the list it
averages, read where it hands it to statistics.mean, after its timing). Both sides share the launch and the cores.
"""
import json
import statistics
import sys
from types import SimpleNamespace

import torch
from mpi4py import MPI
from mpi4py.bench import pingpong

from commbench.cases.p2p import P2P_CASES
from commbench.launch.liveness import Position
from commbench.timing import time_loop
from commbench.transports import mpi

world = MPI.COMM_WORLD
table = mpi.primitives(MPI, world, torch.device("cpu"))
ctx = SimpleNamespace(plan=SimpleNamespace(agg_iters=1, cuda_graph=0, cpu_time=False), device=torch.device("cpu"),
                      barrier=world.Barrier, position=Position(), rank=world.Get_rank(), comm=table)
seen = []
mean = statistics.mean
statistics.mean = lambda values: seen.append(list(values)) or mean(values)   # mpi4py.bench's per-iteration times


def ours(run, per_run, iters):
    marks = []
    avg = time_loop(ctx, run, iters, True, marks, departures=False) / per_run
    return avg, [(b - a) / per_run for a, b in zip(marks, marks[1:])]


def theirs(size, iters):
    avg = pingpong(world, ["-m", str(size), "-n", str(size), "-l", str(iters), "-s", "10"], verbose=False)[0][1]
    return avg, seen.pop()


blocks, iters = int(sys.argv[1]), int(sys.argv[2])
for size in map(int, sys.argv[3:]):
    timed = P2P_CASES["p2p_latency"].build(ctx, {"window": 1, "dtype": "uint8"}, size, torch.uint8, None)
    run = timed.phases["total"]
    sides = {"commbench": lambda: ours(run, timed.per_run, iters), "mpi4py": lambda: theirs(size, iters)}
    time_loop(ctx, run, 100, True)   # warm-up, as mpi4py.bench's skip
    out = {"size": size, "iters": iters}
    for i in range(blocks):
        for name in ("commbench", "mpi4py") if i % 2 == 0 else ("mpi4py", "commbench"):
            avg, each = sides[name]()
            out.setdefault(name, []).append(avg * 1e6)
            out.setdefault(name + "_each", []).extend(t * 1e6 for t in each)
    if world.Get_rank() == 0:
        print(json.dumps(out), flush=True)
