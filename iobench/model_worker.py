"""One process of `iobench model-ckpt`, started by torchrun: write a model-shaped checkpoint --writes times, then
read it back --reads times, as MLPerf Storage's checkpointing workload does.

The layout (iobench.models, computed here from the same arguments on every node) names every file and its bytes;
process p of P (over every node) writes the files of layout ranks p, p+P, ... (a layout of 64 ranks runs on 8
processes here), into global rank 0's --dir (shared storage when there are several nodes), each file a torch.save
of its tensors (16-bit for model states, fp32 for optimizer states, random so nothing compresses), fsynced before
the file counts as written;
rank 0 fsyncs the directory inside the clock. Before every read the checkpoint's pages are dropped from the page
cache on every node (posix_fadvise DONTNEED by its first rank) and every tensor read is compared exactly with what
was written. Each process reports its start and end (time.time(): comparable across processes and, with synchronised
clocks, nodes) per phase; each node's first rank reads its mount's byte counter (iobench.moved) around each phase,
and global rank 0 sums them and writes the result JSON.
"""
import argparse
import datetime
import functools
import io
import json
import mmap
import os
import socket
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp

from benchcore.errors import UserError
from benchcore.files import held_path, hold_private, write_new_text
from benchcore.processes.torchrun import rank_sum
from benchcore.progress import announce
from iobench import model_fio, models, moved, savemodes
from iobench.fio import run_fio
from iobench.profiles import fio_directory
from iobench.torch_worker import broadcast, drop_cache, fsync_dir

DTYPES = {"model": torch.bfloat16, "optim": torch.float32}
ALIGN = 4096
CPU_SAMPLE_BYTES = 256 << 20


