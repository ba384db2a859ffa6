"""What every selftest check runs on: two private network-namespace nodes, one launch per -N cycle on both
(each its own torchrun rendezvous across the link), the records read back, the best of the cycles judged."""
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import click

from benchcore.emulate import netns
from benchcore.errors import UserError
from benchcore.processes import procs
from benchcore.progress import Reporter
from benchcore.results.records import RecordWriter, dumps, read_records
from benchcore.units import format_size, parse_size, size_range
from commbench.runner import FIXED_BYTES
from commbench.cases.registry import CASES, record_label

JUDGED = "all_reduce"      # other collectives are reported, not judged (Gloo's all_gather does not overlap
#                            its two directions and reaches about half the link)


def node_command(kinds, node, port, args, out):
    """commbench argv for one node of one launch (collectives in one launch, strategies in another)."""
    launch = ["--nodes", "2", "--rdzv-endpoint", f"{netns.node_addr(0)}:{port}", "--node-rank", str(node),
              "--timeout", str(args["timeout"]), "--rdzv-timeout", str(args["rdzv_timeout"])]
    sizes = ["-b", args["min_bytes"], "-e", args["max_bytes"], "-f", str(args["step_factor"]),
             "-n", str(args["iters"]), "-w", str(args["warmup"]), "-N", str(args["cycles"])]
    if CASES[kinds[0]].kind == "strategy":
        cmd = ["compare", "--strategies", ",".join(kinds), "--baseline", kinds[0],
               "--repeats", "1"]   # -N cycles are its repeats: the best is judged
        if "chunked" in kinds:     # the one strategy that reads them (compare refuses options no case reads)
            cmd += ["--chunk-size", args["chunk_size"], "--threshold", args["threshold"]]
    elif CASES[kinds[0]].kind == "overlap":
        cmd = ["overlap", "--patterns", ",".join(kinds), "--repeats", "1"]
    else:
        cmd = ["run", "--collective", ",".join(kinds), "--place", "in"]
    return [sys.executable, "-m", "commbench.commands.cli", *cmd, *sizes, *launch, *args.get("extra", ()),
            "--format", "json", "--quiet", *(["--out", out] if node == 0 else [])]


def launch(kinds, port, args, out, prefix, deadline_s, passes=None):
    """Each of the -N cycles its own launch on both nodes, its records appended to out with their cycle: a launch
    can keep one slow state for its whole life (a 2-rank Gloo all_reduce at 1gbit: 0.69-0.78 of the ceiling in
    every pass of 1 launch in 8, 0.95-1.00 in the others), so passes of one launch are not independent. Stops
    after a cycle when passes(every record so far) says the check already passes (more cycles could only add a
    faster one). Returns the error lines (empty when every launch succeeded)."""
    sizes = size_range(parse_size(args["min_bytes"]), parse_size(args["max_bytes"]), int(args["step_factor"]))
    per = len(sizes) * len(kinds)   # a cycle's measurements, sizes in turn, each kind at each: weighed by payload
    weights = [size + FIXED_BYTES for size in sizes for _ in kinds]
    # the steps up to this cycle's end: a next cycle runs only where this one does not pass (the time left is this
    # cycle's, and grows if another starts)
    with Reporter("selftest", weights) as shown:
        for cycle in range(args["cycles"]):
            part = f"{out}.{cycle}"
            where = f"selftest {','.join(kinds)} on 2 namespace nodes, cycle {cycle + 1}/{args['cycles']}" \
                + (" (the next only if this one fails)" if cycle + 1 < args["cycles"] else "")
            if cycle:
                shown.resize(weights * (cycle + 1), keep_rate=True)
                shown.step(cycle * per, f"{where}: starting both nodes")
            else:   # the time left counts from the first measurement: the namespaces' start-up is no step's
                shown.say(f"{where}: starting both nodes")
            looking = Measured(part, cycle * per, per, where, shown)
            shown.watch(looking)
            errors = launch_once(kinds, port + 2 * cycle, {**args, "cycles": 1}, part, prefix, deadline_s)
            shown.unwatch(looking)
            if os.path.exists(part):
                with RecordWriter(out) as writer:
                    for rec in read_records(part):
                        writer.write(rec if rec.get("event") else {**rec, "cycle": cycle})
                os.unlink(part)
            if errors:
                return errors
            if passes and cycle + 1 < args["cycles"] and passes(read_records(out)):
                break
    return []


