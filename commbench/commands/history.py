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
last. The file is read line by line in bounded memory (the last N entries per node); a line that is not such an
entry is skipped and counted, never quoted.
"""
import json
import os
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


def record_accept(written, spec, results, run_id, drained, resumed):
    """An accept run's entries appended to spec.history (as one of the run's outputs: a failed write is named with
    the others); (the file, the summaries of this run's nodes) for the report, or None."""
    from commbench.launch.spec import slurm_job
    if not spec.history:
        return None
    here = os.environ.get("SLURMD_NODENAME") if not slurm_job() else None   # a node's own Slurm script
    entries = from_accept(spec, results, here, run_id, drained, resumed, str(written.directory / "report.html"))
    written("history", append, spec.history, entries)
    if "history" in written.failed:
        return None
    summaries, _ = read(spec.history)
    return os.path.abspath(spec.history), [summaries[e["node"]] for e in entries if e["node"] in summaries]


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


def read(path, window=DEFAULT_WINDOW):
    """({node: summary}, lines skipped) of a history file, in bounded memory."""
    regular_file(path, "history")
    state, skipped = {}, 0
    try:
        with open(path, "rb") as f:
            for _, raw, _ in lines(f):
                try:
                    e = json.loads(raw)
                except ValueError:
                    skipped += 1
                    continue
                if not (isinstance(e, dict) and e.get("history") == VERSION and isinstance(e.get("node"), str)
                        and e.get("result") in RESULTS):
                    skipped += 1
                    continue
                _add(state.setdefault(clipped(e["node"]), _new(window)), e)
    except OSError as exc:
        raise UserError(f"history {name(path)}: {exc.strerror}") from None
    return {node: _summary(node, s) for node, s in state.items()}, skipped


def _new(window):
    return {"recent": deque(maxlen=window), "runs": 0, "last_pass": None, "drained": None, "resumed": None,
            "last_failed": None}


def _text(value, limit=300):
    return clipped(value, limit) if isinstance(value, str) else None


def _add(s, e):
    when = _text(e.get("time"), 40)
    s["runs"] += 1
    s["recent"].append((e["result"], when))
    if e["result"] == "pass":
        s["last_pass"] = when
    else:
        failed = e.get("failed") if isinstance(e.get("failed"), list) else []
        s["last_failed"] = "; ".join(t for t in (_text(x) for x in failed[:MAX_FAILED]) if t) or e["result"]
    if e.get("action") in ("drained", "resumed"):
        s[e["action"]] = when
    s["report"] = _text(e.get("report"), 4096)


def _summary(node, s):
    recent = [r for r, _ in s["recent"]]
    judged = [r for r in recent if r != "error"]
    flaps = sum(a != b for a, b in zip(judged, judged[1:]))
    last, when = s["recent"][-1]
    return {"node": node, "last_result": last, "last_run": when, "last_pass": s["last_pass"],
            "failures": sum(r == "fail" for r in recent), "errors": sum(r == "error" for r in recent),
            "window": len(recent), "runs": s["runs"], "flaps": flaps, "drained": s["drained"],
            "resumed": s["resumed"], "what_failed": s["last_failed"] if last != "pass" else None,
            "last_failed": s["last_failed"], "report": s.get("report")}
