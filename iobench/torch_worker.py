"""One rank of `iobench torch-ckpt`, started by torchrun: write a real checkpoint, read it back, verify.

Each rank holds its shard of a model-like state dict (random float32/bfloat16 tensors, so no file
system can compress or deduplicate them). `torch-save` writes one file per rank with torch.save;
`dcp` writes the same shards as DTensors (Shard(0) over all ranks) with torch.distributed.checkpoint.
Files are fsynced, then their directory by rank 0, before the write clock stops (durable); they are
dropped from the page cache (posix_fadvise DONTNEED) before the buffered read, and every tensor read
back is compared exactly with a regenerated copy. Each format is written and read --repeats times,
each repeat's files removed before the next (unless --keep), after one untimed warm-up of each (a format's first
save and load pay one-time costs: dcp's first write ran at a tenth of its later ones). With --fio-jobs, rank 0 runs
fio's reference (job files the parent wrote) at the start of every repeat, and once untimed before the warm-up,
while the other ranks wait: fio and the checkpoints take turns. Rank 0 reads the mount's byte counter
(iobench.moved: block device, NFS, ceph-fuse or Lustre client) around each timed run and writes the results as JSON
to --result.
"""
import argparse
import datetime
import json
import os
import shutil
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard

from benchcore.errors import UserError
from benchcore.files import write_new_text
from benchcore.processes.torchrun import rank_sum
from benchcore.progress import announce
from iobench import moved, savemodes, torchckpt
from iobench.fio import run_fio
from iobench.profiles import fio_directory

DTYPES = (torch.float32, torch.bfloat16)
LISTS = ("write_s", "read_s", "moved_write_bytes", "moved_read_bytes", "blocked_s")   # per timed repeat
COLS = 1024


