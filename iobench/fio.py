"""Run the real fio binary and turn its JSON into measurements.

Units in fio 3.x JSON: `bw` KiB/s, `bw_bytes` B/s, `lat_ns`/`clat_ns` mean and percentiles in ns,
`runtime` ms. Measurements use us and MB/s (1e6 B/s). fio may print notes or errors before its
JSON on stdout, so parsing starts at the JSON object; stderr is kept apart for error messages.
"""
import json
import re
import shutil

from benchcore import procs
from benchcore.errors import UserError
from benchcore.procs import one_line
from iobench.jobfile import plain_size, working_set

INSTALL_HINT = "fio not found on PATH: install it (Debian/Ubuntu: apt-get install fio; RHEL: dnf install fio)"
PERCENTILES = {"lat_p50_us": "50.000000", "lat_p99_us": "99.000000", "lat_p999_us": "99.900000"}
FSYNC_PERCENTILES = {"fsync_lat_p99_us": "99.000000", "fsync_lat_p999_us": "99.900000"}


def fio_binary():
    path = shutil.which("fio")
    if path is None:
        raise UserError(INSTALL_HINT)
    return path


def fio_version():
    return procs.run([fio_binary(), "--version"], 30).stdout.strip() or "unknown"


def run_fio(args, timeout, cwd=None, what="fio"):
    """Run fio with args (after --output-format=json); return its parsed JSON or raise UserError."""
    done = procs.run([fio_binary(), "--output-format=json", *args], timeout, cwd=cwd)
    if done.timed_out:
        raise UserError(f"{what}: fio did not finish within {timeout} s and was stopped; "
                        f"fio stderr: {one_line(done.stderr)}")
    if done.returncode < 0:
        raise UserError(f"{what}: fio was killed by signal {-done.returncode}; fio stderr: {one_line(done.stderr)}")
    if done.returncode != 0:
        detail = one_line(done.stderr) if done.stderr.strip() else one_line(done.stdout)
        raise UserError(f"{what}: fio failed (exit {done.returncode}): {detail}")
    return parse_output(done.stdout, done.stderr, what)


def parse_output(stdout, stderr="", what="fio"):
    """fio's JSON from stdout that may start with note/warning lines; UserError if none or truncated."""
    starts = [m.start() for m in re.finditer(r"^\{", stdout, re.MULTILINE)] or \
        ([stdout.index("{")] if "{" in stdout else [])
    if not starts:
        raise UserError(f"{what}: fio printed no JSON; stdout: {one_line(stdout)}; stderr: {one_line(stderr)}")
    error = None
    for start in starts:
        try:
            data, _ = json.JSONDecoder().raw_decode(stdout[start:])
        except json.JSONDecodeError as exc:
            error = error or exc
            continue
        if isinstance(data, dict) and "jobs" in data:
            return data
    raise UserError(f"{what}: fio's JSON output is truncated or malformed ({error or 'no jobs'}); "
                    f"stderr: {one_line(stderr)}")


def _us(ns):
    return None if ns is None else ns / 1000.0


def _latency(section):
    """(kind, stats): total latency when fio reports its percentiles, else completion latency."""
    lat = section.get("lat_ns") or {}
    if lat.get("percentile"):
        return "lat", lat
    return "clat", section.get("clat_ns") or {}


def percentile(stats, key):
    """A percentile in us, or None when too few samples lie beyond it (fewer than 1/(1-p) in all)."""
    fraction = float(key) / 100
    samples = stats.get("N") or 0
    value = (stats.get("percentile") or {}).get(key)
    return _us(value) if value is not None and samples * (1 - fraction) >= 1 - 1e-9 else None


def _job_names(jobs):
    """fio's job names, numbered name.0, name.1, ... where one name has several jobs (numjobs, no group_reporting)."""
    names = [j.get("jobname") for j in jobs]
    seen = {}
    out = []
    for name in names:
        if names.count(name) > 1:
            out.append(f"{name}.{seen.setdefault(name, 0)}")
            seen[name] += 1
        else:
            out.append(name)
    return out


def measurements(data):
    """One dict per job and direction that moved data: the measured fields of a record."""
    out = []
    jobs = data.get("jobs", [])
    for job, name in zip(jobs, _job_names(jobs)):
        if job.get("error"):
            raise UserError(f"fio job {job.get('jobname')!r} ended with error {job['error']}")
        opts = {**data.get("global options", {}), **job.get("job options", {})}
        sync = job.get("sync") or {}
        for direction in ("read", "write", "trim"):
            section = job.get(direction) or {}
            if not section.get("total_ios"):
                continue
            kind, lat = _latency(section)
            numjobs = int(opts.get("numjobs", 1))
            runtime_s = section["runtime"] / 1000.0
            rec = {"job": name, "rw": opts.get("rw", "read"), "direction": direction,
                   "bs_bytes": plain_size(opts.get("bs", "4k")), "iodepth": int(opts.get("iodepth", 1)),
                   "numjobs": numjobs, "direct": int(opts.get("direct", 0)),
                   "size_bytes": working_set(opts), "ioengine": opts.get("ioengine"), "io_bytes": section["io_bytes"],
                   "runtime_s": runtime_s, "iops": section["iops"],
                   "bw_mbps": section["bw_bytes"] / 1e6, "lat_kind": kind, "lat_mean_us": _us(lat.get("mean")),
                   "lat_samples": lat.get("N")}
            rec.update({key: percentile(lat, p) for key, p in PERCENTILES.items()})
            if sync.get("total_ios"):
                sync_lat = sync.get("lat_ns") or {}
                rec["fsync_lat_mean_us"] = _us(sync_lat.get("mean"))
                rec["fsync_samples"] = sync_lat.get("N")
                rec.update({key: percentile(sync_lat, p) for key, p in FSYNC_PERCENTILES.items()})
            if int(opts.get("end_fsync", 0)) and direction == "write" and job.get("job_runtime"):
                # fio times the end fsync inside the job but reports no latency for it: a rank's mean
                # runtime minus the time its write() calls took.
                per_rank_s = job["job_runtime"] / 1000.0 / numjobs
                writes_s = section["total_ios"] / numjobs * (rec["lat_mean_us"] or 0) / 1e6
                rec["end_fsync_s"] = max(0.0, per_rank_s - writes_s)
            if "nrfiles" in opts and plain_size(opts.get("filesize", "")) == rec["bs_bytes"] and runtime_s:
                files = int(opts["nrfiles"]) * numjobs  # one write per file: create, write, fsync, close
                rec.update(files=files, files_per_s=files / runtime_s,
                           file_lat_mean_us=runtime_s * 1e6 * numjobs / files)
            out.append(rec)
    return out
