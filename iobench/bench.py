"""Check every target first, then run fio jobs in a private directory per mount and make records."""
import contextlib
import dataclasses
import json
import os
import shlex
import sys

import click

from benchcore.errors import UserError, name, shown
from benchcore.files import write_new, write_new_text
from benchcore.progress import Reporter, quiet
from benchcore.results import schema
from benchcore.results.records import git_revision, hostname, timestamp
from benchcore.units import format_size
from iobench import fio, moved
from iobench.mounts import Mount, disk_bytes, mount_of
from iobench.profiles import fio_directory, job_file
from iobench.safety import MountLock, ScratchDir, check_target, probe_direct, sigterm_as_interrupt, stale_dirs


@dataclasses.dataclass
class Target:
    path: str     # PATH resolved: where the data really goes
    mount: Mount


def say(text):
    """Progress and warnings go to stderr, so stdout stays a table, JSON or CSV."""
    click.echo(text, err=True)


@contextlib.contextmanager
def progress(text, expect_s=None, steps=1, unit=None, follow=None):
    """What runs (fio, torchrun) while it runs, on stderr (benchcore.progress): a bar on a terminal; otherwise the
    text when it starts, then a line every 10 s with the step, the time elapsed and left (expect_s: its runtime,
    where fixed; steps of a unit: the time one took, and the time left from those done); nothing with --quiet.
    follow: the file the workers announce their steps in (benchcore.progress.announce). Yields the Reporter."""
    if not sys.stderr.isatty() and not quiet():
        say(text)
    with Reporter(text, [1] * steps, expect_s=expect_s, unit=unit) as shown:
        if follow:   # the rate counts from the workers' first step: their start-up is no step's
            shown.detail("starting the ranks")
            shown.follow(follow)
        else:
            shown.step(0, text)
        yield shown


def record(run_id, target, **fields):
    """An iobench measurement on target (benchcore.results.schema): its mount and context, then fields."""
    return schema.measurement("iobench", run_id=run_id, mount=target.path, fs_type=target.mount.fs_type,
                              storage_class=target.mount.storage_class, hosts=[hostname()], timestamp=timestamp(),
                              mount_point=target.mount.mount_point, device=target.mount.device,
                              suite_revision=git_revision(), **fields)


def event(run_id, path, kind, reason):
    """A non-measurement record (refused input, failed fio run)."""
    return schema.event("iobench", kind, reason, run_id=run_id, mount=path)


def check_targets(paths, need, run_id, writer):
    """Resolve and check every PATH before any fio starts (need None: --dry-run, no room needed);
    a refusal is recorded, then raised. Warns about directories a dead run left under PATH or the mount's root."""
    targets = []
    for path in paths:
        real = os.path.realpath(path)
        try:
            if any(ord(c) < 32 or c == "\x7f" for c in real):
                raise UserError(f"{path!r} contains a control character (newline, tab, ...): iobench refuses it, "
                                f"since its printed fio commands and job files could not carry it unchanged")
            if real in (t.path for t in targets):
                raise UserError(f"{path} is given twice (it is {real})")
            mount = mount_of(real)
            check_target(real, need, mount)
        except UserError as exc:
            if writer:
                writer.write(event(run_id, real, "refused", str(exc)))
            raise
        for stale, marker, size in [s for d in dict.fromkeys((real, mount.mount_point)) for s in stale_dirs(d)]:
            say(f"warning: {name(stale)} ({format_size(size, approx=True)}) was left by iobench run "
                f"{shown(marker['run_id'], 80)}, which is no longer running; remove it with: iobench clean "
                f"{name(shlex.quote(str(stale)))}")
        targets.append(Target(real, mount))
    return targets


class JsonKeeper:
    """--keep-json: fio's raw JSON of each fio run, next to the --out file: OUT.<run-id>.<n>.fio.json."""

    def __init__(self, out, run_id):
        self.prefix, self.count, self.saved = f"{out}.{run_id}", 0, []

    def save(self, data, profile, mount):
        self.count += 1
        path = f"{self.prefix}.{self.count}.fio.json"
        write_new(path, lambda f: json.dump({"iobench_profile": profile, "iobench_mount": mount, **data}, f,
                                            indent=1), "--keep-json")
        self.saved.append(path)


