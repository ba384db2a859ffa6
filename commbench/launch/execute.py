"""Run a plan: start the chosen launcher's processes, follow the ranks' progress and records, stop what hangs,
and say why a launch failed.

Launchers (chosen by --launcher auto in spec.py), one module each:
  slurm    inside an allocation (SLURM_JOB_ID): srun starts one node agent per node,
           each runs torchrun with a c10d rendezvous on the allocation's first node;
  torchrun --rdzv-endpoint HOST:PORT --node-rank R, started by hand on every node;
  local    N torchrun agents on this machine joined by a real c10d rendezvous on 127.0.0.1;
  mpirun   one mpirun (srun inside an allocation) starting every rank as an MPI process (--backend mpi).
The node with node rank 0 (agent 0 locally) hands the records back: its local rank 0 appends
each to the launch directory's channel, which the launcher follows and returns (writing each to
--out as it arrives). Progress comes from the ranks' status files in the same directory.
"""
import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click

from benchcore.processes import procs
from benchcore.results.records import hostname, new_output
from benchcore.report.render import console
from commbench.launch import local, mpirun, slurm, torchrun
from commbench.launch.channel import Channel
from commbench.launch.liveness import (ADDR_ENV, CHANNEL, EXIT_HANG, PROBE_TIMEOUT_S, STATUS_ENV, WORKER_NAME,
                                       probe)
from commbench.launch.torchrun import split_endpoint

STOP_GRACE_S = 5   # a rank stopped past --hang-timeout + this is killed (rank 0's watchdog reports it first)
AGENT_GRACE_S = 5  # an agent still running this long after one of its ranks failed is stuck: stopped
STAGE_TIMEOUT_S = 120  # sbcast of the plan file to every node
UNSTAGE_TIMEOUT_S = 10  # its removal after: best effort, a failed run must not wait on a node that is gone
EXIT_TERM = 128 + signal.SIGTERM  # 143: ended by SIGTERM (Slurm's time limit, scancel, kill), as a shell reports it
LAUNCHERS = {"local": local.commands, "torchrun": torchrun.commands, "slurm": slurm.commands}  # torch.distributed's


PLAN_FILE = "plan.json"   # in the launch directory


def commands(spec, plan, plan_file):
    """[(argv, extra env)] for the processes this machine starts, their workers reading plan_file."""
    if spec.backend == "mpi":
        return mpirun.commands(spec, plan, plan_file)
    return LAUNCHERS[spec.launcher](spec, plan, plan_file)


def plan_place(spec, plan, logdir):
    """Where this launch's plan file goes. The launch directory, which every rank of this machine reads (torchrun
    nodes each write their own); mpirun across hosts (COMMBENCH_MPIRUN_ARGS): the working directory, which an MPI
    job's hosts share (they cannot read this machine's temp dir); a dry run: the working directory, where the
    lines it prints write it."""
    if logdir is None or mpirun.across_hosts(spec):
        return os.path.abspath(f"commbench-plan-{plan.run_id}.json")
    return str(Path(logdir) / PLAN_FILE)


def steps(spec, plan, plan_file):
    """(before, [(argv, env)], after): what this machine runs for a launch whose plan is in plan_file; under Slurm
    the plan is copied to every node of the allocation first (sbcast) and removed from them after."""
    if spec.launcher != "slurm":
        return [], commands(spec, plan, plan_file), []
    there = slurm.node_plan_file(plan)
    return [slurm.sbcast(plan_file, there)], commands(spec, plan, there), [slurm.unstage(spec, there)]


def dry_run(spec, plan):
    """Print what a launch runs, as lines a shell runs: the plan file written by a here-document (nothing is
    written now), then the commands."""
    path = plan_place(spec, plan, None)
    before, cmds, after = steps(spec, plan, path)
    click.echo(f"cat > {shlex.quote(path)} <<'PLAN'\n{plan.to_json()}\nPLAN")
    for argv, env in [(argv, {}) for argv in before] + cmds:
        click.echo(shell_line(argv, env))
    if spec.launcher == "slurm" and spec.backend != "mpi" and spec.nodes > slurm.SHOWN_NODES:
        click.echo(f"# nodes {slurm.SHOWN_NODES}..{spec.nodes - 1}: as node 1, each with its own NODE<i>_ADDR")
    for argv in after:
        click.echo(shlex.join(argv))


