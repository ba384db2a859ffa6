"""Records -> Prometheus' text exposition format (0.0.4), for node_exporter's textfile collector and a Pushgateway.

`--metrics FILE.prom` (commbench's measuring commands, iobench's) writes the run's metrics whole into FILE, a new
private file beside it renamed over it (benchcore/files.py replace_output), so the collector reads the old run or
this one, never half; one file per tool and job (name it so: commbench_pairs.prom). `--pushgateway URL` PUTs the
same text to URL/metrics/job/TOOL_COMMAND/instance/HOST (label values base64url in the path), to that URL only: no
proxy, no redirect followed, 10 s at most for the whole push (a deadline, not a timeout per read). A push that
fails is a warning line on stderr: the command's exit status is its run's (a verdict stands; the results are
written), never the Pushgateway's.

FAMILIES is the one table: a family's name (its unit in the name: gbps = 1e9 bytes/s, mbps = 1e6 bytes/s, us =
microseconds), help, labels, and which records give its samples. A family's samples with equal labels (repeats,
cycles, a node's pairings) are one sample, their median. Labels are bounded: sizes as bytes, counts, names; never
a run id or a time. No sample carries a timestamp (the textfile collector refuses them).
"""
import base64
import contextlib
import http.client
import os
import socket
import statistics
import sys
import threading
import time
import urllib.parse
from dataclasses import dataclass
from typing import Callable, Tuple

import click

from benchcore import files
from benchcore.errors import UserError, name, shown
from benchcore.results.records import hostname

PUSH_DEADLINE_S = 10   # the whole push, from connecting to the answer's last byte


def _host(rec):
    return rec.get("host") or hostname()   # a pairs record: the node at one end; else the node that wrote it


def _commbench(rec):
    in_place = rec.get("in_place")
    return {"collective": rec.get("collective"), "strategy": rec.get("strategy"), "size_bytes": rec.get("size_bytes"),
            "in_place": "" if in_place is None else str(bool(in_place)).lower(),
            "dtype": rec.get("dtype"), "backend": rec.get("backend"), "nodes": rec.get("nodes"),
            "world_size": rec.get("world_size"), "topology": _topology(rec.get("topology")), "host": _host(rec),
            "slurm_job_id": os.environ.get("SLURM_JOB_ID", "")}


def _topology(value):
    return value.get("name") if isinstance(value, dict) else value


def _iobench(rec):
    return {"mount": rec.get("mount"), "fs_type": rec.get("fs_type"), "profile": rec.get("profile"),
            "direction": rec.get("direction") or rec.get("rw"), "host": hostname()}


def _measured(field, labels):
    """Samples of a measurement field: (labels, value) per record that has it. A pairs link (a record with a
    peer_host) is the best of its pairings (other load only ever slows one), a sample for each of its ends."""
    def samples(recs):
        out, links = [], {}
        for r in recs:
            if r.get("event") or r.get(field) is None:
                continue
            if not r.get("peer_host"):
                out.append((labels(r), r[field]))
                continue
            key = (tuple(sorted((r["host"], r["peer_host"]))),
                   tuple(sorted((k, v) for k, v in labels(r).items() if k != "host")))
            best = links.get(key)
            links[key] = (r[field], r) if best is None or r[field] > best[0] else best
        for (ends, _), (value, r) in sorted(links.items(), key=lambda kv: kv[0]):
            out += [(labels({**r, "host": h}), value) for h in ends]
        return out
    return samples


def _checks(recs):
    return [({"check": r.get("check"), "spec": r.get("spec") or ""}, 1.0 if r["passed"] else 0.0)
            for r in recs if r.get("event") == "verdict" and r.get("check") and r.get("passed") is not None]


def _bad_nodes(recs):
    out = []
    for r in recs:
        if r.get("event") != "verdict" or r.get("passed") is None:
            continue
        judged = r.get("node_verdicts") or [{"host": h, "passed": False} for h in r.get("bad_nodes") or []]
        out += [({"host": v["host"], "check": r.get("check")}, 0.0 if v["passed"] else 1.0) for v in judged]
    return out


HEALTH = {"ok": 0.0, "warn": 1.0, "fail": 2.0, "unknown": -1.0}


def _health(recs):
    """commbench node's lines (health events): 0 ok, 1 warn, 2 fail, -1 unknown."""
    return [({"host": (r.get("hosts") or [_host(r)])[0], "subject": r.get("subject"), "item": r.get("item")},
             HEALTH[r["health"]])
            for r in recs if r.get("event") == "health" and r.get("health") in HEALTH]


