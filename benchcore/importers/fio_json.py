"""fio's --output-format=json, from every fio that writes it (2.0.10 on), as measurements in the suite's units.

iobench's own runs and `import` of users' files both read fio's JSON here. What fio reports changed with
its version (fio's stat.c history), and the version string decides how a document is read, never the
magnitude of a number:

  io_bytes       KiB before fio 2.21 (io_kbytes appeared there and io_bytes became bytes)
  latencies      slat/clat/lat in us before fio 2.99 (3.0's prerelease); slat_ns/clat_ns/lat_ns in ns since
  bandwidth      bw in KiB/s in every version; bw_bytes in B/s only since fio 3.2
  samples        lat "N" only in later 3.x; total_ios since 2.21; neither before (percentiles kept as published)

Measurements use us, MB/s (1e6 B/s) and bytes. fio may print notes, errors or "fio: terminating on signal N"
before its JSON on stdout, so parsing starts at the JSON object.
"""
import collections
import datetime
import json
import os
import re
from dataclasses import dataclass

from benchcore.errors import UserError
from benchcore.inputs import key as key_of
from benchcore.inputs import shown
from benchcore.processes.procs import one_line
from benchcore.units import parse_size

# One name, one meaning: every latency or time figure of an iobench record -> (column header in every table and
# report, format, what it measures, as threshold verdicts say). Per-I/O latency, per-file time and end-fsync time
# are different quantities and never share a column.
TIME_FIGURES = {
    "lat_mean_us": ("I/O lat avg us", ".1f", "mean latency per I/O; fio's lat, or clat where lat_kind says so"),
    "lat_p50_us": ("I/O lat P50 us", ".1f", "median latency per I/O"),
    "lat_p99_us": ("I/O lat P99 us", ".1f", "99th percentile latency per I/O"),
    "lat_p999_us": ("I/O lat P99.9 us", ".1f", "99.9th percentile latency per I/O"),
    "lat_samples": ("I/Os", "d", "I/Os the per-I/O latencies summarise"),
    "file_lat_mean_us": ("per-file us", ".1f", "mean time per file in one job: create + write + fsync + close"),
    "files_per_s": ("files/s", ".0f", "files created, written, fsynced and closed per second, all jobs"),
    "fsync_lat_mean_us": ("fsync avg us", ".1f", "mean time per fsync() call"),
    "fsync_lat_p99_us": ("fsync P99 us", ".1f", "99th percentile time per fsync() call"),
    "fsync_samples": ("fsyncs", "d", "fsync() calls timed: one fewer per job than files, since fio issues "
                                     "fsync=1's fsync before a job's next write and its last write has none"),
    "end_fsync_s": ("end fsync s", ".4f", "mean seconds per job in the final fsync (end_fsync=1), MB/s includes it"),
}
PERCENTILES = {"lat_p50_us": "50.000000", "lat_p99_us": "99.000000", "lat_p999_us": "99.900000"}
FSYNC_PERCENTILES = {"fsync_lat_p99_us": "99.000000", "fsync_lat_p999_us": "99.900000"}
DIRECTIONS = ("read", "write", "trim", "mixed")   # mixed: unified_rw_reporting
INF = float("inf")
INTERRUPTED = re.compile(r"^fio: terminating on signal (\d+)", re.MULTILINE)

# (first fio version with the change, the change): the table the Units below are built from
SINCE = {"io_bytes_in_bytes": (2, 21), "latency_ns": (2, 99), "bw_bytes": (3, 2)}


@dataclass(frozen=True)
class Units:
    version: tuple
    io_bytes: int       # bytes per unit of io_bytes
    lat_key: str        # suffix of the latency objects: "" (us) or "_ns"
    lat_us: float       # us per latency unit
    bw_bytes: bool      # bw_bytes (B/s) present; else bw (KiB/s)


def units(version_text):
    """Units of a document written by fio version_text ('fio-3.33', 'fio-2.1.10-12-gabc'); UserError if unknown."""
    m = re.match(r"\s*fio-(\d+)\.(\d+)", str(version_text or ""))
    if not m:
        raise UserError("no fio version in the document (its \"fio version\" is not fio-X.Y): fio's units changed "
                        "between versions, so its numbers cannot be read")
    v = (int(m.group(1)), int(m.group(2)))
    ns = v >= SINCE["latency_ns"]
    return Units(v, 1 if v >= SINCE["io_bytes_in_bytes"] else 1024, "_ns" if ns else "", 0.001 if ns else 1.0,
                 v >= SINCE["bw_bytes"])


def plain_size(text):
    """A fio size option as bytes, or None when it is not a single size (ranges, percentages)."""
    try:
        return parse_size(text)
    except UserError:
        return None


def working_set(opts):
    """Bytes one job section's files hold: size, or filesize x nrfiles, times numjobs; None if not plain sizes."""
    per_job = plain_size(opts["size"]) if "size" in opts else None
    if per_job is None and "filesize" in opts:
        filesize = plain_size(opts["filesize"])
        per_job = filesize * int(opts.get("nrfiles", 1)) if filesize else None
    return per_job * int(opts.get("numjobs", 1)) if per_job else None


