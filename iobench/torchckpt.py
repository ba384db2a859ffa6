"""`iobench torch-ckpt`: real PyTorch checkpoints through torchrun, against fio on the same mount."""
import json
import os
from pathlib import Path

from benchcore import procs
from benchcore.errors import UserError
from benchcore.procs import one_line
from benchcore.report import print_table
from benchcore.torchrun import torchrun_argv
from iobench import bench
from iobench.profiles import PROFILES, build_job, unlink_when_done
from iobench.safety import ScratchDir, sigterm_as_interrupt

# Which fio profile is the practical ceiling for each direction.
FIO_CEILING = {"write": "shard-write", "read": "restore-read"}
# Checkpoint formats (implemented in torch_worker.FORMATS) and the profile name of their records.
PROFILE_NAMES = {"torch-save": "torch-save", "dcp": "torch-dcp"}


def parse_formats(text):
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in PROFILE_NAMES]
    if unknown or not names:
        raise UserError(f"unknown checkpoint format {(unknown or [text])[0]!r}; known: {', '.join(PROFILE_NAMES)}")
    return names


def launch(scratch, formats, size, ranks, timeout):
    """Start the worker on `ranks` local ranks with torchrun; return its result JSON."""
    result = scratch / "result.json"
    args = ["--dir", scratch, "--formats", ",".join(formats), "--per-rank-bytes", size // ranks,
            "--result", result, "--timeout", timeout]
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
    """Write and read records per format, with the ratio to fio's ceiling on the same mount."""
    fio_bw = {r["profile"]: r["bw_mbps"] for r in fio_records}
    records = []
    for res in result["results"]:
        for direction, seconds in (("write", res["write_s"]), ("read", res["read_s"])):
            bw = res["payload_bytes"] / seconds / 1e6
            ceiling = fio_bw.get(FIO_CEILING[direction])
            records.append(bench.record(
                run_id, target, profile=PROFILE_NAMES[res["ckpt_format"]], rw=direction, numjobs=ranks, direct=0,
                size_bytes=res["payload_bytes"], runtime_s=seconds, bw_mbps=bw, direction=direction,
                ckpt_format=res["ckpt_format"], bw_gbps=bw / 1e3, fio_profile=FIO_CEILING[direction],
                fio_bw_mbps=ceiling, ratio_to_fio=bw / ceiling if ceiling else None, tensors=res["tensors"],
                wrong=res["wrong"], file_bytes=res["file_bytes"], cache_drop="posix_fadvise DONTNEED",
                torch_version=result["torch_version"]))
    return records


def run(path, size, ranks, formats, fio_ceiling, timeout, keep, writer, run_id, concurrent=False, keeper=None):
    """fio shard-write/restore-read first (in a directory of their own), then the real checkpoints."""
    jobs = unlink_when_done([build_job(PROFILES[name], size=size, ranks=ranks) for name in FIO_CEILING.values()]
                            if fio_ceiling else [], keep)
    need = max(size * len(formats), size if jobs else 0)
    target, = bench.check_targets([path], need, run_id, writer)
    fio_records = bench.run_jobs([target], jobs, run_id, timeout, keep, writer, concurrent, keeper) if jobs else []
    stack, _ = bench.locks([target], run_id, concurrent)
    with stack, sigterm_as_interrupt(), ScratchDir(target.path, f"{run_id}-torch", keep) as scratch:
        with bench.progress(f"iobench: torchrun {ranks} ranks: {', '.join(formats)} checkpoint of "
                            f"{size >> 20} MiB on {target.path}"):
            try:
                result = launch(scratch.path, formats, size, ranks, timeout)
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
                                ("lat_p99_us", "P99 us", ".1f")], title="fio ceiling")
    print_table(torch_rows, [("mount", "mount", None), ("ckpt_format", "format", None), ("rw", "direction", None),
                             ("numjobs", "ranks", "d"), ("bw_gbps", "GB/s", ".3f"), ("fio_profile", "vs fio", None),
                             ("ratio_to_fio", "ratio", ".2f"), ("tensors", "tensors", "d"), ("wrong", "wrong", "d")],
                title="torch checkpoint")