def _started_s():
    """When this process started (Unix seconds): /proc/self/stat's starttime after /proc/stat's btime."""
    with open("/proc/self/stat") as f:
        ticks = int(f.read().rsplit(")", 1)[1].split()[19])
    with open("/proc/stat") as f:
        boot = next(int(line.split()[1]) for line in f if line.startswith("btime "))
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def _last_run(what):
    """The run's end (now) or its duration (since the command started), one sample per host the records name: a
    stale textfile (a Prolog that stopped running) can be alerted on (time() - ..._last_run_timestamp_seconds)."""
    def samples(recs):
        if not recs:
            return []
        now = time.time()
        try:
            value = now if what == "timestamp" else now - _started_s()
        except (OSError, ValueError, IndexError, StopIteration):
            return []
        return [({"host": _host(recs[-1])}, value)]
    return samples


@dataclass(frozen=True)
class Family:
    name: str
    tool: str
    help: str
    labels: Tuple[str, ...]
    samples: Callable   # records -> [(labels dict, value)]
    of_the_run: bool = False   # about the run itself: written only beside a family of its records


COMMBENCH_LABELS = ("collective", "strategy", "size_bytes", "in_place", "dtype", "backend", "nodes", "world_size",
                    "topology", "host", "slurm_job_id")
IOBENCH_LABELS = ("mount", "fs_type", "profile", "direction", "host")
FAMILIES = (
    Family("commbench_busbw_gbps", "commbench", "Bus bandwidth (nccl-tests' busbw) in GB/s (1e9 bytes/s); median of "
           "the run's records with these labels (pairs: each node over its links, a link the best of its pairings)",
           COMMBENCH_LABELS,
           _measured("busbw_gbps", _commbench)),
    Family("commbench_check_passed", "commbench", "A check's verdict in the last run: 1 passed, 0 failed",
           ("check", "spec"), _checks),
    Family("commbench_bad_node", "commbench", "1: the check named this node bad in the last run; 0: judged fine",
           ("host", "check"), _bad_nodes),
    Family("commbench_node_health", "commbench", "commbench node's verdict per GPU, InfiniBand port and item in the "
           "last run: 0 ok, 1 warn, 2 fail, -1 unknown (commbench/health/checks.py)", ("host", "subject", "item"),
           _health),
    *(Family(f"{tool}_last_run_{what}_seconds", tool, help_text, ("host",), _last_run(what), of_the_run=True)
      for tool in ("commbench", "iobench") for what, help_text in (
          ("timestamp", "When the last run that wrote this ended (Unix seconds): alert on time() minus it"),
          ("duration", "How long the last run that wrote this took, from its command's start (seconds)"))),
    Family("iobench_bw_mbps", "iobench", "Storage bandwidth in MB/s (1e6 bytes/s), fio's or the checkpoint's; median "
           "of the run's records with these labels", IOBENCH_LABELS, _measured("bw_mbps", _iobench)),
    Family("iobench_lat_p99_us", "iobench", "99th percentile I/O latency in microseconds; median of the run's records "
           "with these labels", IOBENCH_LABELS, _measured("lat_p99_us", _iobench)),
)


def escape_label(value):
    """A label value as the format writes it: backslash, double quote and line feed escaped."""
    text = "" if value is None else str(value)
    return text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value):
    value = float(value)
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "+Inf" if value > 0 else "-Inf"
    return repr(value)


def exposition(records, tool):
    """The text of tool's families for records ('' when none has a sample)."""
    lines = []
    for fam in FAMILIES:
        if fam.tool != tool or (fam.of_the_run and not lines):
            continue
        series = {}
        for labels, value in fam.samples(records):
            key = tuple(escape_label(labels.get(k)) for k in fam.labels)
            series.setdefault(key, []).append(float(value))
        if not series:
            continue
        lines += [f"# HELP {fam.name} {fam.help.replace(chr(92), chr(92) * 2)}", f"# TYPE {fam.name} gauge"]
        for key in sorted(series):
            labels = ",".join(f'{k}="{v}"' for k, v in zip(fam.labels, key))
            lines.append(f"{fam.name}{{{labels}}} {_number(statistics.median(series[key]))}")
    return "\n".join(lines) + "\n" if lines else ""


