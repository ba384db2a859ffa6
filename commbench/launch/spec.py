"""A LaunchSpec, what the launch options of a measuring command say (parsed by commbench/commands/options.py),
checked and completed: how many nodes and ranks, which launcher and backend, the timeouts. Which launcher `auto`
means is decided here."""
import os
from dataclasses import dataclass, field

from benchcore.errors import UserError, shown
from benchcore.processes.torchrun import too_many
from commbench.launch import mpirun, ssh
from commbench.launch.torchrun import split_endpoint

LAUNCHERS = ("auto", "local", "torchrun", "slurm", "mpirun", "ssh")
BACKENDS = ("auto", "nccl", "gloo", "mpi")
# Gloo connects every pair of ranks when its process group starts, so start-up grows as ranks squared: 46 min at
# 8,192 ranks (Meta's measurement in pytorch/gloo#408). A world that would still be connecting when --timeout
# ends cannot start.
GLOO_START = (46 * 60, 8192)   # (seconds, ranks)


def slurm_job():
    """The Slurm job whose allocation srun can start steps in here, or None. A node's own Slurm scripts are not
    such a place though some see a job: a Prolog or Epilog has the job's SLURM_JOB_ID (SLURM_SCRIPT_CONTEXT names
    the script; older Slurm: SLURM_NODELIST without SLURM_JOB_NODELIST), and srun from a Prolog with
    PrologFlags=Alloc waits until it times out; a HealthCheckProgram has no job. There commbench runs on this node."""
    env = os.environ
    if env.get("SLURM_SCRIPT_CONTEXT") or not env.get("SLURM_JOB_NODELIST"):
        return None
    return env.get("SLURM_JOB_ID") or None


def allocation_nodes():
    """How many nodes the Slurm allocation of slurm_job() has (SLURM_JOB_NUM_NODES; SLURM_NNODES on older Slurm);
    0 outside one."""
    text = (os.environ.get("SLURM_JOB_NUM_NODES") or os.environ.get("SLURM_NNODES") or "") if slurm_job() else ""
    return int(text) if text.isascii() and text.isdigit() and len(text) < 8 else 0


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
    hosts: list = field(default_factory=list)  # --hosts / --hostfile: one agent per host over ssh
    ssh_command: str = ssh.DEFAULT_SSH         # how a host is reached ({host} replaced in its words)

    @property
    def world_size(self):
        return self.nodes * self.nproc_per_node

    @property
    def emulated(self):
        """Several nodes all started on this machine: no endpoint, allocation or host list gave real ones."""
        return self.nodes > 1 and (self.launcher == "local" or
                                   self.launcher == "mpirun" and not mpirun.across_hosts(self))

    def may_use_nccl(self):
        return self.backend == "nccl" or (self.backend == "auto" and gpu_count() > 0)


def resolve_spec(spec):
    """spec (as the options gave it) checked, its defaults filled in (nodes, ranks per node, launcher): the spec."""
    job = slurm_job()
    resolve_hosts(spec)
    allocation = allocation_nodes()
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
        mpirun.resolve(spec, job)
    chosen = spec.launcher
    if spec.launcher == "auto":
        spec.launcher = "slurm" if job else "torchrun" if spec.rdzv_endpoint else "local"
    if spec.launcher == "torchrun":
        if not spec.rdzv_endpoint or spec.node_rank is None:
            raise UserError("--launcher torchrun needs --rdzv-endpoint HOST:PORT and --node-rank R")
        split_endpoint(spec.rdzv_endpoint)
        if not 0 <= spec.node_rank < spec.nodes:
            raise UserError(f"--node-rank must be in 0..{spec.nodes - 1}, got {spec.node_rank}")
    elif spec.node_rank is not None:
        raise UserError("--node-rank only applies with --rdzv-endpoint (--launcher torchrun)")
    elif spec.rdzv_endpoint:   # local and slurm rendezvous where they start the nodes
        raise UserError(f"--rdzv-endpoint is the rendezvous of --launcher torchrun: not with --launcher {spec.launcher}"
                        + (" (auto's choice inside this Slurm allocation)" if chosen == "auto" else ""))
    if spec.emulated and spec.launcher == "local":   # mpirun's own note says it, with its way to real hosts
        spec.notes.append(f"--nodes {spec.nodes} without --rdzv-endpoint, a Slurm allocation or --hosts: "
                          f"{'both' if spec.nodes == 2 else f'all {spec.nodes}'} nodes are emulated on this host")
    cores = len(os.sched_getaffinity(0))
    if not gpus and spec.launcher == "local" and spec.world_size > cores:
        spec.notes.append(f"{spec.world_size} ranks on {cores} cores: they compete for the CPU and the numbers "
                          "show it")
    if spec.launcher == "slurm" and not job and not spec.dry_run:
        script = os.environ.get("SLURM_SCRIPT_CONTEXT")
        raise UserError("--launcher slurm needs a Slurm allocation (" + (
            f"this is Slurm's {shown(script, 40)} script, where srun cannot start a step" if script else
            "SLURM_JOB_ID / SLURM_JOB_NODELIST are not set") + ")")
    check_scale(spec)
    return spec


def resolve_hosts(spec):
    """--hosts/--hostfile: --launcher ssh (auto's choice), --nodes the hosts' count; --launcher ssh needs them."""
    if not spec.hosts:
        if spec.launcher == "ssh":
            raise UserError("--launcher ssh needs --hosts h1,h2,... or --hostfile FILE")
        return
    if spec.launcher not in ("auto", "ssh"):
        raise UserError(f"--hosts/--hostfile start the nodes over ssh: not with --launcher {spec.launcher}")
    if spec.backend == "mpi":
        raise UserError("--backend mpi starts its ranks with mpirun (its hosts in COMMBENCH_MPIRUN_ARGS), not over "
                        "--hosts")
    spec.launcher = "ssh"
    if spec.nodes is None:
        spec.nodes = len(spec.hosts)
    elif spec.nodes != len(spec.hosts):
        raise UserError(f"--nodes {spec.nodes}, but the host list names {len(spec.hosts)} hosts")
    ssh.ssh_words(spec.ssh_command, spec.hosts[0])   # the template checked before anything runs


def check_scale(spec):
    """Refuse, in one line and before any plan is built, a world the launcher cannot start: more torch processes
    than this machine's memory holds where every rank runs here, and a Gloo world whose start-up outlasts
    --timeout."""
    here = {"local": spec.nodes * (spec.nproc_per_node + 1)}   # an agent per node, a worker per rank
    if not mpirun.across_hosts(spec):
        here["mpirun"] = spec.world_size
    crowd = here.get(spec.launcher) and too_many(here[spec.launcher])   # the plan's buffers are judged at launch
    if crowd:
        raise UserError(f"--nodes {spec.nodes} x --nproc-per-node {spec.nproc_per_node} on this machine "
                        f"(--launcher {spec.launcher}) is {crowd}: fewer, or real nodes (--launcher torchrun, slurm or "
                        "mpirun with hosts)")
    if spec.backend != "mpi" and not spec.may_use_nccl():
        seconds, ranks = GLOO_START
        start = seconds * (spec.world_size / ranks) ** 2
        if start > spec.timeout:
            raise UserError(f"{spec.world_size} Gloo ranks take about {start / 60:.0f} min to connect (every pair; "
                            f"{seconds // 60} min at {ranks} ranks, pytorch/gloo#408), past --timeout "
                            f"{spec.timeout:g} s: fewer ranks, NCCL on GPUs, or a longer --timeout")


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