def rerun_line(directory, jobfile, *fio_args):
    """The shell line (shlex-quoted) that does what iobench does: fresh directory, fio in it, removed."""
    d = shlex.quote(str(directory))
    fio = shlex.join(["fio", "--output-format=json", fio_directory(directory), *fio_args, str(jobfile)])
    return f"mkdir -- {d} && {fio}; rm -r -- {d}"


def dry_run(targets, jobs, run_id, command):
    """Print one fio job file that plain fio runs as iobench would: the profiles one after another."""
    header = [f"iobench {command} --dry-run (run {run_id}): profiles {', '.join(j.profile for j in jobs)}, "
              f"run one after another (stonewall), each reported as its own group (new_group).",
              "Save this as ckpt.fio and rerun with plain fio, from the directory that holds it:"]
    header += [f"  {rerun_line(os.path.join(t.path, f'iobench-{run_id}'), 'ckpt.fio')}"
               f"    # {t.path} ({t.mount.fs_type}, {t.mount.storage_class})" for t in targets]
    if any(j.direct for j in jobs):
        header.append("direct=1 assumes the mount accepts O_DIRECT (a real run probes it first)")
    sys.stdout.write(job_file(jobs, header))


@dataclasses.dataclass(frozen=True)
class Sharing:
    """What to do when another iobench measures the same mount: --concurrent, --wait SECONDS."""
    concurrent: bool = False
    wait: int = 0


def locks(targets, run_id, sharing):
    """One MountLock per distinct mount, entered; returns (ExitStack, any mount busy)."""
    stack = contextlib.ExitStack()
    held = {}
    try:
        for target in targets:
            if target.mount.dev not in held:
                held[target.mount.dev] = stack.enter_context(MountLock(target.mount, run_id, sharing.concurrent,
                                                                          sharing.wait, say))
    except BaseException:
        stack.close()
        raise
    return stack, any(lock.busy for lock in held.values())


def run_jobs(targets, jobs, run_id, timeout, keep, writer, sharing=Sharing(), keep_json=None):
    """Run every job on every target, one target's private directory at a time; returns the records."""
    version = fio.fio_version()
    records = []
    stack, busy = locks(targets, run_id, sharing)
    with stack, sigterm_as_interrupt():
        for target in targets:
            with ScratchDir(target.path, run_id, keep) as scratch:
                direct_ok, why = probe_direct(scratch.path)
                wanted = [j.profile for j in jobs if j.direct]
                if not direct_ok and wanted:
                    say(f"warning: {target.path} ({target.mount.fs_type}) refuses O_DIRECT ({why}); "
                        f"{', '.join(wanted)} run buffered and are recorded with direct=0: "
                        f"the page cache may flatter them")
                for i, job in enumerate(jobs, 1):
                    records += _run_one(target, job, direct_ok, scratch, run_id, timeout, version, writer,
                                        f"[{i}/{len(jobs)}]", busy, keep_json)
            if keep:
                say(f"kept {scratch.shown}")
    return records


def _run_one(target, job, direct_ok, scratch, run_id, timeout, version, writer, step, busy, keep_json):
    direct_requested = job.direct
    if job.direct and not direct_ok:
        job = dataclasses.replace(job, options={**job.options, "direct": 0})
    jobname = scratch.path / f"{job.profile}.fio"    # in the held private directory: nobody else's to swap
    write_new_text(jobname, job_file([job], [f"iobench {run_id}: {job.profile}"]), "job file")
    runtime = float(str(job.options["runtime"]).rstrip("s")) if job.options.get("time_based") else None  # '5s'
    with progress(f"iobench: {step} {job.profile} on {target.path} ({target.mount.fs_type}, "
                  f"{target.mount.storage_class}){f' ~{runtime:g} s' if runtime else ''}", runtime):
        return _measure(target, [fio_directory(scratch.path), jobname], scratch, run_id, timeout, version, writer,
                        job.profile, direct_requested, busy, keep_json)


RUN_ARGS = ("--thread", "--lat_percentiles=1")  # a user's jobs as threads of one fio (see GLOBAL_OPTIONS)


