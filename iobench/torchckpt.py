"""`iobench torch-ckpt`: real PyTorch checkpoints through torchrun, against fio on the same mount."""
import dataclasses
import statistics
from contextlib import nullcontext

from benchcore.errors import UserError
from benchcore.files import write_new_text
from benchcore.report.render import console, print_table
from iobench import bench, fio, moved, savemodes
from iobench.output import served as served_cell, served_lines
from iobench.profiles import PROFILES, build_job, job_file
from iobench.ranks import run_ranks
from iobench.safety import ScratchDir, sigterm_as_interrupt

# The fio reference for each direction, like for like with what the ranks do: the same bytes in one
# file per rank, buffered, one call per tensor (bs: its size); written to durable (end fsync), read after the
# page cache is dropped (invalidate=1, as torch-ckpt's posix_fadvise DONTNEED); each repeat writes fresh files, created
# inside the timed job (create_on_open, no fallocate) and unlinked after their read, as the ranks' are.
# Both read every byte from storage (bytes_moved_ratio 1: the mount's counter, read around each run, saw the payload).
# (name, base profile, overrides)
FIO_REFERENCE = {
    "write": ("shard-write", "shard-write", {"create_on_open": 1, "fallocate": "none"}),
    "read": ("restore-read-buffered", "restore-read", {"direct": 0, "ioengine": "psync", "iodepth": 1, "unlink": 1}),
}
MAX_TENSOR_BYTES = 64 << 20
# Checkpoint formats (implemented in torch_worker.FORMATS) and the profile name of their records.
PROFILE_NAMES = {"torch-save": "torch-save", "dcp": "torch-dcp",
                 # --save-mode: dcp saved in each of iobench.savemodes' modes (torch_worker.save_mode)
                 **{f"dcp-{m}": f"torch-dcp-{m}" for m in savemodes.MODES}}
DEFAULT_REPEATS = 3
SHORT_RUN_S = 1.0     # timed runs shorter than this: the ratio range is mostly noise (said under the table)


