"""Run a plan: start the chosen launcher's processes, follow the ranks' progress and records, stop what hangs
(a Supervisor per launch), and say why a launch failed (failure.py reads it from the agents' logs).

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
import shlex
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click

from benchcore.files import open_new
from benchcore.processes import procs
from benchcore.results.records import hostname, new_output
from commbench.evidence import nccl as nccl_evidence
from commbench.launch import failure, local, mpirun, slurm, ssh, torchrun
from commbench.launch.channel import Channel
from commbench.launch.liveness import ADDR_ENV, CHANNEL, EXIT_HANG, REMOTE_STATUS, STATUS_ENV, WORKER_NAME

STOP_GRACE_S = 5   # a rank stopped past --hang-timeout + this is killed (rank 0's watchdog reports it first)
AGENT_GRACE_S = 5  # an agent still running this long after one of its ranks failed is stuck: stopped
STAGE_TIMEOUT_S = 120  # sbcast of the plan file to every node
UNSTAGE_TIMEOUT_S = 10  # its removal after: best effort, a failed run must not wait on a node that is gone
EXIT_TERM = 128 + signal.SIGTERM  # 143: ended by SIGTERM (Slurm's time limit, scancel, kill), as a shell reports it
LAUNCHERS = {"local": local.commands, "torchrun": torchrun.commands, "slurm": slurm.commands,   # torch.distributed's
             "ssh": ssh.commands}


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
    if spec.launcher == "ssh" and spec.nodes > ssh.SHOWN_NODES:
        click.echo(f"# hosts {ssh.SHOWN_NODES}..{spec.nodes - 1}: as host 1, each over its own ssh")
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
    """SIGTERM reached commbench during a launch (or between a sweep's launches)."""


def on_sigterm(signum, frame):
    """The SIGTERM handler while commbench launches: Terminated, and SIGTERM ignored from then on (Slurm signals
    every process of the job, some twice): the run ends writing what it measured, which a second one would cut."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Terminated()


def rank_status(logdir, remote=False):
    """{rank: {rank, pid, host, done}} that this node's ranks keep in the launch directory; remote: what the ssh
    links keep there of the ranks on the hosts (progress only: those pids are other machines')."""
    out = {}
    for f in Path(logdir, *([REMOTE_STATUS] if remote else [])).glob("rank*.json"):
        try:
            st = json.loads(f.read_text())
        except (OSError, ValueError):
            continue
        if remote or st.get("host") == hostname():
            out[st["rank"]] = st
    return out


def worker_state(pid):
    """State letter of a commbench worker process ('R', 'S', 'T' = stopped, ...), None if there is none."""
    if procs.proc_name(pid) != WORKER_NAME:
        return None  # gone, and the pid reused by someone else
    st = procs.proc_stat(pid)
    return st.state if st else None


def launch_env(spec, env, logdir, evidence=True):
    """env, and where the launch may use NCCL its debug output per rank into logdir (evidence.nccl.debug_env;
    none under --no-evidence)."""
    if evidence and spec.backend != "mpi" and spec.may_use_nccl():
        return {**env, **nccl_evidence.debug_env(env, logdir)}
    return env


def execute(spec, plan, writer=None, shown=None, max_seconds=None):
    """Start the agents, follow the ranks' progress, return when every agent ended.

    Records reach writer (the user's --out) as they arrive and come back in the result; shown(step, repeats) hears
    each step of plan.steps() the ranks begin (-1: a time budget's calibration; repeats: those it chose). A launch
    that makes no progress for --rdzv-timeout + --timeout + 60 s, or runs past max_seconds, is
    stopped and reported as hanging. A rank of this node stopped (SIGSTOP) for longer than
    --timeout is killed and named.
    """
    if spec.dry_run:
        dry_run(spec, plan)
        return LaunchResult(0, [], [])
    launch = Supervisor(spec, plan, writer)
    on_term = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        staging_failed = launch.start()
        return staging_failed or launch.follow(max_seconds, shown)
    except Terminated:  # keep what was measured, stop every agent (srun passes it on to every node), report
        on_term = signal.SIG_IGN   # until the caller has written what was measured and exits (EXIT_TERM)
        return launch.terminated()
    finally:
        signal.signal(signal.SIGTERM, on_term)
        launch.clean_up()


class Supervisor:
    """One launch on this machine, from its plan file to its clean-up. Its states, in order: start (the plan
    written, staged under Slurm, the agents spawned), follow (a look every 0.2 s until every agent ended: ranks
    stopped too long are killed; a hang a rank reported, agents blocked after their ranks failed, no progress or
    too long a run stop it), a result (ended, hung or terminated), then clean_up, whatever happened."""

    def __init__(self, spec, plan, writer):
        self.spec, self.plan = spec, plan
        self.logdir = Path(tempfile.mkdtemp(prefix="commbench-logs-"))
        self.channel = Channel(self.logdir / CHANNEL, writer)
        self.agents, self.logs, self.ranks = [], [], {}   # agents' processes and logs; {rank: status} of this node
        self.faults, self.killed = [], set()   # reasons seen here; pids of workers ended here, not by their fault
        self.stopped_since, self.stopped_killed = {}, False   # rank -> when seen stopped; one was killed: it hung
        self.failed_at = None                  # when every rank here had ended, one of them badly
        self.plan_file, self.outside, self.after = plan_place(spec, plan, self.logdir), None, []
        self.seen, self.last_change, self.started, self.stall_limit = 0, None, None, None   # progress (follow)
        self.at = (None, None)                 # the step the ranks announced last, and a time budget's repeats

    def start(self):
        """Write the plan file, stage it (sbcast) and spawn the agents; a LaunchResult where staging failed."""
        if not self.plan_file.startswith(str(self.logdir)):
            self.outside = new_output(self.plan_file, "plan file")   # never the user's own file of that name
        self.plan.write(self.plan_file)
        before, cmds, self.after = steps(self.spec, self.plan, self.plan_file)
        for argv in before:
            why = _staged(argv)
            if why:
                return LaunchResult(1, [], [f"{shlex.join(argv)} failed: {why}"])
        verbose = self.spec.verbose
        for i, (argv, env) in enumerate(cmds):
            log = open_new(self.logdir / f"agent{i}.log", "agent log")
            self.logs.append(log)
            env = launch_env(self.spec, {**os.environ, **env, STATUS_ENV: str(self.logdir)}, self.logdir,
                             self.plan.evidence)
            if self.spec.launcher != "slurm":  # torchrun's own torchelastic_* log dirs go in ours, removed with it
                env["TMPDIR"] = str(self.logdir)
            self.agents.append(procs.spawn(argv, env=env, stdout=None if verbose else log,
                                           stderr=None if verbose else subprocess.STDOUT))
        return None

    def follow(self, max_seconds, shown):
        """Look at the ranks every 0.2 s until every agent ended (shown hears the step they are at); the launch's
        result."""
        self.stall_limit = self.spec.rdzv_timeout + self.spec.timeout + 60
        self.last_change = self.started = time.monotonic()
        while any(p.poll() is None for p in self.agents):
            time.sleep(0.2)
            self.channel.poll()
            self.ranks.update(rank_status(self.logdir))
            self._kill_stopped()
            if self._hang_reported() or self._agents_stuck():
                break
            self._progress(shown)
            hang = self._hang(max_seconds)
            if hang:
                return self.hung(hang)
        return self.ended()

    def _kill_stopped(self):
        """Kill a rank of this node stopped (SIGSTOP) past --hang-timeout + STOP_GRACE_S: rank 0 itself stopped,
        nobody else reports it."""
        limit = self.spec.hang_timeout + STOP_GRACE_S
        for rank, st in self.ranks.items():
            if worker_state(st["pid"]) != "T":
                self.stopped_since.pop(rank, None)
            elif time.monotonic() - self.stopped_since.setdefault(rank, time.monotonic()) > limit:
                self.faults.append(f"rank {rank} on {st['host']} (pid {st['pid']}) was stopped (SIGSTOP, state T) "
                                   f"for more than --hang-timeout {self.spec.hang_timeout:g} s; killed it")
                procs.kill(st["pid"])
                self.killed.add(st["pid"])
                self.stopped_since.pop(rank)
                self.stopped_killed = True

    def _hang_reported(self):
        """Whether a rank's watchdog reported a hang; then every agent is stopped (its ranks ended by us)."""
        if not any(st.get("exit") == EXIT_HANG for st in self.ranks.values()):
            return False
        self.killed.update(st["pid"] for st in self.ranks.values())  # ended by us, not by their own fault
        self._stop(grace=2)  # a stopped rank cannot act on torchrun's SIGTERM
        return True

    def _agents_stuck(self):
        """Whether an agent still ran AGENT_GRACE_S after every rank here ended, one of them badly; then the
        agents are stopped (torchrun blocked, e.g. on a store it can no longer reach)."""
        ranks = self.ranks
        gone = {r: st.get("exit") is not None or worker_state(st["pid"]) is None for r, st in ranks.items()}
        if self.failed_at is None and ranks and all(gone.values()) and any(st.get("exit") for st in ranks.values()):
            self.failed_at = time.monotonic()
        elif self.failed_at and time.monotonic() - self.failed_at > AGENT_GRACE_S:
            self._stop(grace=2)
            return True
        return False

    def _progress(self, shown):
        """Note the measurements every rank finished (once one is, the stall limit is --timeout + 60 s) and tell
        shown the step the lowest rank here announced."""
        ranks = {**rank_status(self.logdir, remote=True), **self.ranks} if self.spec.launcher == "ssh" else self.ranks
        done = min((st["done"] for st in ranks.values()), default=0)  # every rank does every step
        if done != self.seen:
            self.seen, self.last_change = done, time.monotonic()
            self.stall_limit = self.spec.timeout + 60
        first = ranks[min(ranks)] if ranks else {}
        at = (first.get("step"), first.get("repeats"))
        if shown and at[0] is not None and at != self.at:
            self.at = at
            shown(*at)

    def _hang(self, max_seconds):
        """Why the launch counts as hanging now (no progress within the stall limit, past max_seconds), or None."""
        if time.monotonic() - self.last_change > self.stall_limit:
            return f"no measurement finished in {self.stall_limit:.0f} s: a rank hangs; stopped"
        if max_seconds and time.monotonic() - self.started > max_seconds:
            return f"still running after {max_seconds:.0f} s; stopped"
        return None

    def hung(self, hang):
        """The result of a launch stopped as hanging: what it measured, and why."""
        self._stop()
        self.channel.poll()
        return LaunchResult(1, self.channel.records, self.faults + [hang], hung=True)

    def ended(self):
        """The result of a launch whose agents all ended: the first failing exit status (EXIT_HANG where a rank
        reported a hang or one stopped was killed) and why, from what was seen and the agents' logs."""
        self.channel.poll()
        self.ranks.update(rank_status(self.logdir))
        codes = [p.returncode for p in self.agents]
        code = next((c for c in codes if c), 0) or (1 if self.faults else 0)
        if any(st.get("exit") == EXIT_HANG for st in self.ranks.values()) or self.stopped_killed:
            code = EXIT_HANG   # rank 0's watchdog reported a hang: commbench's own exit status says so
        if not code:
            return LaunchResult(code, self.channel.records, [])
        reasons = failure.reasons(self.logs, self.spec, self.ranks, self.killed)
        return LaunchResult(code, self.channel.records, list(dict.fromkeys(self.faults + reasons)))

    def terminated(self):
        """The result of a launch that SIGTERM reached: what it measured, every agent stopped."""
        self._stop(grace=2)
        self.channel.poll()
        measured = sum(1 for r in self.channel.records if not r.get("event"))
        nodes = slurm.failed_nodes() if self.spec.launcher == "slurm" else []  # Slurm ends a job whose node it lost
        reason = f"terminated by SIGTERM (a time limit, scancel or kill) after {measured} measurements; they are kept"
        return LaunchResult(EXIT_TERM, self.channel.records, nodes + [reason])

    def clean_up(self):
        """Every agent stopped, the last records read, the logs closed, the plan file removed (this node's copy
        first: srun cannot run in a job Slurm is ending), the launch directory removed."""
        self._stop()
        self.channel.poll()
        for log in self.logs:
            log.close()
        if self.after:
            with contextlib.suppress(OSError):
                os.unlink(slurm.node_plan_file(self.plan))
        for argv in self.after:   # best effort: a node that is gone keeps a small file in its temp dir
            _staged(argv, UNSTAGE_TIMEOUT_S)
        if self.outside and os.path.exists(self.outside):
            os.unlink(self.outside)
        shutil.rmtree(self.logdir, ignore_errors=True)

    def _stop(self, grace=10):
        """End every agent's process group (torchrun), then any worker of ours left behind.

        torchrun starts each worker in a session of its own, so the agent's group does not reach
        them; a stopped worker cannot act on torchrun's SIGTERM, so it gets SIGKILL at once.
        """
        workers = [st["pid"] for st in self.ranks.values()]
        for pid in workers:
            if worker_state(pid) == "T":
                procs.kill(pid)
        for agent in self.agents:
            procs.stop(agent, grace)
        for pid in workers:
            if worker_state(pid) is not None:
                procs.kill(pid)


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