class NoJson(ValueError):
    """No JSON object at all (as opposed to a broken or foreign one)."""


def find_json(text):
    """(fio's JSON document, offset where it starts) in text that may hold other lines first; ValueError(why)."""
    if not text.strip():
        raise NoJson("empty")
    starts = [m.start() for m in re.finditer(r"^\s*\{", text, re.MULTILINE)] or \
        ([text.index("{")] if "{" in text else [])
    if not starts:
        raise NoJson("no JSON object")     # never the text: a file that is not fio's may be anything
    error, other = None, None
    for start in starts:
        try:
            data, _ = json.JSONDecoder().raw_decode(text[start:].lstrip())
        except json.JSONDecodeError as exc:
            error = error or exc
            continue
        except RecursionError:
            error = error or "nested too deep"
            continue
        if isinstance(data, dict) and isinstance(data.get("jobs"), list):
            return data, start
        other = other or data
    if other is not None:
        keys = ", ".join(map(key_of, list(other)[:5])) if isinstance(other, dict) else type(other).__name__
        raise ValueError(f"JSON without fio's \"jobs\" list (has: {keys}): not fio --output-format=json")
    raise ValueError(f"truncated or malformed ({error})")


def parse_output(stdout, stderr="", what="fio"):
    """fio's JSON from stdout that may start with note/warning lines; UserError if none or truncated."""
    try:
        return find_json(stdout)[0]
    except NoJson:
        raise UserError(f"{what}: fio printed no JSON; stdout: {one_line(stdout)}; stderr: {one_line(stderr)}") \
            from None
    except ValueError as exc:
        raise UserError(f"{what}: fio's JSON output is {exc}; stderr: {one_line(stderr)}") from None


def percentile(stats, key, to_us=0.001):
    """A percentile in us, or None when too few samples lie beyond it (fewer than 1/(1-p) in all).
    Without a sample count (old fio) the value is kept as published."""
    value = _number(_object(stats.get("percentile"), "percentile"), key, "percentile", required=False)
    if value is None:
        return None
    samples = _number(stats, "N", "latency", required=False)
    if samples is not None and samples * (1 - float(key) / 100) < 1 - 1e-9:
        return None
    return value * to_us


def _latency(section, u):
    """(kind, stats): total latency when fio reports its percentiles, else completion latency."""
    lat = _object(section.get("lat" + u.lat_key), "lat" + u.lat_key)
    if lat.get("percentile"):
        return "lat", lat
    return "clat", _object(section.get("clat" + u.lat_key), "clat" + u.lat_key)


def _job_names(jobs):
    """fio's job names, numbered name.0, name.1, ... where one name has several jobs (numjobs, no group_reporting)."""
    names = [str(j.get("jobname")) for j in jobs]
    counts, seen, out = collections.Counter(names), {}, []
    for name in names:
        if counts[name] > 1:
            out.append(f"{name}.{seen.setdefault(name, 0)}")
            seen[name] += 1
        else:
            out.append(name)
    return out


def _check_keys(section, u):
    """The version and the latency keys must agree: a document that disagrees was edited, not written by fio."""
    other = "" if u.lat_key else "_ns"
    if ("clat" + other) in section and ("clat" + u.lat_key) not in section:
        raise UserError(f"fio-{u.version[0]}.{u.version[1]} writes clat{u.lat_key or ''}, but the document has "
                        f"clat{other}: not as that fio version writes it")


