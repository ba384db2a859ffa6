"""Any results as records: the suite's JSONL, nccl-tests/rccl-tests logs, fio JSON of any version.

`load(path)` tells the three apart and converts foreign files (`import`); `load_frame(paths)` gives a pandas
DataFrame for notebooks, reports and exports. A file that is none of these is refused in one line naming it
and why; the other files still load. Identities (what makes two measurements the same thing) and the metric
each tool is compared on live here too, one table per tool.
"""
import hashlib
import json
import re
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

from benchcore.errors import UserError
from benchcore.importers import fio_json as fiojson
from benchcore.importers import nccl_json as nccljson
from benchcore.importers import nccl_text as nccltests
from benchcore.inputs import MAX_RECORD_BYTES, clipped, name, read_bytes, regular_file, shown, text_blocks
from benchcore.results import schema
from benchcore.results.records import read_records
from benchcore.units import format_size, readable_size

TOOLS = ("commbench", "iobench")


@dataclass
class Loaded:
    path: str
    format: str                 # records, nccl-tests, nccl-tests-json, rccl-tests-json, fio-json
    records: list = field(default_factory=list)   # measurements and events


FIO_JSON_MAX_BYTES = 64 << 20   # fio's JSON is read whole: 64 MiB holds thousands of jobs (about 6 KB each)
SNIFF_BYTES = 64 << 10          # what is read first to tell the foreign formats apart
SNIFF_LINES = 20                # the suite's JSONL: one of its first lines is a record (a torn line may lead)
# how the record writer starts every line (records.dumps: "tool" first): a record too deep to parse still says so
RECORD_START = re.compile(rb'\s*\{\s*"tool"\s*:\s*"(?:commbench|iobench)"')


def _run_id(path):
    """The run id of a foreign file: its name and the hash of its bytes (read in chunks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return f"{Path(path).stem}-{digest.hexdigest()[:8]}"


def _is_records(f):
    """Whether the file f (binary, at its start) is the suite's JSONL: one of its first SNIFF_LINES lines that are
    not blank is a record of either tool, each line read whole up to MAX_RECORD_BYTES (a 5,000-node run's record
    line is 87 KB: a sniff of the first 64 KiB never saw one whole), and no more than MAX_RECORD_BYTES read after the
    first line. A line the writer began (RECORD_START) counts even when it is cut or too deep to parse: the records'
    reader then skips it with a warning naming it, never another format's error."""
    seen = 0
    while seen < SNIFF_LINES:
        line = f.readline(MAX_RECORD_BYTES)
        if not line:
            return False
        if not line.strip():
            continue
        if RECORD_START.match(line):
            return True
        try:
            rec = json.loads(line) if line.lstrip().startswith(b"{") else None
        except (ValueError, RecursionError):
            rec = None
        if isinstance(rec, dict) and rec.get("tool") in TOOLS:
            return True
        seen += 1
        if f.tell() > MAX_RECORD_BYTES:
            return False
    return False


def _fio(path, run_id):
    """The records and events of fio's JSON (read whole, up to FIO_JSON_MAX_BYTES)."""
    text = read_bytes(path, "fio JSON", FIO_JSON_MAX_BYTES).decode("utf-8", errors="replace")
    data, start = fiojson.find_json(text)
    version = clipped(data.get("fio version"))
    signal = fiojson.interrupted_by(text)
    results = fiojson.job_results(data)
    lines = fiojson.job_lines(text, start, len(results))
    out = []
    for (job, job_name, opts, error, found), line in zip(results, lines):
        job_name = clipped(job_name)
        mount = clipped(data.get("iobench_mount") or opts.get("directory") or opts.get("filename"))
        where = dict(source_file=path, source_format="fio-json", source_line=line)
        hosts = clipped([job["hostname"]]) if job.get("hostname") else None
        if error:
            out.append(schema.event("iobench", "failed", fiojson.error_text(job_name, error), run_id=run_id,
                                    mount=mount, job=job_name, hosts=hosts, **where))
            continue
        profile = data.get("iobench_profile") if data.get("iobench_profile") not in (None, "run") else None
        for m in map(clipped, found):
            rec = schema.measurement("iobench", run_id=run_id, mount=mount, profile=clipped(profile) or m["job"],
                                     fio_version=version, hosts=hosts, timestamp=fiojson.fio_timestamp(data),
                                     **where, **m)
            if signal is not None:
                rec["interrupted"] = True
            out.append(rec)
    return out


