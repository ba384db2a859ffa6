"""What accept does to Slurm nodes once every check is judged: --on-fail drain takes out of service the nodes a
failed check is the fault of, --on-error drain also the nodes of a check that could not run, --on-pass resume puts
back a node that commbench drained for a check that now passes on it. Where accept runs says which nodes it may
touch (Scope): inside an allocation its nodes, each drained only when a failed check's records name it; in a node's
own Slurm script (Prolog, Epilog, HealthCheckProgram) this node alone, where every check runs. Shared storage (a
network, parallel or object store) below its bound is nobody's node fault, nor is storage whose locality is not known
(a FUSE file system iobench.mounts does not know): a node is drained only for storage known to be its own.

A drain's reason names the check exactly: 'commbench accept: CHECK [DIGEST]: why', DIGEST a short hash of the
check's whole definition (kind, parameters, thresholds, env, timeout); --on-pass resume puts a node back only when
the check with that same digest passes on it (a looser check of the same name never does)."""
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Optional

from benchcore.errors import UserError
from benchcore.inputs import shown
from benchcore.processes import procs
from benchcore.results.read import measurements
from commbench.launch import slurm
from commbench.launch.spec import slurm_job
from iobench.mounts import locality

HANG_CULPRITS = {"outside": "never entered the operation the others waited in", "silent": "stopped beating"}
SHARED = "shared storage below its bound: not a node fault, nobody drained"
UNKNOWN = ("storage of unknown locality ({}) below its bound: commbench drains a node only for storage known to be "
           "its own; nobody drained")
REASON_CHARS = 200   # a drain reason as sinfo -R shows it: the check, its digest and why, in one short line
DIGEST_CHARS = 10    # hex digits of the check's digest (40 bits)


@dataclass
class Scope:
    here: Optional[str]   # this node, in its own Slurm script (every check that no cluster exec spreads runs here)
    nodes: list           # the nodes drain and resume may touch


def scope(option):
    """Where drain and resume may act; UserError naming option (--on-fail drain, ...) where no Slurm is."""
    here = os.environ.get("SLURMD_NODENAME")
    if slurm_job():
        found = Scope(None, slurm.hostnames(os.environ["SLURM_JOB_NODELIST"]))
    elif here:
        found = Scope(here, [here])
    else:
        raise UserError(f"{option} works inside a Slurm allocation (sbatch, salloc) or a node's own Slurm script "
                        "(Prolog, Epilog, HealthCheckProgram: SLURMD_NODENAME); neither is here")
    if shutil.which("scontrol") is None:
        raise UserError(f"{option} needs scontrol (not found)")
    return found


def storage(rec):
    """Where the storage of an iobench record lives (iobench.mounts.locality: shared, unknown, local; by its fs type
    and source, which iobench records as the device of a file system without disks); None for other records."""
    return locality(rec.get("fs_type"), rec.get("device")) if rec.get("tool") == "iobench" else None


def named_nodes(result):
    """{node: why} of the nodes a check's records name as the cause of its failure: pairs' bad nodes, the hosts
    of the ranks that hung a run (never entered the operation the others wait in, or stopped beating), and the
    host of an iobench record on its own storage that missed a threshold (the node whose storage was measured).
    Never anyone else: a collective's busbw spans every node and names none."""
    named = {}
    for outcome in result.outcomes:
        for rec in outcome.missed if not outcome.passed else []:
            if storage(rec) == "local":
                for host in rec.get("hosts") or []:
                    named.setdefault(host, f"iobench: {outcome.message}")
    for rec in result.records:
        if rec.get("event") == "verdict":
            for node in rec.get("bad_nodes") or []:
                named.setdefault(node, f"{rec.get('check') or 'pairs'}: {rec.get('reason')}")   # pairs, node
        elif rec.get("event") == "hang":
            for r in rec.get("ranks") or []:
                if isinstance(r, dict) and r.get("state") in HANG_CULPRITS:
                    named.setdefault(r.get("host"), f"rank {r.get('rank')} {HANG_CULPRITS[r['state']]} (hang)")
    return {node: why for node, why in named.items() if isinstance(node, str) and node}


def fault(result, here):
    """(status, {node: why}) of a check that ran and did not pass: 'fail' and the nodes it is the fault of (those
    its records name; here, this node, for anything it measured beyond a bound), 'shared' when only shared storage
    missed its bound, 'unknown' when only storage of unknown locality (with or beside shared) did, 'error' when
    nothing was measured against a bound: the check could not run."""
    named = named_nodes(result)
    missed = [o for o in result.outcomes if not o.passed and o.judged]
    own = [o for o in missed if not (o.missed and all(storage(r) in ("shared", "unknown") for r in o.missed))]
    if here and (named or own):
        return "fail", {here: next(iter(named.values()), None) or own[0].message}
    if named or own:
        return "fail", named
    if not missed:
        return "error", {}
    return ("unknown" if any(storage(r) == "unknown" for o in missed for r in o.missed) else "shared"), {}


def elsewhere(result):
    """The line of a check whose storage below its bound is not known to be a node's own (fault 'unknown')."""
    types = sorted({str(r.get("fs_type")) for o in result.outcomes if not o.passed for r in o.missed
                    if storage(r) == "unknown"})
    return UNKNOWN.format(shown(", ".join(types), 100))


