"""commbench's timed path against a bare mpi4py loop, interleaved in one launch on one buffer (scripts/bench-mpi).

Run by mpirun: python mpi_path_interleaved.py ROUNDS SIZE:ITERS [SIZE:ITERS ...]. Per size, ROUNDS pairs of blocks
of ITERS in-place float32 all_reduces, the order alternating per pair: one block through commbench.timing.time_loop
and the all_reduce case's call as the case binds it (commbench/cases/collectives.py) on commbench's MPI table, one bare
comm.Allreduce loop. Rank 0 prints one JSON line per
size with every block's rank-averaged seconds per operation. Both sides share the launch, the cores and the memory,
so their ratio is the cost of commbench's path alone, free of what differs from one launch to the next.
"""
import json
import sys
import time
from functools import partial
from types import SimpleNamespace

import torch
from mpi4py import MPI

from commbench.cases.collectives import COLLECTIVES
from commbench.launch.liveness import Position
from commbench.timing import time_loop
from commbench.transports import mpi

comm = MPI.COMM_WORLD
table = mpi.primitives(MPI, comm, torch.device("cpu"))
ctx = SimpleNamespace(plan=SimpleNamespace(agg_iters=1, cuda_graph=0, cpu_time=False), device=torch.device("cpu"),
                      barrier=comm.Barrier, position=Position(), rank=comm.Get_rank())


def bare(buf, iters):
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    return (time.perf_counter() - t0) / iters


rounds = int(sys.argv[1])
for arg in sys.argv[2:]:
    size, iters = map(int, arg.split(":"))
    buf = table.buffer(torch.zeros(size // 4))   # zeros stay zeros: no overflow however many sums
    run = COLLECTIVES["all_reduce"].bind(table, buf, buf, "sum", None)
    sides = {"commbench": partial(time_loop, ctx, lambda a: run(async_op=a), iters, True),
             "bare": partial(bare, buf.num, iters)}
    for side in sides.values():
        side()   # warm-up
    out = {"size": size, "iters": iters, "commbench": [], "bare": []}
    for i in range(rounds):
        for name in ("commbench", "bare") if i % 2 == 0 else ("bare", "commbench"):
            out[name].append(comm.allreduce(sides[name]()) / comm.Get_size())
    if comm.Get_rank() == 0:
        print(json.dumps(out), flush=True)
