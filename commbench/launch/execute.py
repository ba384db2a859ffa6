"""Launch options shared by every measuring command, and the launchers behind them.

Modes (chosen by --launcher auto):
  slurm    inside an allocation (SLURM_JOB_ID): srun starts one node agent per node,
           each runs torchrun with a c10d rendezvous on the allocation's first node;
  torchrun --rdzv-endpoint HOST:PORT --node-rank R, started by hand on every node;
  local    N torchrun agents on this machine joined by a real c10d rendezvous on 127.0.0.1.
The node with node rank 0 (agent 0 locally) hands the records back: its local rank 0 appends
each to the launch directory's channel, which the launcher follows and returns (writing each to
--out as it arrives). Progress comes from the ranks' status files in the same directory.
"""
import errno
import fcntl
import json
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import click

from benchcore import procs
from benchcore.errors import UserError
from benchcore.records import hostname
from benchcore.report import console
from benchcore.torchrun import torchrun_argv
from commbench import mpi
from commbench.liveness import ADDR_ENV, CHANNEL, EXIT_HANG, PROBE_TIMEOUT_S, RECORD_NODE_ENV, STATUS_ENV, probe
from commbench.plan import Plan

LAUNCHERS = ("auto", "local", "torchrun", "slurm", "mpirun")
BACKENDS = ("auto", "nccl", "gloo", "mpi")
IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
STOP_GRACE_S = 5   # a rank stopped past --hang-timeout + this is killed (rank 0's watchdog reports it first)
AGENT_GRACE_S = 5  # an agent still running this long after one of its ranks failed is stuck: stopped


@dataclass
class LaunchSpec:
    nodes: int
    nproc_per_node: int
    launcher: str
    rdzv_endpoint: str
    node_rank: int
    backend: str
    timeout: float
    rdzv_timeout: float
    dry_run: bool
    verbose: bool
    env: dict = field(default_factory=dict)   # extra environment for this launch
    notes: list = field(default_factory=list)  # one-line notices, shown once the plan is accepted
    hang_timeout: float = 60                   # no progress this long: a hang, reported with where each rank is

    @property
    def world_size(self):
        return self.nodes * self.nproc_per_node

    def may_use_nccl(self):
        return self.backend == "nccl" or (self.backend == "auto" and gpu_count() > 0)