def run_file(target, jobpath, text, run_id, timeout, keep, writer, sharing=Sharing(), keep_json=None):
    """`iobench run`: a user's job file, the text that was checked (fio reads a copy of it in the private directory,
    never the user's path again, which another user may have swapped since), in a private directory on target;
    the records."""
    version = fio.fio_version()
    stack, busy = locks([target], run_id, sharing)
    with stack, sigterm_as_interrupt(), ScratchDir(target.path, run_id, keep) as scratch:
        checked = scratch.path / "job.fio"
        write_new_text(checked, text, "job file")
        with progress(f"iobench: {os.path.basename(jobpath)} on {target.path} ({target.mount.fs_type}, "
                      f"{target.mount.storage_class})"):
            records = _measure(target, [fio_directory(scratch.path), *RUN_ARGS, checked], scratch, run_id, timeout,
                               version, writer, busy=busy, keep_json=keep_json)
    if keep:
        say(f"kept {scratch.shown}")
    return records


def device_moved(before, after):
    """{device_read_bytes, device_write_bytes} between two disk_bytes() samples (the whole device: other
    processes' I/O counts too); {} when the mount has no block device."""
    if before is None or after is None:
        return {}
    return {"device_read_bytes": after[0] - before[0], "device_write_bytes": after[1] - before[1]}


def _measure(target, args, scratch, run_id, timeout, version, writer, profile=None, direct_requested=None,
             busy=False, keep_json=False):
    """Run fio once in scratch; records (profile: the job's name unless given); a failure is recorded, then raised."""
    what = f"{profile or 'fio'} on {target.path}"
    counter = moved.counter_for(target.path)      # what proves the storage moved the bytes (iobench/moved.py)
    try:
        before, counted = disk_bytes(target.mount.disks), counter.sample()
        data = fio.run_fio(args, timeout, cwd=scratch.path, what=what)
        device, counted = device_moved(before, disk_bytes(target.mount.disks)), (counted, counter.sample())
    except UserError as exc:
        if writer:
            writer.write(event(run_id, target.path, "failed", str(exc)))
        raise
    return fio_records(target, data, run_id, version, writer, profile, direct_requested, busy, keep_json, device,
                       served=(counter, *counted))


def served_fields(found, counter, before, after):
    """{direction: served_by, bytes_moved_ratio, byte_counter, served_reason} of one fio run's measurements: the
    bytes the mount's counter (iobench/moved.py, as model-ckpt's) saw move in each direction over the payload fio
    reports there (every job of the run: the counter sees them all). Below moved.MIN_MOVED a cache served it (a
    read of files fio just laid out, a buffered write not yet written back); memory (tmpfs) is never storage;
    without a counter: unproven, and why."""
    out = {}
    for direction in dict.fromkeys(m.get("direction") for m in found):
        payload = sum(m.get("io_bytes") or 0 for m in found if m.get("direction") == direction)
        seen = counter.moved(before, after, direction)
        by, ratio = moved.verdict(seen.get("bytes"), payload, memory="memory" in seen)
        out[direction] = {"served_by": by, "bytes_moved_ratio": ratio, "byte_counter": counter.describe(),
                          "served_reason": seen.get("reason") or seen.get("memory")}
    return out


def fio_records(target, data, run_id, version, writer, profile=None, direct_requested=None, busy=False,
                keep_json=None, moved=None, served=None, **extra):
    """The records of one fio run's JSON, written as made (moved: device_moved() around the run, kept where the
    run has one measurement; served: (moved.Counter, its samples before and after the run): each record's
    served_fields; extra: fields for every record); a job that failed is recorded, then raised."""
    try:
        if keep_json:
            keep_json.save(data, profile or "run", target.path)
        found = fio.measurements(data)
    except UserError as exc:
        if writer:
            writer.write(event(run_id, target.path, "failed", str(exc)))
        raise
    proof = served_fields(found, *served) if served else {}
    records = [record(run_id, target, profile=profile or m["job"], fio_version=version,
                      direct_requested=m["direct"] if direct_requested is None else direct_requested,
                      concurrent=busy, **m, **((moved or {}) if len(found) == 1 else {}),
                      **proof.get(m.get("direction"), {}), **extra)
               for m in found]
    for rec in records:
        if writer:
            writer.write(rec)
    return records