def shell_line(argv, env):
    shown = {k: v for k, v in env.items() if k not in ("PYTHONUNBUFFERED", ADDR_ENV)}
    return " ".join([f"{k}={shlex.quote(v)}" for k, v in shown.items()] + [shlex.join(argv)])  # a shell assigns


@dataclass
class LaunchResult:
    returncode: int
    records: list
    errors: list         # one-line reasons for a failure, most specific first
    hung: bool = False   # stopped by the watchdog


class Terminated(Exception):
    """SIGTERM reached commbench during a launch."""


def _terminated(signum, frame):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # Slurm signals every process of the job, some twice
    raise Terminated()


def rank_status(logdir):
    """{rank: {rank, pid, host, done}} that this node's ranks keep in the launch directory."""
    out = {}
    for f in Path(logdir).glob("rank*.json"):
        try:
            st = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if st.get("host") == hostname():
            out[st["rank"]] = st
    return out


def worker_state(pid):
    """State letter of a commbench worker process ('R', 'S', 'T' = stopped, ...), None if there is none."""
    if procs.proc_name(pid) != WORKER_NAME:
        return None  # gone, and the pid reused by someone else
    st = procs.proc_stat(pid)
    return st.state if st else None


def execute(spec, plan, writer=None, progress_label="measuring", max_seconds=None, progress=True):
    """Start the agents, follow the ranks' progress, return when every agent ended.

    Records reach writer (the user's --out) as they arrive and come back in the result. A launch
    that makes no progress for --rdzv-timeout + --timeout + 60 s, or runs past max_seconds, is
    stopped and reported as hanging. A rank of this node stopped (SIGSTOP) for longer than
    --timeout is killed and named.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    if spec.dry_run:
        dry_run(spec, plan)
        return LaunchResult(0, [], [])
    logdir = Path(tempfile.mkdtemp(prefix="commbench-logs-"))
    channel = Channel(logdir / CHANNEL, writer)
    agents, logs, ranks, faults, killed, stopped_since, failed_at = [], [], {}, [], set(), {}, None
    stopped_killed = False   # a rank stopped past --hang-timeout was killed here: the run hung
    plan_file, outside, after = plan_place(spec, plan, logdir), None, []
    on_term = signal.signal(signal.SIGTERM, _terminated)
    try:
        if not plan_file.startswith(str(logdir)):
            outside = new_output(plan_file, "plan file")   # never the user's own file of that name
        plan.write(plan_file)
        before, cmds, after = steps(spec, plan, plan_file)
        for argv in before:
            why = _staged(argv)
            if why:
                return LaunchResult(1, [], [f"{shlex.join(argv)} failed: {why}"])
        for i, (argv, env) in enumerate(cmds):
            log = open(logdir / f"agent{i}.log", "w+")
            logs.append(log)
            env = {**os.environ, **env, STATUS_ENV: str(logdir)}
            if spec.launcher != "slurm":  # torchrun's own torchelastic_* log dirs go in ours, removed with it
                env["TMPDIR"] = str(logdir)
            agents.append(procs.spawn(argv, env=env, stdout=None if spec.verbose else log,
                                      stderr=None if spec.verbose else subprocess.STDOUT))
        stall_limit = spec.rdzv_timeout + spec.timeout + 60
        seen, last_change = 0, time.monotonic()
        started = last_change
        with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
                      TimeElapsedColumn(), transient=True, disable=spec.verbose or not progress,
                      console=console(stderr=True)) as bar:
            task = bar.add_task(progress_label, total=plan.records_expected())
            while any(p.poll() is None for p in agents):
                time.sleep(0.2)
                channel.poll()
                ranks.update(rank_status(logdir))
                now = min((st["done"] for st in ranks.values()), default=0)  # every rank does every step
                for rank, st in ranks.items():
                    if worker_state(st["pid"]) != "T":
                        stopped_since.pop(rank, None)
                    elif time.monotonic() - stopped_since.setdefault(rank, time.monotonic()) > \
                            spec.hang_timeout + STOP_GRACE_S:  # rank 0 itself stopped: nobody else reports it
                        faults.append(f"rank {rank} on {st['host']} (pid {st['pid']}) was stopped (SIGSTOP, "
                                      f"state T) for more than --hang-timeout {spec.hang_timeout:g} s; killed it")
                        procs.kill(st["pid"])
                        killed.add(st["pid"])
                        stopped_since.pop(rank)
                        stopped_killed = True
                if any(st.get("exit") == EXIT_HANG for st in ranks.values()):
                    killed.update(st["pid"] for st in ranks.values())  # ended by us, not by their own fault
                    _stop(agents, ranks, grace=2)  # a stopped rank cannot act on torchrun's SIGTERM
                    break
                gone = {r: st.get("exit") is not None or worker_state(st["pid"]) is None for r, st in ranks.items()}
                if failed_at is None and ranks and all(gone.values()) and \
                        any(st.get("exit") for st in ranks.values()):
                    failed_at = time.monotonic()  # every rank here ended, one of them badly
                elif failed_at and time.monotonic() - failed_at > AGENT_GRACE_S:
                    _stop(agents, ranks, grace=2)  # torchrun blocked, e.g. on a store it can no longer reach
                    break
                if now != seen:
                    seen, last_change = now, time.monotonic()
                    stall_limit = spec.timeout + 60
                    bar.update(task, completed=now)
                hang = None
                if time.monotonic() - last_change > stall_limit:
                    hang = f"no measurement finished in {stall_limit:.0f} s: a rank hangs; stopped"
                elif max_seconds and time.monotonic() - started > max_seconds:
                    hang = f"still running after {max_seconds:.0f} s; stopped"
                if hang:
                    _stop(agents, ranks)
                    channel.poll()
                    return LaunchResult(1, channel.records, faults + [hang], hung=True)
        channel.poll()
        ranks.update(rank_status(logdir))
        codes = [p.returncode for p in agents]
        code = next((c for c in codes if c), 0) or (1 if faults else 0)
        if any(st.get("exit") == EXIT_HANG for st in ranks.values()) or stopped_killed:
            code = EXIT_HANG   # rank 0's watchdog reported a hang: commbench's own exit status says so
        reasons = list(dict.fromkeys(faults + _reasons(logs, spec, ranks, killed))) if code else []
        return LaunchResult(code, channel.records, reasons)
    except Terminated:  # keep what was measured, stop every agent (srun passes it on to every node), report
        _stop(agents, ranks, grace=2)
        channel.poll()
        measured = sum(1 for r in channel.records if not r.get("event"))
        nodes = slurm.failed_nodes() if spec.launcher == "slurm" else []  # Slurm ends a job whose node it lost
        return LaunchResult(EXIT_TERM, channel.records, nodes + [f"terminated by SIGTERM (a time limit, scancel or "
                                                                 f"kill) after {measured} measurements; they are kept"])
    finally:
        signal.signal(signal.SIGTERM, on_term)
        _stop(agents, ranks)
        channel.poll()
        for log in logs:
            log.close()
        if after:            # this node's copy first: srun cannot run in a job Slurm is ending
            with contextlib.suppress(OSError):
                os.unlink(slurm.node_plan_file(plan))
        for argv in after:   # best effort: a node that is gone keeps a small file in its temp dir
            _staged(argv, UNSTAGE_TIMEOUT_S)
        if outside and os.path.exists(outside):
            os.unlink(outside)
        shutil.rmtree(logdir, ignore_errors=True)


def _staged(argv, timeout=STAGE_TIMEOUT_S):
    """Run a staging command (sbcast, its clean-up) to its end, stopped past timeout: None, or why it failed in
    one line."""
    try:
        done = procs.run(argv, timeout=timeout)
    except OSError as exc:
        return str(exc)
    if done.timed_out:
        return f"still running after {timeout} s; stopped"
    if done.returncode:
        return (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
    return None


def _stop(agents, ranks=None, grace=10):
    """End every agent's process group (torchrun), then any worker of ours left behind.

    torchrun starts each worker in a session of its own, so the agent's group does not reach
    them; a stopped worker cannot act on torchrun's SIGTERM, so it gets SIGKILL at once.
    """
    workers = [st["pid"] for st in (ranks or {}).values()]
    for pid in workers:
        if worker_state(pid) == "T":
            procs.kill(pid)
    for agent in agents:
        procs.stop(agent, grace)
    for pid in workers:
        if worker_state(pid) is not None:
            procs.kill(pid)


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


def _reasons(logs, spec, ranks=None, killed=()):
    """Why the launch failed, from the agents' logs: ranks killed by a signal, worker lines (a rank
    names the peer it blames first), rendezvous failures, else the tail."""
    lines = []
    for log in logs:
        log.seek(0)
        lines.extend(log.read().splitlines())
    worker = [ln[ln.index("commbench-worker:") + len("commbench-worker:"):].strip()
              for ln in lines if "commbench-worker:" in ln]
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


