"""Minimal hand-written mpi4py all_reduce timing loop: the reference for scripts/bench-mpi.

Run by mpirun: python raw_mpi_allreduce_loop.py ITERS WARMUP SIZE [SIZE...]; rank 0 prints one JSON
line per size with the rank-averaged seconds per iteration (in place on a float32 NumPy buffer).
"""
import json
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
iters, warmup, sizes = int(sys.argv[1]), int(sys.argv[2]), [int(s) for s in sys.argv[3:]]
for size in sizes:
    buf = np.ones(size // 4, dtype=np.float32)
    for _ in range(warmup):
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    seconds = comm.allreduce((time.perf_counter() - t0) / iters) / comm.Get_size()
    if comm.Get_rank() == 0:
        print(json.dumps({"size": size, "seconds": seconds}), flush=True)