def _object(value, where):
    """A JSON object of the document ({} where absent); UserError when it is something else."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise UserError(f"{where} is a JSON {type(value).__name__}, not an object: not as fio writes it")
    return value


def _number(section, key, where, required=True):
    """A number of the document (None where absent and not required); UserError when it is something else."""
    value = section.get(key)
    if value is None and not required:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value or value in (INF, -INF):
        raise UserError(f"{where}: {key} is {'missing' if value is None else 'not a number'}: not as fio writes it")
    return value


def _option(opts, key, default):
    """A whole-number fio option (numjobs, iodepth, ...) as int; UserError when it is not one."""
    try:
        return int(opts.get(key, default))
    except ValueError:
        raise UserError(f"option {key} is not a whole number: not as fio writes it") from None


def _direction(section, u, opts, known, sync, job, where):
    kind, lat = _latency(section, u)
    samples = lat.get("N", section.get("total_ios"))
    numjobs = _option(opts, "numjobs", 1) if known else None
    runtime_s = _number(section, "runtime", where) / 1000.0
    bw = _number(section, "bw_bytes", where) / 1e6 if u.bw_bytes else _number(section, "bw", where) * 1024 / 1e6
    mean = _number(lat, "mean", where, required=False)
    rec = {"rw": opts.get("rw", "read") if known else None,
           "bs_bytes": plain_size(opts.get("bs", opts.get("blocksize", "4k"))) if known else None,
           "iodepth": _option(opts, "iodepth", 1) if known else None, "numjobs": numjobs,
           "direct": _option(opts, "direct", 0) if known else None,
           "size_bytes": working_set(opts) if known else None, "ioengine": opts.get("ioengine"),
           "io_bytes": _number(section, "io_bytes", where) * u.io_bytes, "runtime_s": runtime_s,
           "iops": _number(section, "iops", where), "bw_mbps": bw, "lat_kind": kind,
           "lat_mean_us": mean * u.lat_us if mean is not None else None, "lat_samples": samples}
    rec.update({key: percentile({**lat, "N": samples}, p, u.lat_us) for key, p in PERCENTILES.items()})
    if sync.get("total_ios"):
        sync_lat = _object(sync.get("lat" + u.lat_key), "sync")
        sync_mean = _number(sync_lat, "mean", where, required=False)
        rec["fsync_lat_mean_us"] = sync_mean * u.lat_us if sync_mean is not None else None
        rec["fsync_samples"] = sync_lat.get("N", sync.get("total_ios"))
        rec.update({key: percentile(sync_lat, p, u.lat_us) for key, p in FSYNC_PERCENTILES.items()})
    if known and _option(opts, "end_fsync", 0) and section is job.get("write") and job.get("job_runtime"):
        # fio times the end fsync inside the job but reports no latency for it: a rank's mean
        # runtime minus the time its write() calls took.
        per_rank_s = _number(job, "job_runtime", where) / 1000.0 / numjobs
        writes_s = _number(section, "total_ios", where) / numjobs * (rec["lat_mean_us"] or 0) / 1e6
        rec["end_fsync_s"] = max(0.0, per_rank_s - writes_s)
    if known and "nrfiles" in opts and plain_size(opts.get("filesize", "")) == rec["bs_bytes"] and runtime_s:
        files = _option(opts, "nrfiles", 1) * numjobs  # one write per file: create, write, fsync, close
        rec.update(files=files, files_per_s=files / runtime_s, file_lat_mean_us=runtime_s * 1e6 * numjobs / files)
    return rec


def job_results(data):
    """[(job, name, options, error code, [measurement per direction that moved data])] per job in data."""
    u = units(data.get("fio version"))
    jobs = data.get("jobs", [])
    bad = next((i for i, job in enumerate(jobs) if not isinstance(job, dict)), None)
    if bad is not None:
        what = "null" if jobs[bad] is None else f"a JSON {type(jobs[bad]).__name__}"
        raise UserError(f"jobs[{bad}] is {what}, not an object: not as fio writes it")
    known = "global options" in data or any("job options" in j for j in jobs)   # fio < 2.3 lists no options
    out = []
    for job, name in zip(jobs, _job_names(jobs)):
        opts = {k: _scalar(v, k) for k, v in {**_object(data.get("global options"), "global options"),
                                               **_object(job.get("job options"), "job options")}.items()}
        found = []
        for direction in DIRECTIONS:
            where = f"job {shown(name, 60)!r} {direction}"
            section = _object(job.get(direction), where)
            _check_keys(section, u)
            moved = section.get("total_ios") if "total_ios" in section else section.get("io_bytes")
            if not moved or not section.get("runtime"):
                continue
            rec = _direction(section, u, opts, known, _object(job.get("sync"), "sync"), job, where)
            found.append({"job": name, "direction": direction, **rec})
        out.append((job, name, opts, job.get("error") or 0, found))
    return out


def _scalar(value, key):
    """A fio option's value: fio writes each as a string (a number or a flag in hand-made files)."""
    if isinstance(value, (dict, list)):
        raise UserError(f"option {key_of(key)} is a JSON {type(value).__name__}: not as fio writes it")
    return value


def error_text(name, code):
    try:
        why = os.strerror(int(code))
    except (ValueError, OverflowError):
        why = "unknown"
    return f"fio job {name!r} ended with error {code} ({why})"


def measurements(data):
    """One dict per job and direction that moved data: the measured fields of a record (iobench run);
    a job that ended with an error raises UserError."""
    out = []
    for _, name, _, error, found in job_results(data):
        if error:
            raise UserError(error_text(name, error))
        out += found
    return out


def fio_timestamp(data):
    """fio's own timestamp of the run (epoch seconds, since fio 2.2) as ISO 8601 UTC, or None."""
    stamp = data.get("timestamp")
    if not isinstance(stamp, (int, float)):
        return None
    try:
        return datetime.datetime.fromtimestamp(stamp, datetime.timezone.utc).isoformat(timespec="seconds")
    except (OverflowError, OSError, ValueError):   # not a time this machine can show
        return None


def job_lines(text, start, count):
    """1-based line numbers of the first `count` "jobname" keys after offset start (one per job, in order)."""
    lines, line, at = [], 1, start
    for m in re.finditer(r'"jobname"\s*:', text[start:]):
        line += text.count("\n", at, start + m.start())
        at = start + m.start()
        lines.append(line)
        if len(lines) == count:
            break
    return (lines + [None] * count)[:count]


def interrupted_by(text):
    """The signal number when fio said 'fio: terminating on signal N' (a run cut short), else None."""
    m = INTERRUPTED.search(text)
    return int(m.group(1)) if m else None