def status(result):
    """pass, fail, shared (shared storage alone missed its bound), unknown (storage of unknown locality did), error
    (the check could not run), or not run."""
    return "pass" if result.passed else "not run" if not result.ran else fault(result, None)[0]


def ran_on(result, here):
    """The nodes a check ran on: this node (here), or the hosts its records name."""
    hosts = (h for r in measurements(result.records) for h in r.get("hosts") or [])
    return [here] if here else list(dict.fromkeys(hosts))


def digest(check):
    """A short hash of a check's whole definition: its kind, parameters, thresholds, env and timeout (its name and
    line aside: the name is in the reason, and moving a check in its spec changes nothing it measures)."""
    definition = {"kind": check.kind, "values": check.values, "thresholds": [t.text for t, _ in check.thresholds],
                  "env": check.env, "timeout": check.timeout, "allow_unknown_env": check.allow_unknown_env,
                  "allow_paths": check.allow_paths}
    text = json.dumps(definition, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


def prefix(check):
    """How a drain reason of commbench's for check (a spec's Check) starts (as _scontrol writes it): its name and
    digest."""
    return f"commbench accept: {shown(check.name, 60)} [{digest(check)}]: ".replace('"', "'")


def act(spec, results, where, on_fail, on_error, on_pass):
    """Drain and resume as asked: (drained, resumed), each [{node, check, reason, drained|resumed, error}]; a check
    that drains nobody for being shared storage or for not having run says so in an entry without a node."""
    drained, resumed, blamed = [], [], set()
    for result in results:
        if result.passed or not result.ran:
            continue
        here = None if spec.clustered(result.check) else where.here
        kind, nodes = fault(result, here)
        if kind == "error":
            why = f"could not run: {result.reason or next(o.message for o in result.outcomes if not o.passed)}"
            nodes = dict.fromkeys(ran_on(result, here), why) if on_error == "drain" else {}
            if not nodes and "drain" in (on_fail, on_error):
                drained.append(_nobody(result, f"{why}; nobody drained" + (
                    "" if on_error == "drain" else " (--on-error drain drains the node it ran on)")))
        elif kind in ("shared", "unknown") and on_fail == "drain":
            drained.append(_nobody(result, SHARED if kind == "shared" else elsewhere(result)))
        elif on_fail != "drain":
            nodes = {}
        for node, why in nodes.items():
            reason = shown(prefix(result.check) + why.replace('"', "'"), REASON_CHARS)
            entry = {"node": node, "check": result.check.name, "reason": reason, "drained": False, "error": None}
            if node not in where.nodes:
                entry["error"] = "not a node of this allocation: left alone"
            else:
                blamed.add(node)
                entry["error"] = _scontrol(node, "DRAIN", reason)
                entry["drained"] = entry["error"] is None
            drained.append(entry)
    passed_on = {}   # node: the checks that passed on it
    for result in results if on_pass == "resume" else []:
        for node in ran_on(result, None if spec.clustered(result.check) else where.here) if result.passed else []:
            passed_on.setdefault(node, []).append(result.check)
    for node, checks in passed_on.items():
        state, reason = _state(node) if node in where.nodes and node not in blamed else ("", "")
        if not state.startswith(("drain", "drng")):
            continue
        check = next((c for c in checks if reason.startswith(prefix(c))), None)
        entry = {"node": node, "check": (check or checks[0]).name, "reason": reason, "resumed": False, "error": None}
        if check is None:
            entry["error"] = ("left drained: not drained by commbench for a check that passed here as this spec "
                              f"defines it (passed: {', '.join(prefix(c).strip(': ') for c in checks)})")
        else:
            entry["error"] = _scontrol(node, "RESUME")
            entry["resumed"] = entry["error"] is None
        resumed.append(entry)
    return drained, resumed


def lines(drained, resumed):
    """One line per node drained or resumed (or not, and why), and per check that drained nobody and why."""
    for e in drained:
        yield (f"{e['check']}: {e['reason']}" if e["node"] is None else
               f"{'drained' if e['drained'] else 'did not drain'} {e['node']}: {e['error'] or e['reason']}")
    for e in resumed:
        yield (f"resumed {e['node']} ({e['check']} passed; it was drained: {e['reason']})" if e["resumed"] else
               f"did not resume {e['node']}: {e['error']} ({e['reason']})")


def _nobody(result, why):
    return {"node": None, "check": result.check.name, "reason": why, "drained": False, "error": None}


def _scontrol(node, state, reason=None):
    """scontrol update NodeName=node State=state [Reason=reason]: None, or why it failed."""
    try:
        done = subprocess.run(["scontrol", "update", f"NodeName={node}", f"State={state}",
                               *([f"Reason={reason}"] if reason else [])], capture_output=True, text=True, timeout=60)
        return None if done.returncode == 0 else procs.one_line(done.stderr or done.stdout)
    except (OSError, subprocess.TimeoutExpired) as exc:    # scontrol gone, or slurmctld not answering
        return f"scontrol: {getattr(exc, 'strerror', None) or exc}"


def _state(node):
    """(compact state, reason) of node as sinfo says (drain, drng, idle, ...); ("", "") when it cannot say."""
    try:
        done = subprocess.run(["sinfo", "-h", "-N", "-n", node, "-o", "%t|%E"], capture_output=True, text=True,
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return "", ""
    state, _, reason = (done.stdout.splitlines() or [""])[0].partition("|")
    return state, reason