def _metrics_path(ctx, param, value):
    if value is None:
        return None
    if not value.endswith(".prom") or os.path.basename(value) == ".prom":
        raise UserError(f"--metrics {name(value)}: name a FILE.prom (node_exporter's textfile collector reads *.prom)")
    files.check_replace(value, "--metrics")
    return value


def _pushgateway_url(ctx, param, value):
    if value is None:
        return None
    url = urllib.parse.urlsplit(value)
    if url.scheme not in ("http", "https") or not url.hostname or url.query or url.fragment or url.username:
        raise UserError(f"--pushgateway {shown(value, 200)}: give http://HOST:PORT (a Pushgateway's address)")
    return value.rstrip("/")


def options():
    """--metrics and --pushgateway, kept in click's context (publish reads them), as a list of click options."""
    def keep(check):
        def callback(ctx, param, value):
            ctx.meta[f"benchcore.metrics.{param.name}"] = check(ctx, param, value)
        return callback
    return [click.option("--metrics", default=None, metavar="FILE.prom", expose_value=False,
                         callback=keep(_metrics_path),
                         help="Write the run's metrics in Prometheus' text format to FILE.prom, replaced whole (for "
                              "node_exporter's textfile collector; one file per tool and command)."),
            click.option("--pushgateway", default=None, metavar="URL", expose_value=False,
                         callback=keep(_pushgateway_url),
                         help="Push the same metrics to this Prometheus Pushgateway (job TOOL_COMMAND, instance "
                              "this host).")]


def metrics_options(fn):
    """options() as one decorator."""
    for option in reversed(options()):
        fn = option(fn)
    return fn


def publish(records, tool, spec=None):
    """Write and push the metrics of records as --metrics and --pushgateway asked (nothing when neither was
    given, or outside a click command). spec: the acceptance spec whose checks' verdicts these are (a label)."""
    ctx = click.get_current_context(silent=True)
    if ctx is None:
        return
    path, url = ctx.meta.get("benchcore.metrics.metrics"), ctx.meta.get("benchcore.metrics.pushgateway")
    if not path and not url:
        return
    if spec:
        records = [{**r, "spec": spec} if r.get("event") == "verdict" and "accept_check" in r else r for r in records]
    text = exposition(records, tool)
    if path:
        files.replace_output(path, text, "--metrics")
    if url:
        try:
            push(url, text, f"{tool}_{ctx.info_name}".replace("-", "_"), hostname())
        except UserError as exc:
            print(f"warning: {exc}; not pushed (the exit status is the run's)", file=sys.stderr)


def push(url, text, job, instance, deadline_s=PUSH_DEADLINE_S):
    """PUT text as the group {job, instance} of the Pushgateway at url (its metrics replaced), within deadline_s
    seconds for the whole of it (connecting, sending, the answer): a socket timeout alone bounds each read, and a
    server that sends a byte every few seconds would hold the command forever. The request runs in a thread; at
    the deadline its socket is shut, which ends it."""
    parts = urllib.parse.urlsplit(url)
    key = "/".join(f"{k}@base64/{base64.urlsafe_b64encode(v.encode()).decode()}"
                   for k, v in (("job", job), ("instance", instance)))
    kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
    conn = kind(parts.hostname, parts.port, timeout=deadline_s)   # no proxy; a redirect is not followed: an error
    said = {}

    def put():
        try:
            conn.request("PUT", f"{parts.path}/metrics/{key}", body=text.encode(),
                         headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})
            response = conn.getresponse()
            response.read(1 << 16)
            said["status"] = (response.status, response.reason)
        except (OSError, http.client.HTTPException, ValueError) as exc:
            said["error"] = exc

    worker = threading.Thread(target=put, name="pushgateway", daemon=True)
    worker.start()
    worker.join(deadline_s)
    if worker.is_alive():
        with contextlib.suppress(OSError, AttributeError):
            conn.sock.shutdown(socket.SHUT_RDWR)
        worker.join(1)
        conn.close()
        raise UserError(f"--pushgateway {shown(url, 200)}: no whole answer within {deadline_s:g} s; given up")
    conn.close()
    if "error" in said:
        exc = said["error"]
        raise UserError(f"--pushgateway {shown(url, 200)}: {shown(getattr(exc, 'strerror', None) or exc, 200)}")
    status, reason = said["status"]
    if not 200 <= status < 300:
        raise UserError(f"--pushgateway {shown(url, 200)}: HTTP {status} {shown(reason, 200)}")
