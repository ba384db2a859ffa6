"""`iobench torch-ckpt`: real PyTorch checkpoints through torchrun, against fio on the same mount."""
import dataclasses
import json
import os
import statistics
from pathlib import Path

from benchcore import procs
from benchcore.errors import UserError
from benchcore.procs import one_line
from benchcore.report import print_table
from benchcore.torchrun import torchrun_argv
from iobench import bench
from iobench.profiles import PROFILES, build_job
from iobench.safety import ScratchDir, sigterm_as_interrupt

# The fio reference for each direction, like for like with what the ranks do: the same bytes in one
# file per rank, buffered, 1 MiB calls; written to durable (end fsync), read after the page cache
# is dropped (invalidate=1, as torch-ckpt's posix_fadvise DONTNEED); each repeat writes fresh files, created
# inside the timed job (create_on_open, no fallocate) and unlinked after their read, as the ranks' are.
# (name, base profile, overrides)
FIO_REFERENCE = {
    "write": ("shard-write", "shard-write", {"create_on_open": 1, "fallocate": "none"}),
    "read": ("restore-read-buffered", "restore-read", {"direct": 0, "ioengine": "psync", "iodepth": 1, "unlink": 1}),
}
# Checkpoint formats (implemented in torch_worker.FORMATS) and the profile name of their records.
PROFILE_NAMES = {"torch-save": "torch-save", "dcp": "torch-dcp"}
DEFAULT_REPEATS = 3


def reference_jobs(size, ranks, repeats, keep):
    """fio's reference jobs, write then read, `repeats` times over the same shard files."""
    one = []
    for name, base, overrides in FIO_REFERENCE.values():
        job = build_job(PROFILES[base], size=size, ranks=ranks)
        one.append(dataclasses.replace(job, profile=name, options={**job.options, **overrides}))
    jobs = [dataclasses.replace(j, options=dict(j.options)) for _ in range(repeats) for j in one]
    if keep:
        for job in jobs:
            job.options.pop("unlink", None)
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


def launch(scratch, formats, size, ranks, timeout, repeats=1, keep=False):
    """Start the worker on `ranks` local ranks with torchrun; return its result JSON."""
    result = scratch / "result.json"
    args = ["--dir", scratch, "--formats", ",".join(formats), "--per-rank-bytes", size // ranks,
            "--result", result, "--timeout", timeout, "--repeats", repeats] + (["--keep"] if keep else [])
    here = str(Path(__file__).resolve().parent.parent)
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
    done = procs.run(torchrun_argv("iobench.torch_worker", args, ranks), timeout, cwd=scratch, env=env)
    if done.timed_out:
        raise UserError(f"torch-ckpt: torchrun did not finish within {timeout} s and was stopped (--timeout)")
    if done.returncode != 0 or not result.exists():
        raise UserError(f"torch-ckpt: torchrun failed (exit {done.returncode}): {one_line(done.stderr[-3000:])}")
    return json.loads(result.read_text())


def records_from(result, target, run_id, ranks, fio_records):
    """One record per format and direction: median MB/s over the repeats, and its ratio to fio's median on
    the same mount (ratio_min/max: the worst and best pairing of the repeats)."""
    fio_bw = {}
    for r in fio_records:
        fio_bw.setdefault(r["profile"], []).append(r["bw_mbps"])
    records = []
    for res in result["results"]:
        for direction in ("write", "read"):
            bws = [res["payload_bytes"] / s / 1e6 for s in res[f"{direction}_s"]]
            ref = FIO_REFERENCE[direction][0]
            fio = fio_bw.get(ref, [])
            bw, ceiling = median(bws), median(fio)
            records.append(bench.record(
                run_id, target, profile=PROFILE_NAMES[res["ckpt_format"]], rw=direction, numjobs=ranks, direct=0,
                size_bytes=res["payload_bytes"], runtime_s=median(res[f"{direction}_s"]), bw_mbps=bw,
                direction=direction, ckpt_format=res["ckpt_format"], bw_gbps=bw / 1e3, repeats=len(bws),
                bw_mbps_min=min(bws), bw_mbps_max=max(bws), fio_profile=ref, fio_bw_mbps=ceiling,
                ratio_to_fio=bw / ceiling if ceiling else None,
                ratio_min=min(bws) / max(fio) if fio else None, ratio_max=max(bws) / min(fio) if fio else None,
                tensors=res["tensors"], wrong=res["wrong"], file_bytes=res["file_bytes"],
                cache_drop="posix_fadvise DONTNEED", torch_version=result["torch_version"]))
    return records


def run(path, size, ranks, formats, fio_ceiling, timeout, keep, writer, run_id, sharing=bench.Sharing(), keeper=None,
        repeats=DEFAULT_REPEATS):
    """fio's reference (in a directory of its own), then the real checkpoints, each `repeats` times."""
    jobs = reference_jobs(size, ranks, repeats, keep) if fio_ceiling else []
    need = space_needed(size, formats, repeats, keep)
    target, = bench.check_targets([path], need, run_id, writer)
    fio_records = bench.run_jobs([target], jobs, run_id, timeout, keep, writer, sharing, keeper) if jobs else []
    stack, _ = bench.locks([target], run_id, sharing)
    with stack, sigterm_as_interrupt(), ScratchDir(target.path, f"{run_id}-torch", keep) as scratch:
        with bench.progress(f"iobench: torchrun {ranks} ranks: {', '.join(formats)} checkpoint of "
                            f"{size >> 20} MiB on {target.path}, {repeats} times"):
            try:
                result = launch(scratch.path, formats, size, ranks, timeout, repeats, keep)
            except UserError as exc:
                if writer:
                    writer.write(bench.event(run_id, target.path, "failed", str(exc)))
                raise
        if keep:
            bench.say(f"kept {scratch.path}")
    records = records_from(result, target, run_id, ranks, fio_records)
    for rec in records:
        if writer:
            writer.write(rec)
    return fio_records + records


def print_torch(records):
    """fio's ceiling rows, then the checkpoint rows with their ratio to it."""
    torch_rows = [r for r in records if r.get("ckpt_format")]
    fio_rows = [r for r in records if not r.get("ckpt_format") and not r.get("event")]
    if fio_rows:
        bench_out = [dict(r, bw_gbps=r["bw_mbps"] / 1e3) for r in fio_rows]
        print_table(bench_out, [("mount", "mount", None), ("profile", "fio profile", None),
                                ("numjobs", "jobs", "d"), ("bw_gbps", "GB/s", ".3f"),
                                ("lat_p99_us", "P99 us", ".1f")],
                    title="fio reference (same bytes, buffered, durable write, read after a cache drop)")
    torch_rows = [dict(r, spread=f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f}" if r.get("ratio_min") else None)
                  for r in torch_rows]
    print_table(torch_rows, [("mount", "mount", None), ("ckpt_format", "format", None), ("rw", "direction", None),
                             ("numjobs", "ranks", "d"), ("repeats", "repeats", "d"),
                             ("bw_gbps", "GB/s (median)", ".3f"),
                             ("fio_profile", "vs fio", None), ("ratio_to_fio", "ratio", ".2f"),
                             ("spread", "ratio range", None), ("tensors", "tensors", "d"), ("wrong", "wrong", "d")],
                title="torch checkpoint (durable write incl. directory fsync; buffered read after a cache drop)")