def tensor_bytes(per_rank_bytes):
    """Bytes of each tensor of a rank's shard: equal tensors of at most 64 MiB, at least four when room."""
    return max(1 << 20, min(MAX_TENSOR_BYTES, per_rank_bytes // 4) >> 20 << 20)


def reference_jobs(size, ranks, keep):
    """fio's reference jobs, write then read (each repeat runs both over fresh shard files), in the calls the
    ranks make: torch.save and torch.load write and read each tensor's storage with one call (strace), so bs
    is the tensor size and a rank's file holds exactly its payload."""
    jobs = []
    for name, base, overrides in FIO_REFERENCE.values():
        job = build_job(PROFILES[base], size=size, ranks=ranks, bs=tensor_bytes(size // ranks))
        jobs.append(dataclasses.replace(job, profile=name, options={**job.options, **overrides}))
        if keep:
            jobs[-1].options.pop("unlink", None)
    return jobs


def space_needed(size, formats, repeats, keep):
    """Bytes on the mount at once: fio's shards (unlinked after its last read) or one repeat of one format
    (each removed before the next), the checkpoint plus 1% for its metadata; with --keep all of them."""
    one = int(size * 1.01) + (1 << 20)
    return one * (1 + len(formats) * repeats) if keep else one


def median(values):
    return statistics.median(values) if values else None


def parse_formats(text):
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROFILE_NAMES]
    if unknown or not names:
        raise UserError(f"unknown checkpoint format {(unknown or [text])[0]!r}; known: {', '.join(PROFILE_NAMES)}")
    return names


def launch(scratch, formats, size, ranks, timeout, repeats=1, keep=False, fio_dir=None, fio_jobs=(), plan_cache=True):
    """Start the worker on `ranks` local ranks with torchrun; return its result JSON (fio_jobs: job files in fio_dir
    that rank 0 runs before each repeat's checkpoints, and once before them all)."""
    result = scratch / "result.json"
    runs = 1 + len(fio_jobs) * (repeats + 1)  # the checkpoints and every fio run, --timeout each
    args = ["--dir", scratch, "--formats", ",".join(formats), "--per-rank-bytes", size // ranks,
            "--result", result, "--timeout", timeout * (1 + len(fio_jobs)), "--repeats", repeats,
            "--fio-dir", fio_dir or "", "--fio-jobs", ",".join(fio_jobs),
            "--progress", scratch / "progress"] + \
        (["--keep"] if keep else []) + ([] if plan_cache else ["--no-plan-cache"])
    each = f" for the checkpoints and each of {runs - 1} fio runs" if runs > 1 else ""
    return run_ranks("iobench.torch_worker", args, ranks, timeout * runs, scratch, result, "torch-ckpt",
                     f" (--timeout {timeout} s{each})")


def records_from(result, target, run_id, ranks, fio_records, counter):
    """One record per format and direction: median MB/s over the repeats, and its ratio to fio's median on
    the same mount; ratio_min/max: the lowest and highest ratio of one repeat to fio's run in that repeat; served_by
    from the median of the bytes the mount's counter saw move in that direction over the payload (iobench.moved)."""
    fio_bw = {}
    for r in fio_records:
        fio_bw.setdefault(r["profile"], {})[r["repeat"]] = r["bw_mbps"]
    records = []
    for res in result["results"]:
        for direction in ("write", "read"):
            bws = [res["payload_bytes"] / s / 1e6 for s in res[f"{direction}_s"]]
            ref = FIO_REFERENCE[direction][0]
            ref_bw = fio_bw.get(ref, {})
            bw, ceiling = median(bws), median(list(ref_bw.values()))
            paired = [b / ref_bw[i] for i, b in enumerate(bws) if ref_bw.get(i)]
            records.append(bench.record(
                run_id, target, profile=PROFILE_NAMES[res["ckpt_format"]], rw=direction, numjobs=ranks, direct=0,
                size_bytes=res["payload_bytes"], runtime_s=median(res[f"{direction}_s"]), bw_mbps=bw,
                direction=direction, ckpt_format=res["ckpt_format"], repeats=len(bws),
                bw_mbps_min=min(bws), bw_mbps_max=max(bws), fio_profile=ref, fio_bw_mbps=ceiling,
                ratio_to_fio=bw / ceiling if ceiling else None,
                ratio_min=min(paired) if paired else None, ratio_max=max(paired) if paired else None,
                tensors=res["tensors"], wrong=res["wrong"], file_bytes=res["file_bytes"],
                cache_drop="posix_fadvise DONTNEED", torch_version=result["torch_version"],
                **({"save_mode": res["ckpt_format"].removeprefix("dcp-"), "blocked_s": median(res["blocked_s"])}
                   if direction == "write" and res.get("blocked_s") else {}),
                **served(counter, res[f"moved_{direction}_bytes"], res["payload_bytes"])))
    return records


def served(counter, seen, payload):
    """served_by, bytes_moved_ratio, byte_counter and served_reason of a direction's repeats (seen: the bytes the
    counter saw in each)."""
    by, ratio = moved.verdict(median(seen) if seen else None, payload, memory=counter.memory)
    return {"served_by": by, "bytes_moved_ratio": ratio, "byte_counter": counter.describe(),
            "served_reason": counter.reason if seen == [] or counter.memory else None}


def run(path, size, ranks, formats, fio_ceiling, timeout, keep, writer, run_id, sharing=bench.Sharing(), keeper=None,
        repeats=DEFAULT_REPEATS, plan_cache=True):
    """fio's reference and the real checkpoints in turns, `repeats` times: each repeat runs fio's write and read
    (in a directory of its own), then each format's write and read, so a repeat's ratio pairs runs moments apart;
    fio and each format run once more before the first repeat, untimed (first writes to fresh storage and a format's
    first save and load are slow)."""
    jobs = reference_jobs(size, ranks, keep) if fio_ceiling else []
    need = space_needed(size, formats, repeats, keep)
    target, = bench.check_targets([path], need, run_id, writer)
    version = fio.fio_version() if jobs else None
    stack, busy = bench.locks([target], run_id, sharing)
    with stack, sigterm_as_interrupt(), ScratchDir(target.path, run_id, keep) if jobs else nullcontext() as fio_dir, \
            ScratchDir(target.path, f"{run_id}-torch", keep) as scratch:
        for job in jobs:
            write_new_text(fio_dir.path / f"{job.profile}.fio", job_file([job], [f"iobench {run_id}: {job.profile}"]),
                           "job file")
        with bench.progress(f"iobench: torchrun {ranks} ranks: {', '.join(formats)} checkpoint of "
                            f"{size >> 20} MiB on {target.path}, {repeats} times"
                            + (", fio's reference before each" if jobs else ""), steps=repeats + 1,
                            unit="repeat", follow=scratch.path / "progress"):
            try:
                result = launch(scratch.path, formats, size, ranks, timeout, repeats, keep, fio_dir and fio_dir.path,
                                [f"{j.profile}.fio" for j in jobs], plan_cache)
            except UserError as exc:
                if writer:
                    writer.write(bench.event(run_id, target.path, "failed", str(exc)))
                raise
        if keep:
            bench.say(f"kept {' and '.join(str(d.shown) for d in (fio_dir, scratch) if d)}")
    counter = moved.counter_for(target.path)   # the one rank 0 read: what it is, or why there is none
    fio_records = []
    for run_ in result.get("fio", []):
        fio_records += bench.fio_records(
            target, run_["data"], run_id, version, writer, run_["job"].removesuffix(".fio"), 0, busy, keeper,
            served=(counter, *run_["counted"]), repeat=run_["repeat"])
    records = records_from(result, target, run_id, ranks, fio_records, counter)
    for rec in records:
        if writer:
            writer.write(rec)
    return fio_records + records


SERVED_COLUMNS = [("moved", "moved x", None), ("served", "served by", None)]


def proven(rec):
    """The row's proof cells: bytes the mount's counter saw move over the payload, and who served them."""
    ratio = rec.get("bytes_moved_ratio")
    return {"moved": "n/a" if ratio is None else f"{ratio:.2f}", "served": served_cell(rec) or rec.get("served_by")}


def print_torch(records):
    """fio's reference runs, then the checkpoint rows with their ratio to it; the mount below them."""
    torch_rows = [r for r in records if r.get("ckpt_format")]
    fio_rows = [r for r in records if not r.get("ckpt_format") and not r.get("event")]
    if fio_rows:
        bench_out = [dict(r, label=r["profile"], **proven(r)) for r in fio_rows]
        print_table(bench_out, [("label", "fio reference", None), ("repeat", "repeat", "d"), ("numjobs", "jobs", "d"),
                                ("bw_mbps", "MB/s", ".1f"), ("lat_p99_us", "I/O lat P99 us", ".1f"),
                                *SERVED_COLUMNS],
                    title="fio reference (same bytes, buffered, durable write, read after a cache drop)")
    torch_rows = [dict(r, label=f"{r['ckpt_format']} {r['rw']}", **proven(r),
                       spread=f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f}" if r.get("ratio_min") else None)
                  for r in torch_rows]
    print_table(torch_rows, [("label", "checkpoint", None), ("numjobs", "ranks", "d"), ("repeats", "reps", "d"),
                             ("bw_mbps", "MB/s median", ".1f"), ("ratio_to_fio", "ratio to fio", ".2f"),
                             ("spread", "ratio range", None), *SERVED_COLUMNS,
                             ("blocked_s", "save blocked s", ".3f"), ("tensors", "tensors", "d"),
                             ("wrong", "wrong", "d")],
                title="torch checkpoint (durable write incl. directory fsync; buffered read after a cache drop)")
    out = console()
    for mount in dict.fromkeys(r["mount"] for r in torch_rows + fio_rows):
        counter = next(r.get("byte_counter") for r in fio_rows + torch_rows if r["mount"] == mount)
        out.print(f"{mount}: ratio = median MB/s over fio's median (write: shard-write, read: restore-read-buffered); "
                  f"range: lowest..highest ratio of one repeat to fio's run just before it; moved x: bytes the "
                  f"mount's counter ({counter}) saw move in that direction "
                  f"during the timed run / the payload (the median over repeats; below {moved.MIN_MOVED}: a cache "
                  f"served it)")
        short = [r["runtime_s"] for r in torch_rows + fio_rows if r["mount"] == mount and r.get("runtime_s")]
        if short and min(short) < SHORT_RUN_S:
            out.print(f"{mount}: the shortest timed run took {min(short):.2f} s: runs under {SHORT_RUN_S:.0f} s "
                      f"are dominated by the storage's moment-to-moment noise, which widens the ratio range "
                      f"(a larger --size narrows it)")
    for line in served_lines(fio_rows + torch_rows):
        out.print(line)