def launch_options(fn):
    """Click options every measuring command takes (one implementation for all)."""
    options = [
        click.option("--nodes", type=int, default=None,
                     help="Nodes (torchrun agents) [default: the Slurm allocation's, else 1]."),
        click.option("--nproc-per-node", type=int, default=None,
                     help="Ranks per node [default: GPUs on this node, else 1]."),
        click.option("--launcher", type=click.Choice(LAUNCHERS), default="auto", show_default=True,
                     help="auto: slurm inside an allocation, torchrun with --rdzv-endpoint, mpirun with --backend "
                          "mpi, else local emulation."),
        click.option("--rdzv-endpoint", default=None, metavar="HOST:PORT",
                     help="Rendezvous on node rank 0 (run the same command on every node)."),
        click.option("--node-rank", type=int, default=None, help="This node's rank with --rdzv-endpoint."),
        click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
                     help="auto: NCCL when CUDA is available, else Gloo (mpi: mpi4py, under mpirun or srun)."),
        click.option("-T", "--timeout", type=float, default=300, show_default=True,
                     help="Process-group timeout in s: a dead or stuck peer ends the run within it."),
        click.option("--rdzv-timeout", type=float, default=120, show_default=True,
                     help="Seconds to wait for every node to join."),
        click.option("--hang-timeout", type=float, default=60, show_default=True,
                     help="No operation finishing this long is a hang: rank 0 reports where every rank is and the "
                          "run ends with exit code 4 (kept below --timeout)."),
        click.option("--dry-run", is_flag=True, help="Print the launch command lines and exit."),
        click.option("-v", "--verbose", is_flag=True, help="Stream torchrun and worker output."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def parse_backends(text):
    """'gloo,mpi' -> ['gloo', 'mpi'] (at least two, each known, auto excluded)."""
    names = list(dict.fromkeys(b.strip() for b in str(text).split(",") if b.strip()))
    bad = [b for b in names if b not in BACKENDS[1:]]
    if bad or len(names) < 2:
        raise UserError(f"--backends takes two or more of {', '.join(BACKENDS[1:])}, got {text!r}")
    return names


def spec_from_options(kw):
    """Pop the launch options out of a command's keyword arguments into a checked LaunchSpec."""
    spec = LaunchSpec(nodes=kw.pop("nodes"), nproc_per_node=kw.pop("nproc_per_node"),
                      launcher=kw.pop("launcher"), rdzv_endpoint=kw.pop("rdzv_endpoint"),
                      node_rank=kw.pop("node_rank"), backend=kw.pop("backend"), timeout=kw.pop("timeout"),
                      rdzv_timeout=kw.pop("rdzv_timeout"), dry_run=kw.pop("dry_run"), verbose=kw.pop("verbose"),
                      hang_timeout=kw.pop("hang_timeout", 60))
    allocation = int(os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or 0)
    if spec.nodes is None:
        spec.nodes = allocation if allocation and spec.launcher in ("auto", "slurm") else 1
    elif allocation and spec.launcher in ("auto", "slurm") and spec.nodes != allocation:
        raise UserError(f"--nodes {spec.nodes}, but this Slurm allocation has {allocation} nodes")
    if spec.nodes < 1:
        raise UserError(f"--nodes must be at least 1, got {spec.nodes}")
    gpus = gpu_count()
    if spec.nproc_per_node is None:
        spec.nproc_per_node = gpus or (2 if spec.nodes == 1 else 1)
        if not gpus and spec.nodes == 1:
            spec.notes.append(f"no GPU here: 2 local ranks on {'MPI' if spec.backend == 'mpi' else 'Gloo'} (one rank "
                              "would measure no communication; --nproc-per-node N chooses)")
    if spec.nproc_per_node < 1:
        raise UserError(f"--nproc-per-node must be at least 1, got {spec.nproc_per_node}")

    if spec.timeout <= 0 or spec.rdzv_timeout <= 0 or spec.hang_timeout <= 0:
        raise UserError("--timeout, --rdzv-timeout and --hang-timeout must be positive")
    spec.hang_timeout = min(spec.hang_timeout, spec.timeout * 0.8)   # reported before the process group gives up
    if spec.backend == "mpi" or spec.launcher == "mpirun":
        mpi.resolve(spec)
    if spec.launcher == "auto":
        spec.launcher = ("slurm" if os.environ.get("SLURM_JOB_ID") else
                         "torchrun" if spec.rdzv_endpoint else "local")
    if spec.launcher == "torchrun":
        if not spec.rdzv_endpoint or spec.node_rank is None:
            raise UserError("--launcher torchrun needs --rdzv-endpoint HOST:PORT and --node-rank R")
        split_endpoint(spec.rdzv_endpoint)
        if not 0 <= spec.node_rank < spec.nodes:
            raise UserError(f"--node-rank must be in 0..{spec.nodes - 1}, got {spec.node_rank}")
    elif spec.node_rank is not None:
        raise UserError("--node-rank only applies with --rdzv-endpoint (--launcher torchrun)")
    cores = len(os.sched_getaffinity(0))
    if not gpus and spec.launcher == "local" and spec.world_size > cores:
        spec.notes.append(f"{spec.world_size} ranks on {cores} cores: they compete for the CPU and the numbers "
                          "show it")
    if spec.launcher == "slurm" and not os.environ.get("SLURM_JOB_ID") and not spec.dry_run:
        raise UserError("--launcher slurm needs a Slurm allocation (SLURM_JOB_ID is not set)")
    return spec


def check_endpoint(spec):
    """Before launching on node rank 0 (which serves the rendezvous): its endpoint is an address of this
    node and the port is free. Other nodes: the endpoint resolves and has a route."""
    if spec.launcher != "torchrun":
        return
    host, port = split_endpoint(spec.rdzv_endpoint)
    try:
        addr = socket.gethostbyname(host)
    except OSError:
        raise UserError(f"--rdzv-endpoint host {host} does not resolve on {hostname()}") from None
    if spec.node_rank != 0:
        route_to(host)
        return
    for bind_to, refusal in (((addr, 0), f"{host} ({addr}) is not an address of this node ({hostname()}); node "
                                          "rank 0 serves the rendezvous at one of its own addresses"),
                             (("", port), f"port {port} is already in use on {hostname()} (another commbench or "
                                          "service): choose another --rdzv-endpoint port")):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the store binds: TIME_WAIT is free
            try:
                s.bind(bind_to)
            except OSError as exc:
                if exc.errno in (errno.EADDRNOTAVAIL, errno.EADDRINUSE):
                    raise UserError(f"--rdzv-endpoint {spec.rdzv_endpoint}: {refusal}") from None
                raise


def split_endpoint(endpoint):
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UserError(f"--rdzv-endpoint {endpoint!r} is not HOST:PORT")
    return host, int(port)


def gpu_memories():
    """Total memory of each GPU NVML sees on this node; [] without a driver (NVML is the hardware boundary)."""
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            return [pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(i)).total
                    for i in range(pynvml.nvmlDeviceGetCount())]
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return []


