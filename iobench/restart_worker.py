"""One process of model-ckpt's restart (--restart-ranks), started by torchrun: a job coming back after a failure.

The parent notes the time before starting torchrun (--t0); each rank imports torch, joins the process group, rank 0
drops the checkpoint from the page cache (posix_fadvise: a node that never read it), each rank allocates its share
of the state (layout rank r of the layout goes to process r % world, as model_worker gives it out: with fewer
processes than saved it, DCP finds each tensor in whichever rank's file holds it and reads it into its new owner),
loads it with dcp.load, runs one training-like step (iobench.savemodes.Steps) and notes the time: restart = the last
rank's first step - t0. Then, off the clock, every tensor is compared exactly with what was saved
(model_worker.tensors regenerates it), and node 0's first rank's mount counter (iobench.moved) says whether storage
served the load.
"""
import argparse
import datetime
import json
import time

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from benchcore.files import write_new_text
from benchcore.processes.torchrun import rank_sum
from iobench import models, moved, savemodes
from iobench.model_worker import DTYPES, flat, tensors
from iobench.torch_worker import drop_cache


def empty_state(shard):
    """The shapes model_worker.tensors gives a shard, unfilled: what a restarting job allocates before it loads."""
    dtype = DTYPES[shard.kind]
    elements, per = max(1, shard.nbytes // dtype.itemsize), models.MAX_TENSOR_BYTES // dtype.itemsize
    return {f"{shard.kind}.{i}": torch.empty(min(per, elements - offset), dtype=dtype)
            for i, offset in enumerate(range(0, elements, per))}


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
    shards = [s for s in layout.shards if s.rank % world == rank]
    counter = moved.counter_for(args.dir) if rank == 0 else None
    if rank == 0:   # the job restarts on nodes that never read it: nothing of it in their page cache
        drop_cache(args.dir)
    before = counter.sample() if counter else None
    dist.barrier()
    target = flat([(s, empty_state(s)) for s in shards])
    start = time.time()
    dcp.load(target, storage_reader=dcp.FileSystemReader(args.dir))
    loaded = time.time()
    savemodes.Steps(args.step, savemodes.device()).one()
    first_step = time.time()
    times = [None] * world
    dist.all_gather_object(times, (start, loaded, first_step))
    after = counter.sample() if counter else None
    expected = flat([(s, tensors(s)) for s in shards])
    wrong = rank_sum(sum(1 for k, t in expected.items() if not torch.equal(target[k], t)))
    nbytes = rank_sum(sum(t.numel() * t.element_size() for t in target.values()))
    count = rank_sum(len(target))
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