class Measured:
    """A cycle's steps from the records node 0 appends to its --out as they are measured: one step per case and
    size (its phases' records together), read once a second by the Reporter (benchcore.progress.watch)."""
    READ = 1 << 20   # bytes read per look

    def __init__(self, path, first, per, where, shown):
        self.path, self.first, self.per, self.where, self.shown = path, first, per, where, shown
        self.offset, self.seen = 0, {}

    def __call__(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read(self.READ)
        except OSError:   # no record yet
            return
        data = data[:data.rfind(b"\n") + 1]
        self.offset += len(data)
        for line in data.splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            if isinstance(rec, dict) and not rec.get("event") and rec.get("size_bytes"):
                self.seen[(record_label({**rec, "phase": None}), rec["size_bytes"])] = rec
        if self.seen:
            done = min(len(self.seen), self.per - 1)
            first, last = list(self.seen.values())[0], list(self.seen.values())[-1]
            if self.shown.mark is None:   # the rate counts from the first measurement's start: its timed iterations
                took = (first.get("time_us") or 0) * ((first.get("iters") or 0) + (first.get("warmup") or 0)) / 1e6
                self.shown.step(self.first, self.where, at=time.monotonic() - took)
            self.shown.step(self.first + done, f"{self.where}: measurement {done + 1}/{self.per} (last measured: "
                                               f"{record_label({**last, 'phase': None})} "
                                               f"{format_size(last['size_bytes'])})")


def cycles_run(records):
    """How many -N cycles measured (launch stops at the first cycle with which the check passes)."""
    return len({r.get("cycle") for r in records if not r.get("event")})


def check_ports(port, launches, cycles):
    """Every port launch will use (PORT + i + 2c) is a port."""
    last = port + launches - 1 + 2 * (cycles - 1)
    if port < 1 or last > 65535:
        raise UserError(f"--port {port}: {launches} launch(es) x {cycles} cycle(s) use ports {port}-{last}; "
                        f"give one from 1 to {65535 - (last - port)}")


def launch_once(kinds, port, args, out, prefix, deadline_s):
    """Run one measurement on both nodes; returns the error lines (empty when both succeeded)."""
    nodes = [(node, procs.spawn(netns.exec_argv(node, node_command(kinds, node, port, args, out), prefix),
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)) for node in (1, 0)]
    errors = []
    try:
        for node, proc in nodes:
            try:
                _, err = proc.communicate(timeout=deadline_s)
            except subprocess.TimeoutExpired:
                for _, p in nodes:
                    procs.stop(p, grace=30)
                _, err = proc.communicate()
                errors.append(f"node {node}: still running after {deadline_s:.0f} s; stopped")
            if proc.returncode:
                errors += [f"node {node}: {ln[len('error: '):]}" for ln in err.splitlines() if ln.startswith("error: ")]
                if not errors:
                    errors.append(f"node {node}: exit {proc.returncode}: {procs.one_line(err)}")
    finally:
        for _, p in nodes:
            procs.stop(p, grace=30)
    return errors


def need_namespaces(what):
    if os.geteuid() != 0:
        raise UserError(f"{what} needs root (network namespaces and tc)")
    for tool in ("ip", "tc", "unshare"):
        if not shutil.which(tool):
            raise UserError(f"{what} needs `{tool}` (Debian: apt-get install iproute2 util-linux)")


class PrivateNodes:
    """Namespaces under a prefix private to this run (never someone's cluster), a records file the launches
    append to; on exit (SIGTERM included) the namespaces are gone and the records read back."""

    def __init__(self, stem):
        netns.reap(stem)
        self.prefix = f"{stem}{os.getpid()}"
        fd, self.path = tempfile.mkstemp(prefix="commbench-selftest-", suffix=".jsonl")
        os.close(fd)
        self.errors, self.records = [], []

    def __enter__(self):
        self.previous = signal.signal(signal.SIGTERM, interrupt)  # a stopped selftest still tears down
        return self

    def __exit__(self, kind, exc, tb):
        try:
            netns.down(self.prefix)
        finally:
            signal.signal(signal.SIGTERM, self.previous)
        self.records = read_records(self.path)
        os.unlink(self.path)
        if isinstance(exc, netns.ClusterError):
            self.errors.append(f"cannot build the test nodes: {exc}")
            return True
        return False


def save(out_path, records, verdict, fmt):
    """Every record and the verdict to --out; the verdict on stdout for --format json. True when a table is wanted."""
    if out_path:
        with RecordWriter(out_path) as writer:
            for rec in records + [verdict]:
                writer.write(rec)
    if fmt == "json":
        click.echo(dumps(verdict))
    return fmt != "json"


def best_of_cycles(records):
    """Per case, phase and size, the fastest of the -N cycles (other load only ever slows a link down)."""
    best = {}
    for rec in records:
        if not rec.get("event"):
            key = (record_label(rec), rec["size_bytes"])
            if key not in best or rec["time_us"] < best[key]["time_us"]:
                best[key] = rec
    return best


def interrupt(signum, frame):
    raise KeyboardInterrupt
