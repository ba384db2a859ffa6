"""Checkpoint-shaped fio workloads: one table of profiles, and the fio job files built from it."""
from dataclasses import dataclass

from benchcore.errors import UserError
from benchcore.units import format_size, parse_size


@dataclass(frozen=True)
class Profile:
    name: str
    about: str
    options: dict            # fio job options before overrides
    size: str                # working set per node (all jobs together)
    quick_size: str
    runtime: int = None      # time-based seconds; None: size-based (runtime then only caps)
    quick_runtime: int = None
    ranks: bool = False      # numjobs = --ranks (one file per rank)
    fileset: str = None      # profiles with the same fileset share their files
    per_file: bool = False   # one file per block: nrfiles = size / bs, each written once
    direct_option: bool = False  # --direct turns O_DIRECT on (what high-end checkpoint writers use)


SHARD_FILES = {"filename_format": "shard.$jobnum"}

PROFILES = {p.name: p for p in (
    Profile("small-random-write",
            "4 KiB random writes, libaio QD64, O_DIRECT, time-based (optimizer/metadata shards)",
            {"rw": "randwrite", "bs": "4k", "ioengine": "libaio", "iodepth": 64, "direct": 1,
             "time_based": 1},
            size="1G", quick_size="64M", runtime=120, quick_runtime=5),
    Profile("shard-write",
            "sequential 1 MiB writes, one file per rank, fsync at the end (end_fsync=1)",
            {"rw": "write", "bs": "1m", "ioengine": "psync", "iodepth": 1, "direct": 0, "end_fsync": 1,
             **SHARD_FILES},
            size="4G", quick_size="256M", ranks=True, fileset="shards", direct_option=True),
    Profile("restore-read",
            "sequential 1 MiB reads of the shard files, O_DIRECT, libaio QD16 (page cache bypassed)",
            {"rw": "read", "bs": "1m", "ioengine": "libaio", "iodepth": 16, "direct": 1, "invalidate": 1,
             **SHARD_FILES},
            size="4G", quick_size="256M", ranks=True, fileset="shards"),
    Profile("metadata",
            "many small files, each created, written once and fsynced (shard-per-tensor checkpoints)",
            {"rw": "write", "bs": "64k", "ioengine": "psync", "iodepth": 1, "direct": 0, "fsync": 1,
             "create_on_open": 1, "openfiles": 1, "file_service_type": "sequential"},
            size="256M", quick_size="16M", per_file=True),
)}

# thread=1: jobs are threads of one fio process (forked jobs call setsid() and would outlive a
# killed fio); group_reporting: one result for all numjobs; lat_percentiles: total-latency percentiles.
GLOBAL_OPTIONS = {"thread": 1, "group_reporting": 1, "lat_percentiles": 1}


def parse_profiles(text):
    """'shard-write,restore-read' -> profiles in registry order (restore-read reads what shard-write wrote)."""
    names = [n.strip() for n in text.split(",") if n.strip()] if text else list(PROFILES)
    unknown = [n for n in names if n not in PROFILES]
    if unknown:
        raise UserError(f"unknown profile {unknown[0]!r}; known: {', '.join(PROFILES)}")
    return [p for name, p in PROFILES.items() if name in names]


@dataclass
class Job:
    """One fio job section, ready to write out."""
    profile: str
    options: dict
    size_bytes: int          # working set of all jobs together
    fileset: str

    @property
    def direct(self):
        return int(self.options.get("direct", 0))


def build_job(profile, quick=False, size=None, runtime=None, bs=None, iodepth=None, jobs=None, ranks=8,
              direct=False):
    """The fio job for a profile with --quick and the overrides applied (None: profile default);
    direct: O_DIRECT for the profiles that write buffered by default and allow it (shard-write)."""
    opts = dict(profile.options)
    if direct and profile.direct_option:
        opts["direct"] = 1
    if bs is not None:
        opts["bs"] = format_size(bs).lower()
    if iodepth is not None:
        opts["iodepth"] = iodepth
    numjobs = jobs if jobs is not None else (ranks if profile.ranks else 1)
    block = parse_size(opts["bs"], "--bs")
    if int(opts.get("direct", 0)) and block % 512:
        raise UserError(f"--bs {block} is not a multiple of 512 bytes, which O_DIRECT ({profile.name}) needs")
    total = size if size is not None else parse_size(profile.quick_size if quick else profile.size)
    per_job = max(block, total // numjobs // block * block)
    if profile.per_file:
        opts.update(filesize=format_size(block).lower(), nrfiles=per_job // block)
    else:
        opts["size"] = format_size(per_job).lower()
    if numjobs > 1:
        opts["numjobs"] = numjobs
    seconds = runtime if runtime is not None else (profile.quick_runtime if quick else profile.runtime)
    if seconds is not None:
        opts["runtime"] = f"{seconds}s"
    return Job(profile.name, opts, per_job * numjobs, profile.fileset or profile.name)


def unlink_when_done(jobs, keep=False):
    """unlink=1 on the last job of each fileset (files gone once nothing later reads them); keep: none."""
    for i, job in enumerate(jobs):
        if not keep and all(later.fileset != job.fileset for later in jobs[i + 1:]):
            job.options["unlink"] = 1
    return jobs


def space_needed(jobs):
    """The most bytes the jobs' files hold at once, in order: a fileset is gone after a job with unlink=1."""
    live, peak = {}, 0
    for job in jobs:
        live[job.fileset] = max(live.get(job.fileset, 0), job.size_bytes)
        peak = max(peak, sum(live.values()))
        if job.options.get("unlink"):
            del live[job.fileset]
    return peak


def fio_directory(path):
    """fio's --directory= argument for path. On the command line fio takes the value verbatim (no
    comment cut at ';' or '#', no ${VAR} expansion, unlike job-file text) except ':', its list
    separator, written '\\:'. No path ever goes into job-file text. A held directory (/proc/PID/fd/N,
    benchcore.files.held_path) is a link to fio's lstat check, which refuses links: with a trailing slash it is the
    directory itself."""
    path = str(path)
    return "--directory=" + (path + "/" if path.startswith("/proc/") else path).replace(":", "\\:")


def job_section(job):
    """One profile's job section; stonewall + new_group: it runs after the one before, reported apart."""
    return [f"[{job.profile}]"] + [f"{k}={v}" for k, v in job.options.items()] + ["stonewall", "new_group"]


def job_file(jobs, header=()):
    """fio job file text for jobs, run one after the other; the directory comes from fio's command line."""
    lines = [f"; {line}" for line in header]
    lines += ["[global]"] + [f"{k}={v}" for k, v in GLOBAL_OPTIONS.items()]
    for job in jobs:
        lines += [""] + job_section(job)
    return "\n".join(lines) + "\n"
