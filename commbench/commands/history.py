"""A health history per node: `accept` (and so the Slurm healthcheck, which runs it) and `pairs` append one verdict
per node per run to a JSONL file (--history FILE, or the spec's `history:`), through benchcore.files' append
path; `commbench health` reads it back per node.

One line per node and run:
  {"history": 1, "time": ISO 8601 UTC, "run_id", "source": accept|pairs, "spec": the accept spec (or null),
   "context": where it ran (a Slurm script's SLURM_SCRIPT_CONTEXT, "healthcheck" in a HealthCheckProgram, else
   null), "node", "result": pass|fail|error, "failed": ["CHECK: why", ...] (empty when it passed),
   "checks": the checks the node was judged by, "action": drained|resumed|null (what commbench did to the node in
   Slurm), "report": the run's report.html (accept) or null; pairs adds "notes": the bad links the node is an end
   of (a bad link fails neither end: the link is named, not the node, as drain sees it)}

A node's summary: its last result and when, its last pass, failures among its last N runs, flaps (how often the
result turned between pass and fail in those N runs), when commbench last drained and resumed it, and what failed
last. A line that is not such an entry is skipped and counted, never quoted: one longer than MAX_LINE_BYTES or
nested deeper than MAX_DEPTH (counted without recursing) is refused before it is parsed.

Reading is bounded whatever the file's age: `health` streams it line by line, holding at most the last N results of
at most MAX_HELD / N nodes (MAX_NODES at most); `accept` (so every Prolog) reads only its end, backwards in blocks,
until each of its nodes has its last N entries, and never more than TAIL_BYTES (the summary then says it counted
from there: `partial`).
"""
import json
import os
import re
import sys
from collections import deque

from benchcore.errors import UserError
from benchcore.files import check_append
from benchcore.inputs import clipped, lines, name, regular_file
from benchcore.results.records import RecordWriter, hostname, timestamp

VERSION = 1
RESULTS = ("pass", "fail", "error")
DEFAULT_WINDOW = 10
MAX_FAILED = 20              # "what failed" lines kept per entry
HISTORY_ENV = "COMMBENCH_HISTORY"
MAX_LINE_BYTES = 64 << 10     # an entry is under 10 KB (20 "failed" lines of 300 characters, a report path)
MAX_DEPTH = 8                 # an entry nests 2 deep (its "failed" list)
TAIL_BYTES = 8 << 20          # accept reads at most the history's last 8 MiB (~30,000 entries of ~250 bytes)
BLOCK_BYTES = 64 << 10        # ... backwards, a block at a time
MAX_NODES = 50_000            # health summarizes at most this many nodes (the largest clusters have ~10,000-20,000)
MAX_HELD = 2_000_000          # ... and holds at most this many results (nodes x --last)
_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"')
_BRACKET = re.compile(rb"[\[\]{}]")
_NODE = re.compile(rb'"node"\s*:\s*"((?:[^"\\]|\\.)*)"')   # a "node" key (inside a string its quotes are escaped)


def context():
    """Where this run happens, as Slurm says: a Prolog/Epilog's context, a HealthCheckProgram (a node name, no
    job), or None."""
    env = os.environ
    if env.get("SLURM_SCRIPT_CONTEXT"):
        return clipped(env["SLURM_SCRIPT_CONTEXT"], 40)
    return "healthcheck" if env.get("SLURMD_NODENAME") and not env.get("SLURM_JOB_ID") else None


def entry(node, result, failed, checks, run_id, source, spec=None, action=None, report=None):
    return {"history": VERSION, "time": timestamp(), "run_id": run_id, "source": source, "spec": spec,
            "context": context(), "node": node, "result": result, "failed": list(failed)[:MAX_FAILED],
            "checks": list(checks), "action": action, "report": report}


def append(path, entries):
    """entries appended to the history at path (one line each, flushed together), by the record writer: the first
    starts on a fresh line (a torn last line never swallows it)."""
    if not path or not entries:
        return
    with RecordWriter(path, every=False, what="--history") as writer:
        for e in entries:
            writer.write(e)


def check(path):
    """Refuse, before anything runs, a history file that could not be appended to."""
    if path:
        check_append(path, "--history")


def _worst(results):
    return "fail" if "fail" in results else "error" if "error" in results else "pass"