def tensors(shard):
    """A shard's state dict: tensors of at most 64 MiB, 16-bit for model states and fp32 for optimizer states,
    random (nothing compresses); the same shard always gives the same bits."""
    dtype = DTYPES[shard.kind]
    elements, per = max(1, shard.nbytes // dtype.itemsize), models.MAX_TENSOR_BYTES // dtype.itemsize
    gen = torch.Generator().manual_seed(shard.rank * 2 + (shard.kind == "optim"))
    return {f"{shard.kind}.{i}": torch.randn(min(per, elements - offset), generator=gen).to(dtype)
            for i, offset in enumerate(range(0, elements, per))}


def write(directory, mine):
    for shard, state in mine:
        with open(directory / shard.name, "xb") as f:
            torch.save(state, f)
            f.flush()
            os.fsync(f.fileno())


def flat(mine):
    """One state dict of every file this rank holds (dcp saves a rank's whole state into one file)."""
    return {f"{shard.name}/{key}": t for shard, state in mine for key, t in state.items()}


def write_dcp(directory, mine):
    dcp.save(flat(mine), storage_writer=dcp.FileSystemWriter(directory, sync_files=True, overwrite=False))


def read_dcp(directory, mine, direct=False):
    """dcp.load into tensors allocated inside the clock, as torch.load allocates what it reads (direct: dcp reads
    through the page cache only; a client cache it cannot pass shows as cache in moved x)."""
    written = flat(mine)
    target = {k: torch.empty_like(t) for k, t in written.items()}
    dcp.load(target, storage_reader=dcp.FileSystemReader(directory))
    return sum(1 for k, t in written.items() if not torch.equal(target[k], t))


def read_direct(path):
    """The file's bytes read with O_DIRECT into page-aligned memory: past every cache of the client (ceph-fuse keeps
    its own, which posix_fadvise does not reach)."""
    size = os.path.getsize(path)
    buf = mmap.mmap(-1, max(ALIGN, -(-size // ALIGN) * ALIGN))
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        got = 0
        while got < size:
            n = os.preadv(fd, [memoryview(buf)[got:]], got)
            if n <= 0:
                break
            got += n
    finally:
        os.close(fd)
    return io.BytesIO(buf[:size])


def read(directory, mine, direct=False):
    wrong = 0
    for shard, state in mine:
        path = directory / shard.name
        got = torch.load(read_direct(path) if direct else path, map_location="cpu", weights_only=True)
        wrong += sum(1 for k, t in state.items() if k not in got or not torch.equal(got[k], t))
    return wrong


def phase(fn, directory, mine, counter, then=None):
    """(this process's start, end, fn's result, its node's mount counter before and after: local rank 0 reads it)."""
    before = counter.sample() if counter else None
    dist.barrier()
    start = time.time()
    result = fn(directory, mine)
    end = time.time()
    dist.barrier()
    if then and dist.get_rank() == 0:
        then(directory)
    dist.barrier()
    after = counter.sample() if counter else None
    return start, end, result, (before, after)


def moved_on_nodes(counter, samples, direction):
    """The bytes every node's counter saw (each node's client counts its own traffic; a counter that several
    nodes share, as emulated nodes on one machine do, once), or why none could."""
    per_node = [counter.moved(before, after, direction) for before, after in dict(samples).values()]
    if all("bytes" in m for m in per_node):
        return {"bytes": sum(m["bytes"] for m in per_node), "counter": per_node[0]["counter"]}
    return next(m for m in per_node if "bytes" not in m)


def same_with_fio(args, kind, directory, counter):
    """Rank 0: fio's run of the same files (model_fio) beside this checkpoint, in a directory of its own; its
    bytes, the slowest process's seconds and the bytes the counter saw; {'error': ...} when it failed; None
    without a job file."""
    job = args.fio_write if kind == "write" else args.fio_read
    if not job:
        return None
    where = directory.parent / f"fio-{directory.name}"
    if kind == "write":
        where.mkdir()
    elif not args.no_drop and not args.direct_read:
        drop_cache(where)
    before = counter.sample() if counter else None
    try:
        data = run_fio([fio_directory(where), job], args.timeout, cwd=where, what=f"fio's {kind} of {where}")
    except UserError as exc:
        return {"error": str(exc)}
    after = counter.sample() if counter else None
    nbytes, seconds = model_fio.figures(data, kind)
    return {"bytes": nbytes, "seconds": seconds, "moved": counter.moved(before, after, kind) if counter else {}}


def cpu_seconds(mine):
    """(torch.save's, torch.load's) seconds for this rank's files in memory, no storage: what torch spends beyond
    the I/O (serialisation, checksums, allocation). Timed on at most CPU_SAMPLE_BYTES of them, scaled to all."""
    sample, total = [], sum(t.numel() * t.element_size() for _, state in mine for t in state.values())
    for shard, state in mine:
        sample.append(state)
        if sum(t.numel() * t.element_size() for st in sample for t in st.values()) >= CPU_SAMPLE_BYTES:
            break
    sampled = sum(t.numel() * t.element_size() for st in sample for t in st.values())
    start = time.perf_counter()
    blobs = []
    for state in sample:
        blob = io.BytesIO()
        torch.save(state, blob)
        blobs.append(blob.getvalue())
    saved = time.perf_counter() - start
    start = time.perf_counter()
    for blob in blobs:
        torch.load(io.BytesIO(blob), map_location="cpu", weights_only=True)
    loaded = time.perf_counter() - start
    scale = total / sampled if sampled else 0
    return saved * scale, loaded * scale


# --format: (write, read)
FORMATS = {"torch-save": (write, read), "dcp": (write_dcp, read_dcp)}


def arguments():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", default="", help="where the checkpoints go (global rank 0's, a held path)")
    parser.add_argument("--shared", default="",
                        help="global rank 0's: its private directory as other nodes reach it (its checkpoints/)")
    parser.add_argument("--inode", type=int, default=0, help="global rank 0's: that directory's inode")
    parser.add_argument("--model", required=True)
    parser.add_argument("--tp", type=int)
    parser.add_argument("--pp", type=int)
    parser.add_argument("--dp", type=int)
    parser.add_argument("--zero", type=int)
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--format", choices=FORMATS, default="torch-save")
    parser.add_argument("--result", default="", help="global rank 0 writes the result JSON here")
    parser.add_argument("--writes", type=int, default=10)
    parser.add_argument("--reads", type=int, default=10)
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--no-drop", action="store_true", help="read without dropping the page cache first")
    parser.add_argument("--direct-read", action="store_true",
                        help="read with O_DIRECT (a client cache no drop reaches)")
    parser.add_argument("--fio-write", default="", help="fio's job file of the same writes (rank 0 runs it first)")
    parser.add_argument("--fio-read", default="", help="fio's job file of the same reads")
    parser.add_argument("--save-modes", default="", help="dcp: each mode's --writes (iobench.savemodes), in turn")
    parser.add_argument("--plan-cache", action="store_true", help="save modes: DCP's plan caching on")
    parser.add_argument("--step", type=int, default=savemodes.DEFAULT_STEP, help="save modes: the step GEMM's n")
    parser.add_argument("--progress", default="", help="global rank 0 announces each step here (benchcore.progress)")
    parser.add_argument("--progress-after", type=int, default=0, help="steps the launcher runs after (the restart)")
    return parser.parse_args()


def step_texts(args):
    """What each step of the schedule is, as the progress line says it: 'write 2/10 (save mode async)', 'read 3/10';
    each save mode's first save (untimed) before its writes."""
    modes = [m for m in args.save_modes.split(",") if m]
    texts, reads = [], 0
    for kind, index, mode in schedule(args):
        if kind == "write" and mode and index == 0:
            texts.append(f"save mode {mode}: its first save (untimed: a save's first call is slow)")
        reads += kind == "read"   # the reads go through the modes' checkpoints in turn: counted as they run
        texts.append(f"write {index + 1}/{args.writes}" if kind == "write" else f"read {reads}/{args.reads}")
        texts[-1] += f" (save mode {mode})" if mode and (kind == "write" or len(modes) > 1) else ""
    return texts


def schedule(args):
    """[(phase, index, save mode)]: each mode's writes in turn (one pass without a mode), then the reads, each of
    the next mode's checkpoints in turn (every mode's is read back and compared)."""
    modes = [m for m in args.save_modes.split(",") if m] or [None]
    return [("write", i, m) for m in modes for i in range(args.writes)] + \
        [("read", i // len(modes), modes[i % len(modes)]) for i in range(args.reads)]


def ckpt_dir(root, index, mode, writes):
    return Path(root) / (f"ckpt-{index % writes}" if mode is None else f"ckpt-{mode}-{index % writes}")


def checkpoint_root(args):
    """This rank's way into global rank 0's checkpoint directory: on node 0 the held path it was given; on another
    node its shared path, held here once it is known to be that private directory (the caller's, 0700, the same
    inode: never a link or a directory another user put in its place), through /proc/PID/fd/N ever after."""
    here, shared, inode = broadcast([args.dir, args.shared, args.inode])
    if int(os.environ.get("GROUP_RANK", "0")) == 0:
        return Path(here)
    return Path(held_path(hold_private(shared, "node 0's scratch directory", inode))) / "checkpoints"


def main():
    args = arguments()

    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=args.timeout))
    rank, world, host = dist.get_rank(), dist.get_world_size(), socket.gethostname()
    local = int(os.environ.get("LOCAL_RANK", rank)) == 0     # the node's first rank: its cache, its counter
    root = checkpoint_root(args)
    layout = models.layout(args.model, args.tp, args.pp, args.dp, args.zero, args.scale)
    mine = [(shard, tensors(shard)) for shard in layout.shards if shard.rank % world == rank]
    my_bytes = sum(t.numel() * t.element_size() for _, state in mine for t in state.values())
    payload = rank_sum(my_bytes)
    cpu = [None] * world
    dist.all_gather_object(cpu, cpu_seconds(mine))
    counter = moved.counter_for(root) if local else None
    phases, traces = [], {}
    feel = savemodes.Feel(args.step, args.timeout, args.plan_cache) if args.save_modes else None
    if feel and feel.device.type == "cuda":    # the state lives where training keeps it: staging copies it out
        mine = [(shard, {k: t.to(feel.device) for k, t in state.items()}) for shard, state in mine]
    texts, at = step_texts(args), -1
    total = len(texts) + args.progress_after

    def say(doing=None):   # global rank 0: the next step is under way, or (doing) what the step does now
        nonlocal at
        at += doing is None
        if rank == 0:
            announce(args.progress, at, total, texts[at] + (doing or ""))

    for kind, index, mode in schedule(args):
        directory = ckpt_dir(root, index, mode, args.writes)
        if feel and kind == "write" and mode != feel.saver_mode():
            say()
            feel.begin(mode, Path(root) / f"warm-up-{mode}", flat(mine))
        say()
        if kind == "write" and rank == 0:
            directory.mkdir()
        dist.barrier()
        if rank == 0 and (args.fio_write if kind == "write" else args.fio_read):
            say(": fio's reference run of the same files")
        fio_run = same_with_fio(args, kind, directory, counter) if rank == 0 else None
        failed, = broadcast([fio_run.get("error") if fio_run else None])
        if failed:
            if rank == 0:
                write_new_text(args.result, json.dumps({"error": failed}), "result")
            dist.destroy_process_group()
            return
        if kind == "read" and local and not args.no_drop and not args.direct_read:
            drop_cache(directory)
        save, load = FORMATS[args.format]
        staged = kind == "write" and feel and mode not in (None, "sync")   # an async save mode
        if feel:   # an async mode's save returns once staged: the background part is said when it starts
            resumed = (lambda: say(": staged; training steps run while the save persists in the background")) \
                if staged else None
            save = lambda directory, mine: feel.save(directory, flat(mine), resumed)  # noqa: E731
        reader = functools.partial(load, direct=args.direct_read and not args.no_drop)
        synced = []
        say(f": {'saving' if kind == 'write' else 'loading'} ({args.format}"
            f"{', the state staged, then persisted in the background' if staged else ''})")
        start, end, result, counters = phase(save if kind == "write" else reader, directory, mine, counter,
                                             then=(lambda d: (fsync_dir(d), synced.append(time.time())))
                                             if kind == "write" else None)
        felt = result if feel and kind == "write" else None
        if felt:   # the save's own span: the call to its last byte (not the steps around it)
            start, end, trace = felt.pop("call_wall"), felt.pop("done_wall"), felt.pop("trace")
            traces[mode] = trace[:savemodes.TRACE_LIMIT]
        gathered = [None] * world
        dist.all_gather_object(gathered, ((start, end, my_bytes, host), (counter.key(), counters) if local else None,
                                          felt))
        wrong = rank_sum(result or 0) if kind == "read" else 0
        if rank == 0:
            phases.append({"phase": kind, "index": index, "mode": mode if kind == "write" else None,
                           "ranks": [g[0] for g in gathered], "wrong": wrong,
                           **({"felt": [g[2] for g in gathered],
                               "durable_s": synced[0] - min(g[0][0] for g in gathered)}
                              if felt else {}),
                           "moved": moved_on_nodes(counter, [g[1] for g in gathered if g[1]], kind),
                           "fio": fio_run})
    if rank == 0 and args.result:
        write_new_text(args.result, json.dumps({"phases": phases, "payload_bytes": payload, "world_size": world,
                                                "files": len(layout.shards) if args.format == "torch-save" else world,
                                                "torch_version": torch.__version__,
                                                "counter": counter.describe(),
                                                **({"feel": {**feel.describe(), "traces": traces}} if feel else {}),
                                                "cpu_s": {"write": max(c[0] for c in cpu),
                                                          "read": max(c[1] for c in cpu)}}), "result")
    if feel:
        feel.close()
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