def _nccl(path, run_id, collective=None, lines=False):
    """The records and events of an nccl-tests log, streamed line by line (lines: see records_of)."""
    with open(path, "rb") as f:
        for item in nccltests.stream(text_blocks(f), path, run_id, collective, lines):
            if isinstance(item, tuple):
                kind, reason, line, collective, hosts = item
                item = schema.event("commbench", kind, reason, run_id=run_id, collective=collective, hosts=hosts,
                                    source_file=path, source_format=nccltests.FORMAT, source_line=line)
            yield item


def records_of(path, collective=None, lines=False):
    """(format, records) of one file, records an iterator (an nccl-tests log is read as it is consumed: any
    length in bounded memory); UserError naming the file and why it is refused, raised before anything is read
    when the file is unusable, else while the records are read. collective: nccl-tests results' collective where
    the file says none (import --collective); lines: an nccl-tests log's row records as their JSON lines, made
    without a dict (import: records.dumps writes them as they are)."""
    size = regular_file(path, "input").st_size
    try:
        with open(path, "rb") as f:
            head = f.read(SNIFF_BYTES)
            f.seek(0)
            own = _is_records(f)
    except OSError as exc:
        raise UserError(f"{name(path)}: {exc.strerror}") from None
    text = head.decode("utf-8", errors="replace")
    if not text.strip():
        raise UserError(f"{name(path)}: empty file")
    if own:
        return "records", iter([r for r in read_records(path) if r.get("tool") in TOOLS])
    fmt = nccljson.kind(text)
    if fmt and size > nccljson.MAX_BYTES:      # read whole: refused before it is read (or hashed for its run id)
        raise UserError(f"{name(path)}: {size} bytes of {fmt}, more than the {nccljson.MAX_BYTES} this reads whole")
    if fmt:
        return fmt, _refusing(path, fmt, partial(nccljson.records, collective=collective))
    looks_json = text.lstrip().startswith("{") or '"fio version"' in text
    if looks_json:
        return "fio-json", _refusing(path, "fio-json", _fio)
    return nccltests.FORMAT, _refusing(path, nccltests.FORMAT, partial(_nccl, collective=collective,
                                                                             lines=lines))


def _refusing(path, fmt, convert):
    """convert(path, run_id)'s records, a UserError raised while they are read prefixed with the file (never
    with its content: a file that is not a result may be anything, a secret too); fio's JSON that is not as fio
    writes it is refused the same way."""
    try:
        yield from convert(str(path), _run_id(path))
    except ValueError as exc:
        if fmt != "fio-json":
            raise
        raise UserError(f"{name(path)}: not usable fio JSON: {shown(str(exc))}") from None
    except UserError as exc:
        raise UserError(f"{name(path)}: {exc}") from None


def load(path, collective=None):
    """Loaded(path, format, records) of one file; UserError naming the file and why it is refused. collective: that
    of nccl-tests tables whose log does not name it (import's --collective)."""
    fmt, records = records_of(path, collective)
    return Loaded(str(path), fmt, list(records))


def load_many(paths, collective=None):
    """(records of every file that loads, [one-line refusal, ...]) — a bad file does not stop the others."""
    records, refused = [], []
    for path in expand(paths):
        try:
            records += load(path, collective).records
        except UserError as exc:
            refused.append(str(exc))
    return records, refused


def expand(paths):
    """Files as given; a directory stands for the regular files in it (sorted), never a symbolic link there (a
    link to /etc/shadow in a shared results directory is not a result of it)."""
    out = []
    for path in paths:
        p = Path(path)
        out += sorted(str(f) for f in p.iterdir() if f.is_file() and not f.is_symlink()) if p.is_dir() else [str(path)]
    return out


def measurements(records):
    return [r for r in records if not r.get("event") and r.get("tool") in TOOLS]


def load_frame(paths, events=False):
    """A pandas DataFrame of the records in paths (records JSONL, nccl-tests logs, fio JSON, mixed); objects
    (env, versions) stay objects. UserError when a file is refused."""
    import pandas as pd
    records, refused = load_many(paths)
    if refused:
        raise UserError("; ".join(refused))
    return pd.DataFrame(records if events else measurements(records))


# What makes two measurements the same thing, and what they are compared on.
# Variables that pick interfaces or logging, not the configuration measured:
NOT_CONFIG = re.compile(r"(SOCKET_IFNAME|ASYNC_ERROR_HANDLING|DEBUG|DEBUG_FILE|DEBUG_SUBSYS)$")