def record_accept(spec, results, run_id, drained, resumed, report):
    """An accept run's history: (its entries, (the file, the summaries of its nodes: the history's end read back,
    this run added)); (None, None) without a history. The caller appends the entries (append) once the run's own
    outputs are written: a history that cannot take them, or cannot be read, costs nothing else."""
    from commbench.launch.spec import slurm_job
    if not spec.history:
        return None, None
    here = os.environ.get("SLURMD_NODENAME") if not slurm_job() else None   # a node's own Slurm script
    entries = from_accept(spec, results, here, run_id, drained, resumed, report)
    nodes = list(dict.fromkeys(e["node"] for e in entries))
    try:
        earlier, whole = tail(spec.history, nodes)
    except UserError as exc:
        print(f"note: {exc}; the report's node history is left out", file=sys.stderr)
        return entries, None
    summaries = []
    for node in nodes:
        state = _new(DEFAULT_WINDOW)
        for e in earlier[node] + [e for e in entries if e["node"] == node]:
            _add(state, e)
        summaries.append(_summary(node, state, partial=not whole))
    return entries, (os.path.abspath(spec.history), summaries)


def from_accept(spec, results, here, run_id, drained, resumed, report):
    """One entry per node an accept run judged. A check's nodes: those its records name as hosts, else this node
    (here, or this machine for a check that ran here) or the --hosts it was given; a failed check counts against
    the nodes it names as its cause (pairs' bad nodes, a hang's culprits, a node's own storage), else against every
    node it ran on (a collective's busbw spans them all)."""
    from commbench.commands.accept import drain

    per = {}
    for result in results:
        if not result.ran:
            continue
        clustered = spec.clustered(result.check)
        mine_here = None if clustered else here
        nodes = drain.ran_on(result, mine_here) or (spec.hosts[:result.check.nodes()] if clustered else
                                                    [here or hostname()])
        status = drain.status(result)
        kind, named = drain.fault(result, mine_here) if status in ("fail", "error") else (status, {})
        for node in nodes:
            mine = per.setdefault(node, {"results": [], "failed": [], "checks": []})
            mine["checks"].append(result.check.name)
            if kind == "fail" and named and node not in named:
                mine["results"].append("pass")   # the check failed for another node's fault
                continue
            res = {"fail": "fail", "error": "error"}.get(kind, "pass")
            mine["results"].append(res)
            if res != "pass":
                why = named.get(node) or result.reason or next((f"{o.threshold.text}: {o.message}"
                                                                for o in result.outcomes if not o.passed), kind)
                mine["failed"].append(f"{result.check.name}: {clipped(why, 300)}")
    acted = {e["node"]: "drained" for e in drained if e.get("node") and e.get("drained")}
    acted.update({e["node"]: "resumed" for e in resumed if e.get("resumed")})
    return [entry(node, _worst(v["results"]), v["failed"], v["checks"], run_id, "accept", spec.path,
                  acted.get(node), report) for node, v in per.items()]


def from_pairs(records, run_id):
    """One entry per node a pairs verdict judged (its node_verdicts): a bad node fails with the verdict's reason;
    the ends of a bad link pass (the link is named, not the node: as drain sees it) with the link in notes. None
    judged (emulated nodes): no entry."""
    verdict = next((r for r in reversed(records) if r.get("event") == "verdict"), None)
    if not verdict or verdict.get("passed") is None:
        return []
    links = {}
    for a, b in verdict.get("bad_links") or []:
        links.setdefault(a, []).append(f"pairs: bad link to {b}")
        links.setdefault(b, []).append(f"pairs: bad link to {a}")
    out = []
    for v in verdict.get("node_verdicts") or []:
        failed = [] if v["passed"] else [f"pairs: {v.get('reason') or 'bad node'}"]
        e = entry(v["host"], "pass" if v["passed"] else "fail", failed, ["pairs"], run_id, "pairs")
        out.append({**e, "notes": links.get(v["host"], [])})
    return out


def _depth(raw):
    """How deep a line's brackets nest outside its strings, counted in a loop (never a recursion)."""
    level = deepest = 0
    for bracket in _BRACKET.findall(_STRING.sub(b'""', raw)):
        level += 1 if bracket in b"[{" else -1
        deepest = max(deepest, level)
    return deepest


def parse(raw):
    """The history entry on one line (bytes), or None: longer than MAX_LINE_BYTES, nested deeper than MAX_DEPTH,
    not JSON, or not an entry."""
    raw = raw.strip()
    if not raw or len(raw) > MAX_LINE_BYTES:
        return None
    if raw.count(b"[") + raw.count(b"{") > MAX_DEPTH and _depth(raw) > MAX_DEPTH:
        return None
    try:
        e = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not (isinstance(e, dict) and e.get("history") == VERSION and isinstance(e.get("node"), str)
            and e.get("result") in RESULTS):
        return None
    return e


