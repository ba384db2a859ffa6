"""What accept does to Slurm nodes once every check is judged: --on-fail drain takes out of service the nodes a
failed check is the fault of, --on-error drain also the nodes of a check that could not run, --on-pass resume puts
back a node that commbench drained for a check that now passes on it. Where accept runs says which nodes it may
touch (Scope): inside an allocation its nodes, each drained only when a failed check's records name it; in a node's
own Slurm script (Prolog, Epilog, HealthCheckProgram) this node alone, where every check runs. Shared storage (a
network or parallel file system) below its bound is nobody's node fault."""
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
from iobench.mounts import shared

HANG_CULPRITS = {"outside": "never entered the operation the others waited in", "silent": "stopped beating"}
SHARED = "shared storage below its bound: not a node fault, nobody drained"


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


def on_shared_storage(rec):
    """An iobench record of a network or parallel file system (by its type, or a host:/path or //host/share
    source, which iobench records as the device of a file system without disks)."""
    return rec.get("tool") == "iobench" and shared(rec.get("fs_type"), rec.get("device"))


def named_nodes(result):
    """{node: why} of the nodes a check's records name as the cause of its failure: pairs' bad nodes, the hosts
    of the ranks that hung a run (never entered the operation the others wait in, or stopped beating), and the
    host of an iobench record on its own storage that missed a threshold (the node whose storage was measured).
    Never anyone else: a collective's busbw spans every node and names none."""
    named = {}
    for outcome in result.outcomes:
        for rec in outcome.missed if not outcome.passed else []:
            if rec.get("tool") == "iobench" and not on_shared_storage(rec):
                for host in rec.get("hosts") or []:
                    named.setdefault(host, f"iobench: {outcome.message}")
    for rec in result.records:
        if rec.get("event") == "verdict":
            for node in rec.get("bad_nodes") or []:
                named.setdefault(node, f"pairs: {rec.get('reason')}")
        elif rec.get("event") == "hang":
            for r in rec.get("ranks") or []:
                if isinstance(r, dict) and r.get("state") in HANG_CULPRITS:
                    named.setdefault(r.get("host"), f"rank {r.get('rank')} {HANG_CULPRITS[r['state']]} (hang)")
    return {node: why for node, why in named.items() if isinstance(node, str) and node}


def fault(result, here):
    """(status, {node: why}) of a check that ran and did not pass: 'fail' and the nodes it is the fault of (those
    its records name; here, this node, for anything it measured beyond a bound), 'shared' when only shared storage
    missed its bound, 'error' when nothing was measured against a bound: the check could not run."""
    named = named_nodes(result)
    missed = [o for o in result.outcomes if not o.passed and o.judged]
    own = [o for o in missed if not (o.missed and all(on_shared_storage(r) for r in o.missed))]
    if here and (named or own):
        return "fail", {here: next(iter(named.values()), None) or own[0].message}
    return ("fail", named) if named or own else ("shared" if missed else "error", {})


def status(result):
    """pass, fail, shared (shared storage alone missed its bound), error (the check could not run), or not run."""
    return "pass" if result.passed else "not run" if not result.ran else fault(result, None)[0]


def ran_on(result, here):
    """The nodes a check ran on: this node (here), or the hosts its records name."""
    hosts = (h for r in measurements(result.records) for h in r.get("hosts") or [])
    return [here] if here else list(dict.fromkeys(hosts))


def prefix(check):
    """How a drain reason of commbench's for check starts (as _scontrol writes it)."""
    return f"commbench accept: {check}: ".replace('"', "'")


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
        elif kind == "shared" and on_fail == "drain":
            drained.append(_nobody(result, SHARED))
        elif on_fail != "drain":
            nodes = {}
        for node, why in nodes.items():
            reason = shown(prefix(result.check.name) + why.replace('"', "'"), 200)
            entry = {"node": node, "check": result.check.name, "reason": reason, "drained": False, "error": None}
            if node not in where.nodes:
                entry["error"] = "not a node of this allocation: left alone"
            else:
                blamed.add(node)
                entry["error"] = _scontrol(node, "DRAIN", reason)
                entry["drained"] = entry["error"] is None
            drained.append(entry)
    for result in results if on_pass == "resume" else []:
        if not result.passed:
            continue
        for node in ran_on(result, None if spec.clustered(result.check) else where.here):
            state, reason = _state(node) if node in where.nodes and node not in blamed else ("", "")
            if not state.startswith(("drain", "drng")):
                continue
            entry = {"node": node, "check": result.check.name, "reason": reason, "resumed": False, "error": None}
            if not reason.startswith(prefix(result.check.name)):
                entry["error"] = "left drained: not drained by commbench for this check"
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
