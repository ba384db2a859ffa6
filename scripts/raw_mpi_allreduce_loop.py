"""Minimal hand-written mpi4py all_reduce timing loop: the reference for scripts/bench-mpi.

Run by mpirun: python raw_mpi_allreduce_loop.py torch|numpy ITERS WARMUP SIZE [SIZE...]; rank 0 prints one
JSON line per size with the rank-averaged seconds per iteration, in place on a float32 buffer: a torch CPU
tensor's memory (tensor.numpy(), as commbench moves it) or a NumPy array's (which NumPy backs with transparent
huge pages where the kernel leaves them to madvise; torch's allocator does not ask for them).
"""
import json
import sys
import time

import numpy as np
from mpi4py import MPI

comm = MPI.COMM_WORLD
kind, iters, warmup, sizes = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), [int(s) for s in sys.argv[4:]]
if kind == "torch":
    import torch
for size in sizes:
    buf = torch.ones(size // 4, dtype=torch.float32).numpy() if kind == "torch" else np.ones(size // 4, np.float32)
    for _ in range(warmup):
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(iters):
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
    seconds = comm.allreduce((time.perf_counter() - t0) / iters) / comm.Get_size()
    if comm.Get_rank() == 0:
        print(json.dumps({"size": size, "seconds": seconds}), flush=True)
