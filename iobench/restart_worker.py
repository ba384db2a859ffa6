"""One process of model-ckpt's restart (--restart-ranks), started by torchrun: a job coming back after a failure.

The parent notes the time before starting torchrun (--t0); each rank imports torch, joins the process group, rank 0
drops the checkpoint from the page cache (posix_fadvise: a node that never read it), and every rank allocates its
rows of every tensor of the checkpoint, each split Shard(0) over the restart's ranks as FSDP holds them (DTensors):
the checkpoint was saved as whole tensors, each by the rank that held it, so DCP reshards: it reads each rank's rows
out of whichever file holds the tensor, onto however many ranks restart. One training-like step
(iobench.savemodes.Steps) follows; restart = the last rank's first step - t0. Then, off the clock, every rank's rows
are compared exactly with the same rows of what was saved (model_worker.tensors regenerates it), and rank 0's mount
counter (iobench.moved) says whether storage served the load.
"""
import argparse
import datetime
import json
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

from benchcore.files import write_new_text
from benchcore.processes.torchrun import rank_sum
from iobench import models, moved, savemodes
from iobench.model_worker import DTYPES, flat, tensors
from iobench.torch_worker import drop_cache


def piece(n, rank, world):
    """(start, length) of rank's rows of an n-row tensor split Shard(0) over world ranks (torch.chunk's split)."""
    per = -(-n // world)
    start = min(rank * per, n)
    return start, min(per, n - start)


def empty_state(shard, mesh):
    """The tensors model_worker.tensors gives a shard, unfilled and split over the restart's ranks (Shard(0), as FSDP
    holds them): what a restarting job allocates before it loads; DCP reads each rank's rows out of the one file
    that holds the whole tensor."""
    dtype, rank, world = DTYPES[shard.kind], mesh.get_local_rank(), mesh.size()
    elements, per = max(1, shard.nbytes // dtype.itemsize), models.MAX_TENSOR_BYTES // dtype.itemsize
    state = {}
    for i, offset in enumerate(range(0, elements, per)):
        n = min(per, elements - offset)
        local = torch.empty(piece(n, rank, world)[1], dtype=dtype)
        state[f"{shard.kind}.{i}"] = DTensor.from_local(local, mesh, [Shard(0)], run_check=False, shape=(n,),
                                                        stride=(1,))
    return state


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", required=True, help="the checkpoint to load")
    parser.add_argument("--result", required=True)
    parser.add_argument("--t0", type=float, required=True, help="time.time() when the parent started torchrun")
    parser.add_argument("--model", required=True)
    for name in ("tp", "pp", "dp", "zero"):
        parser.add_argument(f"--{name}", type=int)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--step", type=int, default=savemodes.DEFAULT_STEP)
    parser.add_argument("--timeout", type=int, default=600)
    args = parser.parse_args()

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    layout = models.layout(args.model, args.tp, args.pp, args.dp, args.zero, args.scale)
    mesh = init_device_mesh("cpu", (world,))
    counter = moved.counter_for(args.dir) if rank == 0 else None
    if rank == 0:   # the job restarts on nodes that never read it: nothing of it in their page cache
        drop_cache(args.dir)
    before = counter.sample() if counter else None
    dist.barrier()
    target = flat([(s, empty_state(s, mesh)) for s in layout.shards])
    start = time.time()
    dcp.load(target, storage_reader=dcp.FileSystemReader(args.dir))
    loaded = time.time()
    savemodes.Steps(args.step, savemodes.device()).one()
    first_step = time.time()
    times = [None] * world
    dist.all_gather_object(times, (start, loaded, first_step))
    after = counter.sample() if counter else None
    wrong = 0
    for shard in layout.shards:     # every rank's rows of every tensor, against the same rows of what was saved
        for key, whole in tensors(shard).items():
            start, length = piece(whole.numel(), rank, world)
            wrong += not torch.equal(target[f"{shard.name}/{key}"].to_local(), whole[start:start + length])
    wrong = rank_sum(wrong)     # a tensor counts once per rank whose rows of it differ
    nbytes = rank_sum(sum(t.to_local().numel() * t.element_size() for t in target.values()))
    count = len(target)
    if rank == 0:
        write_new_text(args.result, json.dumps({
            "restart_s": max(t[2] for t in times) - args.t0,
            "load_s": max(t[1] for t in times) - min(t[0] for t in times), "wrong": wrong, "tensors": count,
            "bytes": nbytes, "world_size": world, "moved": counter.moved(before, after, "read"),
            "counter": counter.describe()}), "result")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