def gpu_count():
    return len(gpu_memories())


def route_to(host):
    """(interface name, local address) this machine uses to reach host."""
    try:
        addr = socket.gethostbyname(host)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))  # UDP connect sends nothing; it only picks the route
            local = s.getsockname()[0]
    except OSError as exc:
        raise UserError(f"cannot find a route to rendezvous host {host}: {exc}") from None
    for _, name in socket.if_nameindex():
        if interface_address(name) == local:
            return name, local
    raise UserError(f"no interface holds {local}, the address that routes to {host}")


def interface_address(name):
    """IPv4 address of interface `name`, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def store_timeout(spec):
    """torchrun's rendezvous store timeout (read_timeout, default 60 s): a node that cannot reach the
    store host gives up after two connect attempts, so half of --rdzv-timeout keeps within it."""
    return int(max(5, min(60, spec.rdzv_timeout / 2)))


def agent_argv(spec, endpoint, run_id, is_host, local_addr, plan):
    conf = f"is_host={int(is_host)},join_timeout={int(spec.rdzv_timeout)},read_timeout={store_timeout(spec)}"
    return torchrun_argv("commbench.worker", ["--plan", plan.to_json()], spec.nproc_per_node, nnodes=spec.nodes,
                         endpoint=endpoint, rdzv_id=run_id, rdzv_conf=conf, local_addr=local_addr)


def node_env(spec, host, record_node):
    """Environment for one node agent: the socket interface that reaches the rendezvous host."""
    env = dict(spec.env)
    try:
        ifname, local = route_to(host)
    except UserError:
        if not spec.dry_run:
            raise
        ifname, local = "IFACE_TO_" + host, "LOCAL_ADDR"  # a dry run prints what it can

    for var in IFNAME_VARS:
        if var not in os.environ and var not in env:
            env[var] = ifname
    env[RECORD_NODE_ENV] = "1" if record_node else "0"
    env[ADDR_ENV] = local  # where this node's ranks answer liveness probes
    env["PYTHONUNBUFFERED"] = "1"
    return env, local


def commands(spec, plan):
    """[(argv, extra env)] for the agents this machine starts."""
    if spec.backend == "mpi":
        return mpi.commands(spec, plan)
    run_id = plan.run_id
    if spec.launcher == "local":
        endpoint = f"127.0.0.1:{free_port()}"
        return [(agent_argv(spec, endpoint, run_id, i == 0, local, plan), env)
                for i in range(spec.nodes) for env, local in [node_env(spec, "127.0.0.1", i == 0)]]
    if spec.launcher == "torchrun":
        host, port = split_endpoint(spec.rdzv_endpoint)
        env, local = node_env(spec, host, spec.node_rank == 0)
        rdzv_id = f"commbench-{port}"  # every node derives the same id; each one's run_id is its own
        return [(agent_argv(spec, spec.rdzv_endpoint, rdzv_id, spec.node_rank == 0, local, plan), env)]
    agent = {"spec": spec.__dict__, "plan": plan.to_json(), "endpoint": slurm_endpoint()}
    srun = (["srun", "--nodes", str(spec.nodes), "--ntasks-per-node", "1", "--kill-on-bad-exit=1",
             sys.executable, "-m", "commbench.launch", json.dumps(agent, separators=(",", ":"))], {})
    if not spec.dry_run:
        return [srun]
    host, _ = split_endpoint(agent["endpoint"])  # what each node's agent becomes
    return [srun] + [(agent_argv(spec, agent["endpoint"], plan.run_id, i == 0, f"NODE{i}_ADDR", plan),
                      node_env(spec, host, i == 0)[0]) for i in range(spec.nodes)]


def first_host(nodelist):
    """First host of a Slurm node list: 'gpu[03-04,07],cpu1' -> 'gpu03' (scontrol's job, without it)."""
    head = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not head:
        return nodelist
    prefix, ranges = head.groups()
    return prefix + (re.split(r"[-,]", ranges)[0] if ranges else "")


def slurm_endpoint():
    """Node 0 of the allocation, port derived from the job id (the same on every node)."""
    port = 29500 + int(os.environ.get("SLURM_JOB_ID", "0") or 0) % 1000
    return f"{first_host(os.environ.get('SLURM_JOB_NODELIST', 'localhost'))}:{port}"


def node_agent(agent):
    """On each Slurm node: pick is_host and the interface here, then become torchrun."""
    spec, plan = LaunchSpec(**agent["spec"]), Plan.from_json(agent["plan"])
    host, _ = split_endpoint(agent["endpoint"])
    first = os.environ.get("SLURM_NODEID", "0") == "0"
    env, local = node_env(spec, host, first)
    argv = agent_argv(spec, agent["endpoint"], plan.run_id, first, local, plan)
    os.execve(argv[0], argv, {**os.environ, **env})


def shell_line(argv, env):
    shown = {k: v for k, v in env.items() if k not in ("PYTHONUNBUFFERED", ADDR_ENV)}
    return shlex.join([f"{k}={v}" for k, v in shown.items()] + argv)


@dataclass
class LaunchResult:
    returncode: int
    records: list
    errors: list         # one-line reasons for a failure, most specific first
    hung: bool = False   # stopped by the watchdog


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
    argv = procs.proc_cmdline(pid) or []
    if "commbench.worker" not in argv or "torch.distributed.run" in argv:
        return None  # gone, and the pid reused by someone else
    st = procs.proc_stat(pid)
    return st.state if st else None


class Channel:
    """Follows the records the record node's rank appends to the launch directory: complete lines only."""

    def __init__(self, path, writer):
        self.path, self.writer, self.records, self._offset = Path(path), writer, [], 0

    def poll(self):
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except FileNotFoundError:
            return
        end = data.rfind(b"\n") + 1
        self._offset += end
        for line in data[:end].splitlines():
            rec = json.loads(line)
            self.records.append(rec)
            if self.writer:
                self.writer.write(rec)


def execute(spec, plan, writer=None, progress_label="measuring", max_seconds=None, progress=True):
    """Start the agents, follow the ranks' progress, return when every agent ended.

    Records reach writer (the user's --out) as they arrive and come back in the result. A launch
    that makes no progress for --rdzv-timeout + --timeout + 60 s, or runs past max_seconds, is
    stopped and reported as hanging. A rank of this node stopped (SIGSTOP) for longer than
    --timeout is killed and named.
    """
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    cmds = commands(spec, plan)
    if spec.dry_run:
        for argv, env in cmds:
            click.echo(shell_line(argv, env))
        return LaunchResult(0, [], [])
    logdir = Path(tempfile.mkdtemp(prefix="commbench-logs-"))
    channel = Channel(logdir / CHANNEL, writer)
    agents, logs, ranks, faults, killed, stopped_since, failed_at = [], [], {}, [], set(), {}, None
    stopped_killed = False   # a rank stopped past --hang-timeout was killed here: the run hung
    try:
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
    finally:
        _stop(agents, ranks)
        channel.poll()
        for log in logs:
            log.close()
        shutil.rmtree(logdir, ignore_errors=True)


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
    signalled = _signalled(lines, ranks or {}, set(killed)) + mpi.dead_ranks(lines, ranks or {})
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


if __name__ == "__main__":
    node_agent(json.loads(sys.argv[1]))