def read(path, window=DEFAULT_WINDOW, nodes=None):
    """({node: summary}, lines skipped, entries of nodes past the bound left out) of a whole history file, streamed
    in bounded memory: at most min(MAX_NODES, MAX_HELD // window) nodes (nodes: only these)."""
    regular_file(path, "history")
    state, skipped, left_out = {}, 0, 0
    most = min(MAX_NODES, MAX_HELD // window)
    try:
        with open(path, "rb") as f:
            for _, raw, _ in lines(f, MAX_LINE_BYTES + 1):
                e = parse(raw)
                if e is None:
                    skipped += bool(raw.strip())
                    continue
                node = clipped(e["node"])
                if nodes is not None and node not in nodes:
                    continue
                if node not in state and len(state) >= most:
                    left_out += 1
                    continue
                _add(state.setdefault(node, _new(window)), e)
    except OSError as exc:
        raise UserError(f"history {name(path)}: {exc.strerror}") from None
    return {node: _summary(node, s) for node, s in state.items()}, skipped, left_out


def _backwards(f, budget, reached):
    """The lines of a binary file from its end, newest first, read backwards a block at a time, at most budget
    bytes; a line longer than MAX_LINE_BYTES is kept only in part (parse refuses it). The file's first line comes
    last, and reached["start"] is set, only when the read reaches the start (a partial line is left out)."""
    pos = f.seek(0, os.SEEK_END)
    end, rest = pos, b""
    while pos > 0 and end - pos < budget:
        step = min(BLOCK_BYTES, pos)
        pos -= step
        f.seek(pos)
        parts = (f.read(step) + rest).split(b"\n")
        rest = parts[0][-(MAX_LINE_BYTES + 1):]
        yield from reversed(parts[1:])
    if pos == 0:
        reached["start"] = True
        yield rest


def tail(path, nodes, window=DEFAULT_WINDOW, budget=TAIL_BYTES):
    """({node: [its entries, oldest first]}, whole) of the given nodes from the history's end: read backwards
    until each has window entries, at most budget bytes; whole: every line was read (the read reached the file's
    start). A missing file has none."""
    if not os.path.lexists(path):
        return {n: [] for n in nodes}, True
    regular_file(path, "history")
    wanted = set(nodes)
    spelled = {json.dumps(n)[1:-1].encode() for n in nodes}   # as the writer spells them: a line whose "node" is
    found, reached = {n: [] for n in nodes}, {}                # none of them is never parsed whole
    try:
        with open(path, "rb") as f:
            for raw in _backwards(f, budget, reached):
                e = parse(raw) if any(n in spelled for n in _NODE.findall(raw[:MAX_LINE_BYTES + 1])) else None
                if e is None or e["node"] not in wanted:
                    continue
                found[e["node"]].append(e)
                if len(found[e["node"]]) >= window:
                    wanted.discard(e["node"])
                    if not wanted:
                        break
    except OSError as exc:
        raise UserError(f"history {name(path)}: {exc.strerror}") from None
    return {n: es[::-1] for n, es in found.items()}, bool(reached)


def _new(window):
    return {"recent": deque(maxlen=window), "last_run": None, "runs": 0, "last_pass": None, "drained": None,
            "resumed": None, "last_failed": None, "report": None}


def _text(value, limit=300):
    return clipped(value, limit) if isinstance(value, str) else None


def _add(s, e):
    when = _text(e.get("time"), 40)
    s["runs"] += 1
    s["recent"].append(RESULTS[RESULTS.index(e["result"])])   # the one "pass" of the module, not a copy per line
    s["last_run"] = when
    if e["result"] == "pass":
        s["last_pass"] = when
    else:
        failed = e.get("failed") if isinstance(e.get("failed"), list) else []
        s["last_failed"] = clipped("; ".join(t for t in (_text(x) for x in failed[:MAX_FAILED]) if t) or e["result"],
                                   1000)
    if e.get("action") in ("drained", "resumed"):
        s[e["action"]] = when
    s["report"] = _text(e.get("report"), 1024)


def _summary(node, s, partial=False):
    """A node's summary; partial: only the history's end was read (runs, last pass, drained and resumed count from
    there)."""
    recent = list(s["recent"])
    judged = [r for r in recent if r != "error"]
    flaps = sum(a != b for a, b in zip(judged, judged[1:]))
    last = recent[-1]
    return {"node": node, "last_result": last, "last_run": s["last_run"], "last_pass": s["last_pass"],
            "failures": sum(r == "fail" for r in recent), "errors": sum(r == "error" for r in recent),
            "window": len(recent), "runs": s["runs"], "flaps": flaps, "drained": s["drained"],
            "resumed": s["resumed"], "what_failed": s["last_failed"] if last != "pass" else None,
            "last_failed": s["last_failed"], "report": s["report"], "partial": partial}
