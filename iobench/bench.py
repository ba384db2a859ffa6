"""Check every target first, then run fio jobs in a private directory per mount and make records."""
import contextlib
import dataclasses
import os
import sys

import click

from benchcore import schema
from benchcore.errors import UserError
from benchcore.records import git_revision, hostname, timestamp
from benchcore.report import console
from iobench import fio
from iobench.mounts import Mount, mount_of
from iobench.profiles import fio_path, job_file
from iobench.safety import ScratchDir, check_target, probe_direct, sigterm_as_interrupt


@dataclasses.dataclass
class Target:
    path: str     # PATH resolved: where the data really goes
    mount: Mount


def say(text):
    """Progress and warnings go to stderr, so stdout stays a table, JSON or CSV."""
    click.echo(text, err=True)


def progress(text):
    """A spinner with text on a terminal while fio runs; one plain line on stderr otherwise."""
    if sys.stderr.isatty():
        return console(stderr=True).status(text)
    say(text)
    return contextlib.nullcontext()


def record(run_id, target, **fields):
    """An iobench measurement on target (benchcore.schema): its mount and context, then fields."""
    return schema.measurement("iobench", run_id=run_id, mount=target.path, fs_type=target.mount.fs_type,
                              storage_class=target.mount.storage_class, hosts=[hostname()], timestamp=timestamp(),
                              mount_point=target.mount.mount_point, device=target.mount.device,
                              suite_revision=git_revision(), **fields)


def event(run_id, path, kind, reason):
    """A non-measurement record (refused input, failed fio run)."""
    return schema.event("iobench", kind, reason, run_id=run_id, mount=path)


def check_targets(paths, need, run_id, writer):
    """Resolve and check every PATH before any fio starts; a refusal is recorded, then raised."""
    targets = []
    for path in paths:
        real = os.path.realpath(path)
        try:
            mount = mount_of(real)
            check_target(real, need, mount)
        except UserError as exc:
            if writer:
                writer.write(event(run_id, real, "refused", str(exc)))
            raise
        targets.append(Target(real, mount))
    return targets


def dry_run(targets, jobs, run_id, command):
    """Print the fio job file(s) a run would use, runnable with plain fio."""
    for target in targets:
        directory = os.path.join(target.path, f"iobench-{run_id}")
        for job in jobs:
            header = [f"iobench {command} --dry-run: profile {job.profile} on {target.path} "
                      f"({target.mount.fs_type}, {target.mount.storage_class})",
                      f"rerun: mkdir {directory} && fio --output-format=json THIS_FILE; then rm -r {directory}"]
            if job.direct:
                header.append("direct=1 assumes the mount accepts O_DIRECT (a real run probes it first)")
            sys.stdout.write(job_file(job, directory, header) + "\n")


def run_jobs(targets, jobs, run_id, timeout, keep, writer):
    """Run every job on every target, one target's private directory at a time; returns the records."""
    version = fio.fio_version()
    records = []
    with sigterm_as_interrupt():
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
                                        f"[{i}/{len(jobs)}]")
            if keep:
                say(f"kept {scratch.path}")
    return records


def _run_one(target, job, direct_ok, scratch, run_id, timeout, version, writer, step):
    direct_requested = job.direct
    if job.direct and not direct_ok:
        job = dataclasses.replace(job, options={**job.options, "direct": 0})
    jobpath = scratch.path / f"{job.profile}.fio"
    jobpath.write_text(job_file(job, scratch.path, [f"iobench ckpt {run_id}: {job.profile} on {target.path}"]))
    eta = f" ~{job.options['runtime']}" if job.options.get("time_based") else ""
    with progress(f"iobench: {step} {job.profile} on {target.path} ({target.mount.fs_type}, "
                  f"{target.mount.storage_class}){eta}"):
        return _measure(target, [jobpath], scratch, run_id, timeout, version, writer, job.profile,
                        direct_requested)


def file_args(directory, jobpath):
    """fio arguments for a user's job file run inside directory (jobs as threads: see GLOBAL_OPTIONS)."""
    return [f"--directory={fio_path(str(directory))}", "--thread", "--lat_percentiles=1", jobpath]


def run_file(target, jobpath, run_id, timeout, keep, writer):
    """`iobench run`: a user's (checked) job file in a private directory on target; the records."""
    version = fio.fio_version()
    with sigterm_as_interrupt(), ScratchDir(target.path, run_id, keep) as scratch:
        with progress(f"iobench: {os.path.basename(jobpath)} on {target.path} ({target.mount.fs_type}, "
                      f"{target.mount.storage_class})"):
            records = _measure(target, file_args(scratch.path, jobpath), scratch, run_id, timeout, version, writer)
    if keep:
        say(f"kept {scratch.path}")
    return records


def _measure(target, args, scratch, run_id, timeout, version, writer, profile=None, direct_requested=None):
    """Run fio once; records (profile: the job's name unless given); a failure is recorded, then raised."""
    what = f"{profile or 'fio'} on {target.path}"
    try:
        found = fio.measurements(fio.run_fio(args, timeout, cwd=scratch.path, what=what))
    except UserError as exc:
        if writer:
            writer.write(event(run_id, target.path, "failed", str(exc)))
        raise
    records = [record(run_id, target, profile=profile or m["job"], fio_version=version,
                      direct_requested=m["direct"] if direct_requested is None else direct_requested, **m)
               for m in found]
    for rec in records:
        if writer:
            writer.write(rec)
    return records
