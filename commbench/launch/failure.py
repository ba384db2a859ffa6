"""Why a launch failed, in one line each, from its agents' logs: ranks killed by a signal, the lines its workers
wrote (a rank names the peer it blames first), rendezvous failures (a probe of the store says which), else the
logs' tail."""
import re
import signal

from benchcore.results.records import hostname
from commbench.launch import mpirun
from commbench.launch.liveness import PROBE_TIMEOUT_S, probe
from commbench.launch.torchrun import split_endpoint


def _signalled(lines, ranks, killed):
    """Local ranks that torchrun saw end by a signal (not its own SIGTERM, not our SIGKILL)."""
    by_pid = {st["pid"]: st for st in ranks.values()}
    out = []
    for m in re.finditer(r"exitcode\s*:\s*-(\d+) \(pid: (\d+)\)", "\n".join(lines)):
        sig, pid = int(m.group(1)), int(m.group(2))
        if pid in killed or sig == signal.SIGTERM:
            continue
        st = by_pid.get(pid)
        who = f"rank {st['rank']} on {st['host']} (pid {pid})" if st else f"a worker on {hostname()} (pid {pid})"
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        out.append(f"{who} was killed by {name}")
    return out


def reasons(logs, spec, ranks=None, killed=()):
    """Why the launch failed, from the agents' logs: ranks killed by a signal, worker lines (a rank
    names the peer it blames first), rendezvous failures, else the tail."""
    lines = []
    for log in logs:
        log.seek(0)
        lines.extend(log.read().splitlines())
    # a host ssh could not reach or lost comes first; ranks writing at once may share a line of the log: each
    # mark starts a reason of its own
    worker = [piece.strip() for mark in ("commbench-ssh:", "commbench-worker:") for ln in lines
              for piece in ln.split(mark)[1:]]
    signalled = _signalled(lines, ranks or {}, set(killed)) + mpirun.dead_ranks(lines, ranks or {})
    if worker or signalled:
        return list(dict.fromkeys(signalled + worker))
    where = spec.rdzv_endpoint or "127.0.0.1"
    if any("RendezvousTimeoutError" in ln for ln in lines):
        return [f"rendezvous at {where} timed out after {spec.rdzv_timeout:.0f} s: "
                f"not all {spec.nodes} nodes joined (is the peer node started?)"]
    if any(mark in ln for ln in lines for mark in ("while trying to connect to", "RendezvousConnectionError")):
        return [f"rendezvous store at {where}: {_store_state(spec)}"]
    tail = [ln for ln in lines if ln.strip()][-8:]
    return tail or ["the launch failed without output"]


def _store_state(spec):
    """Why the rendezvous store cannot be used, from a probe of its endpoint now."""
    if not spec.rdzv_endpoint:
        return "the local store ended"
    host, port = split_endpoint(spec.rdzv_endpoint)
    state = probe(host, port)
    if state == "dead":
        return (f"nothing listens there (checked from {hostname()}): node rank 0 is not started, has ended, "
                "or uses another port")
    if state == "unreachable":
        return (f"no answer from {host} within {PROBE_TIMEOUT_S:g} s (checked from {hostname()}): a wrong "
                "address, a firewall or a link down")
    return f"it answers, but the rendezvous failed within {spec.rdzv_timeout:.0f} s: see --verbose"