def tensor_plan(per_rank_bytes):
    """[(name, dtype, rows)] for one rank: equal tensors of torchckpt.tensor_bytes each."""
    tensor_bytes = torchckpt.tensor_bytes(per_rank_bytes)
    count = max(1, per_rank_bytes // tensor_bytes)
    plan = []
    for i in range(count):
        dtype = DTYPES[i % len(DTYPES)]
        plan.append((f"layers.{i}.weight", dtype, tensor_bytes // (COLS * dtype.itemsize)))
    return plan


def make_tensor(rank, index, dtype, rows):
    """Deterministic random shard: the same (rank, index) always gives the same bits."""
    gen = torch.Generator().manual_seed(rank * 100003 + index)
    return torch.randn((rows, COLS), generator=gen, dtype=torch.float32).to(dtype)


def local_state(rank, plan):
    return {name: make_tensor(rank, i, dtype, rows) for i, (name, dtype, rows) in enumerate(plan)}


def drop_cache(directory):
    """Evict the checkpoint's (clean, fsynced) pages so the read comes from storage."""
    for path in Path(directory).rglob("*"):
        if path.is_file():
            fd = os.open(path, os.O_RDONLY)
            try:
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)


def fsync_dir(directory):
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def save_torch(state, directory, rank, mesh):
    path = Path(directory) / f"rank{rank:05d}.pt"
    with open(path, "xb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())


def load_torch(target, directory, rank):
    return torch.load(Path(directory) / f"rank{rank:05d}.pt", map_location="cpu", weights_only=True)


def save_dcp(state, directory, rank, mesh):
    sharded = {k: DTensor.from_local(v, mesh, [Shard(0)], run_check=False) for k, v in state.items()}
    dcp.save(sharded, storage_writer=dcp.FileSystemWriter(directory, sync_files=True, overwrite=False))


def dcp_target(plan, mesh):
    """The state dict dcp loads into, allocated before the clock (a training job loads into its model's tensors)."""
    return {name: DTensor.from_local(torch.zeros((rows, COLS), dtype=dtype), mesh, [Shard(0)], run_check=False)
            for name, dtype, rows in plan}


def load_dcp(target, directory, rank):
    dcp.load(target, storage_reader=dcp.FileSystemReader(directory))
    return {k: v.to_local() for k, v in target.items()}


# format: (save, what load reads into (made before its clock), load); torch.load allocates as it reads
FORMATS = {"torch-save": (save_torch, lambda plan, mesh: None, load_torch), "dcp": (save_dcp, dcp_target, load_dcp)}
SAVERS = {}     # --save-mode: each mode's saver (iobench.savemodes), made by every rank at its first save
PLAN_CACHE = [True]


def save_mode(mode):
    """dcp's save in --save-mode `mode` (iobench.savemodes): the same DTensors, the save waited for to its last byte
    (the checkpoint's throughput); returns the seconds the save call blocked (training resumes after them)."""
    def save(state, directory, rank, mesh):
        if mode not in SAVERS:
            SAVERS[mode] = savemodes.Saver(mode, PLAN_CACHE[0], torch.device("cpu"))
        sharded = {k: DTensor.from_local(v, mesh, [Shard(0)], run_check=False) for k, v in state.items()}
        start = time.perf_counter()
        future = SAVERS[mode].save(sharded, directory)
        blocked = time.perf_counter() - start
        future.result()
        return blocked
    return save


for _mode in savemodes.MODES:
    FORMATS[f"dcp-{_mode}"] = (save_mode(_mode), dcp_target, load_dcp)


def timed(fn, *args, then=None, counter=None):
    """(seconds from a barrier until every rank has finished fn and rank 0 then() (barriers between), fn's
    result, (bytes read, written) the mount's counter saw meanwhile (rank 0's), None without one)."""
    before = sample(counter)   # before the barrier: once past it, another rank may start reading before rank 0 looks
    dist.barrier()
    start = time.perf_counter()
    result = fn(*args)
    dist.barrier()
    if then:
        if dist.get_rank() == 0:
            then()
        dist.barrier()
    seconds, after = time.perf_counter() - start, sample(counter)
    seen = None if before is None or after is None else (after[0] - before[0], after[1] - before[1])
    return seconds, result, seen


def wrong_tensors(loaded, rank, plan):
    """Tensors that are missing or differ in any bit from a regenerated copy."""
    wrong = 0
    for i, (name, dtype, rows) in enumerate(plan):
        got = loaded.get(name)
        if got is None or got.dtype != dtype or not torch.equal(got, make_tensor(rank, i, dtype, rows)):
            wrong += 1
    return wrong


def sample(counter):
    return counter.sample() if counter else None


def checkpoint(res, fmt, directory, state, plan, mesh, counter, keep):
    """One repeat of one format into res: a durable write (every file fsynced by its rank, then the directory by
    rank 0, inside the clock), the cache dropped, the read, the check."""
    save, prepare, load = fmt
    rank = dist.get_rank()
    if rank == 0:
        directory.mkdir(parents=True)
    dist.barrier()
    write_s, blocked, wrote = timed(save, state, directory, rank, mesh, then=lambda: fsync_dir(directory), counter=counter)
    if blocked is not None:   # a --save-mode's: the slowest rank's seconds until training could resume
        res["blocked_s"].append(max(all_ranks(blocked)))
    drop_cache(directory)
    read_s, loaded, read = timed(load, prepare(plan, mesh), directory, rank, counter=counter)
    res["wrong"] += rank_sum(wrong_tensors(loaded, rank, plan))
    del loaded
    res["file_bytes"] = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
    res["write_s"].append(write_s)
    res["read_s"].append(read_s)
    if wrote and read:  # what the counter saw move in each direction during the timed phase
        res["moved_write_bytes"].append(wrote[1])
        res["moved_read_bytes"].append(read[0])
    dist.barrier()
    if rank == 0 and not keep:
        shutil.rmtree(directory)  # the next repeat or format finds the room it needs


def reference(jobs, args, repeat, counter, runs):
    """Rank 0: fio's job files (the parent wrote them into --fio-dir) one after another, each run's JSON and the
    mount counter's samples around it appended to runs; the error text of a failed run, else None."""
    for job in jobs:
        before = sample(counter)
        try:
            data = run_fio([fio_directory(args.fio_dir), job], args.timeout, cwd=args.fio_dir,
                           what=f"{job.removesuffix('.fio')} on {args.fio_dir}")
        except UserError as exc:
            return str(exc)
        if repeat >= 0:
            runs.append({"job": job, "repeat": repeat, "data": data, "counted": [before, sample(counter)]})
    return None


def all_ranks(value):
    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, value)
    return gathered


def broadcast(objects):
    dist.broadcast_object_list(objects, src=0)
    return objects


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--formats", required=True)
    parser.add_argument("--per-rank-bytes", type=int, required=True)
    parser.add_argument("--result", required=True)
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--keep", action="store_true", help="keep every repeat's files (else each is removed)")
    parser.add_argument("--fio-dir", default="", help="where fio's reference runs (its job files are there)")
    parser.add_argument("--fio-jobs", default="", help="fio job files in --fio-dir, run in this order each repeat")
    parser.add_argument("--no-plan-cache", action="store_true", help="--save-mode formats: DCP's plan caching off")
    parser.add_argument("--progress", default="", help="rank 0 announces each repeat here (benchcore.progress)")
    args = parser.parse_args()
    PLAN_CACHE[0] = not args.no_plan_cache

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world = dist.get_rank(), dist.get_world_size()
    mesh = init_device_mesh("cpu", (world,))
    plan = tensor_plan(args.per_rank_bytes)
    counter = moved.counter_for(args.dir) if rank == 0 else None
    state = local_state(rank, plan)
    payload = rank_sum(sum(t.numel() * t.element_size() for t in state.values()))
    formats = args.formats.split(",")
    results = {fmt: {"ckpt_format": fmt, "payload_bytes": payload, "tensors": len(plan) * world, "wrong": 0,
                     **{k: [] for k in LISTS}} for fmt in formats}
    fio_runs, jobs = [], [j for j in args.fio_jobs.split(",") if j]
    # fio's reference and the checkpoints take turns, so each repeat's ratio pairs runs moments apart
    for repeat in range(-1, args.repeats):  # -1: warm-up, untimed: fio and each format once (first calls are slow)
        where = f"repeat {repeat + 1}/{args.repeats}" if repeat >= 0 else "warm-up (untimed: fio and each format once)"
        if rank == 0 and jobs:
            announce(args.progress, repeat + 1, args.repeats + 1, f"{where}: fio's reference run")
        failed = reference(jobs, args, repeat, counter, fio_runs) if rank == 0 else None
        failed, = broadcast([failed])
        if failed:
            if rank == 0:
                write_new_text(args.result, json.dumps({"error": failed}), "result")
            dist.destroy_process_group()
            return
        for fmt in formats:
            if rank == 0:
                announce(args.progress, repeat + 1, args.repeats + 1, f"{where}: {fmt} write, then read")
            counted = repeat >= 0
            res = results[fmt] if counted else {**results[fmt], **{k: [] for k in LISTS}}
            checkpoint(res, FORMATS[fmt], Path(args.dir) / fmt / (str(repeat) if counted else "warm-up"), state, plan,
                       mesh, counter, args.keep and counted)
            results[fmt]["wrong"] = res["wrong"]   # the warm-up's tensors are checked too
    if rank == 0:
        write_new_text(args.result, json.dumps({"results": list(results.values()), "fio": fio_runs,
                                                "torch_version": torch.__version__, "world_size": world}), "result")
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