def env_config(rec):
    """The environment configuration a commbench record was measured in ('' = defaults)."""
    if rec.get("sweep_config"):
        return str(rec["sweep_config"])
    env = rec.get("env") or {}
    return ",".join(f"{k}={v}" for k, v in sorted(env.items()) if not NOT_CONFIG.search(k))


@dataclass(frozen=True)
class Tool:
    identity: tuple       # the fields that define a measurement (COMPUTED ones computed): joins never pool across them
    group: tuple          # fields naming the summary group
    metric: str
    lower_is_better: bool
    spread: tuple         # (min field, max field) of one measurement, when it has them
    unit: str
    shown: tuple          # the fields a diff shows old and new of (with the metric it judges)


TOOL = {
    "commbench": Tool(("collective", "strategy", "pattern", "phase", "size_bytes", "dtype", "op", "root", "in_place",
                       "chunk_bytes", "inflight", "compress", "buckets", "compute_ratio", "gemm", "compute_kernel",
                       "env_config", "nodes", "emulated", "world_size", "backend", "launcher", "topology", "host",
                       "peer_host"),
                      ("pattern", "strategy", "collective"), "time_us", True, ("time_us_min", "time_us_max"), "us",
                      ("time_us", "busbw_gbps")),
    # iobench: the storage (device, fs type, class), never the directory, unless no device is known (imported fio)
    "iobench": Tool(("profile", "rw", "direction", "bs_bytes", "iodepth", "numjobs", "direct", "size_bytes",
                     "ioengine", "device", "fs_type", "storage_class", "directory"),
                    ("profile",), "bw_mbps", False, ("bw_mbps_min", "bw_mbps_max"), "MB/s", ("bw_mbps", "lat_p99_us")),
}


COMPUTED = {"env_config": env_config,
            # the path a record measured stands for its storage only where no device says what that is
            "directory": lambda rec: None if rec.get("device") else rec.get("mount")}


def identity(rec):
    tool = TOOL[rec["tool"]]
    return (rec["tool"],) + tuple(COMPUTED[k](rec) if k in COMPUTED else _hashable(rec.get(k)) for k in tool.identity)


def _hashable(v):
    return json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else v


def group_of(rec):
    tool = TOOL[rec["tool"]]
    return next((str(rec[k]) for k in tool.group if rec.get(k)), "?")


def label(rec, leave=()):
    """A short human name of a record's identity; leave: the parts a table shows in columns of their own (group,
    phase, size, place; iobench: profile, direction, bs)."""
    if rec["tool"] == "commbench":
        parts = [("group", group_of(rec)), ("phase", rec.get("phase")),
                 ("size", readable_size(rec["size_bytes"]) if rec.get("size_bytes") else "0"),
                 ("dtype", rec.get("dtype")), ("op", rec.get("op")),
                 ("root", f"root {rec['root']}" if rec.get("root") is not None else None),
                 ("place", {True: "in-place", False: "out-of-place"}.get(rec.get("in_place"))),
                 ("chunk", f"chunk {format_size(rec['chunk_bytes'])}" if rec.get("chunk_bytes") else None),
                 ("env", env_config(rec) or None),
                 ("pair", f"{rec['host']}-{rec['peer_host']}" if rec.get("peer_host") else None),
                 ("ranks", f"{rec['world_size']} ranks" if rec.get("world_size") else None),
                 ("nodes", f"{rec['nodes']} {'emulated ' if rec.get('emulated') else ''}nodes"
                  if rec.get("nodes") and rec["nodes"] > 1 else None)]
    else:
        parts = [("group", rec.get("profile")),
                 ("direction", rec.get("direction") if rec.get("direction") != rec.get("rw") else None),
                 ("rw", rec.get("rw")), ("bs", f"bs {format_size(rec['bs_bytes'])}" if rec.get("bs_bytes") else None),
                 ("qd", f"qd{rec['iodepth']}" if rec.get("iodepth") else None),
                 ("jobs", f"x{rec['numjobs']}" if rec.get("numjobs") and rec["numjobs"] > 1 else None),
                 ("direct", "direct" if rec.get("direct") else None),
                 ("mount", f"on {rec.get('mount')}" if rec.get("mount") else None),
                 ("storage", f"({rec['storage_class']})" if rec.get("storage_class") else None)]
    return " ".join(str(p) for k, p in parts if p not in (None, "") and k not in leave)
