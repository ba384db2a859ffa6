"""One process of `iobench model-ckpt`, started by torchrun: write a model-shaped checkpoint --writes times, then
read it back --reads times, as MLPerf Storage's checkpointing workload does.

The layout (iobench.models) names every file and its bytes; process p of P writes the files of layout ranks
p, p+P, ... (a layout of 64 ranks runs on 8 processes here), each file a torch.save of its tensors (16-bit for
model states, fp32 for optimizer states, random so nothing compresses), fsynced before the file counts as written;
rank 0 fsyncs the directory inside the clock. Before every read the checkpoint's pages are dropped from the page
cache (posix_fadvise DONTNEED) and every tensor read is compared exactly with what was written. Each process
reports its start and end (time.time(), comparable across processes and, with synchronised clocks, nodes) per phase;
rank 0 reads the mount's byte counters (iobench.moved) around each phase and writes the result JSON.
"""
import argparse
import datetime
import json
import os
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist

from benchcore.files import write_new_text
from benchcore.processes.torchrun import rank_sum
from iobench import moved
from iobench.torch_worker import drop_cache, fsync_dir

DTYPES = {"model": torch.bfloat16, "optim": torch.float32}
MAX_TENSOR_BYTES = 64 << 20


def tensors(shard):
    """A shard's state dict: tensors of at most 64 MiB, 16-bit for model states and fp32 for optimizer states,
    random (nothing compresses); the same shard always gives the same bits."""
    dtype = DTYPES[shard["kind"]]
    elements, per = max(1, shard["nbytes"] // dtype.itemsize), MAX_TENSOR_BYTES // dtype.itemsize
    gen = torch.Generator().manual_seed(shard["rank"] * 2 + (shard["kind"] == "optim"))
    return {f"{shard['kind']}.{i}": torch.randn(min(per, elements - offset), generator=gen).to(dtype)
            for i, offset in enumerate(range(0, elements, per))}


def write(directory, mine):
    for shard, state in mine:
        with open(directory / shard["name"], "xb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())


def read(directory, mine):
    wrong = 0
    for shard, state in mine:
        got = torch.load(directory / shard["name"], map_location="cpu", weights_only=True)
        wrong += sum(1 for k, t in state.items() if k not in got or not torch.equal(got[k], t))
    return wrong


def phase(fn, directory, mine, mount_counter, then=None):
    """(this process's start, end, fn's result, the mount's counters before and after as rank 0 saw them)."""
    before = mount_counter() if dist.get_rank() == 0 else None
    dist.barrier()
    start = time.time()
    result = fn(directory, mine)
    end = time.time()
    dist.barrier()
    if then and dist.get_rank() == 0:
        then(directory)
    dist.barrier()
    after = mount_counter() if dist.get_rank() == 0 else None
    return start, end, result, (before, after)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--layout", required=True, help="JSON: the shards, each {rank, kind, nbytes, name}")
    parser.add_argument("--result", required=True)
    parser.add_argument("--writes", type=int, default=10)
    parser.add_argument("--reads", type=int, default=10)
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--no-drop", action="store_true", help="read without dropping the page cache first")
    args = parser.parse_args()

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world, host = dist.get_rank(), dist.get_world_size(), socket.gethostname()
    shards = json.loads(Path(args.layout).read_text())["shards"]
    mine = [(s, tensors(s)) for s in shards if s["rank"] % world == rank]
    my_bytes = sum(t.numel() * t.element_size() for _, state in mine for t in state.values())
    payload = rank_sum(my_bytes)
    counter = moved.counter_for(args.dir) if rank == 0 else None
    phases = []
    for i in range(args.writes + args.reads):
        kind = "write" if i < args.writes else "read"
        directory = Path(args.dir) / f"ckpt-{i if kind == 'write' else (i - args.writes) % args.writes}"
        if kind == "write" and rank == 0:
            directory.mkdir()
        dist.barrier()
        if kind == "read" and rank == 0 and not args.no_drop:
            drop_cache(directory)
        start, end, result, counters = phase(write if kind == "write" else read, directory, mine,
                                             counter.sample if counter else None,
                                             then=fsync_dir if kind == "write" else None)
        times = [None] * world
        dist.all_gather_object(times, (start, end, my_bytes, host))
        wrong = rank_sum(result or 0) if kind == "read" else 0
        if rank == 0:
            phases.append({"phase": kind, "index": i if kind == "write" else i - args.writes, "ranks": times,
                           "wrong": wrong, "moved": counter.moved(*counters, kind)})
    if rank == 0:
        write_new_text(args.result, json.dumps({"phases": phases, "payload_bytes": payload, "world_size": world,
                                                "files": len(shards), "torch_version": torch.__version__,
                                                "counter": counter.describe()}), "result")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
