"""The catalogue of environment variables users sweep, with allowed values and meaning.

Sources: NCCL's environment-variable documentation (docs.nvidia.com/deeplearning/nccl,
"Environment Variables"), PyTorch's ProcessGroupNCCL and Gloo documentation, Open MPI's MCA parameters (ompi_info).
"""
import csv
import difflib
import os
import re
from dataclasses import dataclass
from typing import Optional, Tuple

from benchcore.errors import UserError
from benchcore.inputs import shown

NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")


@dataclass(frozen=True)
class Var:
    name: str
    meaning: str
    choices: Optional[Tuple[str, ...]] = None      # allowed values (case-insensitive)
    int_range: Optional[Tuple[int, int]] = None    # or an integer in [lo, hi]
    # neither: free text (interface or device names)
    listed: bool = False   # NCCL's list syntax: a comma list of choices, ^ to exclude, per collective (2.24+)
                           # as "coll:list" parts joined by ';', e.g. ^LL128 or "ring;allreduce:tree"
    path: bool = False     # the value names a library NCCL loads or a file it reads or writes (free text)

    def check(self, value):
        """None when value is allowed, else why not."""
        if self.listed:
            return self.check_list(value)
        if self.choices and value.upper() in (c.upper() for c in self.choices):
            return None
        if self.int_range:
            try:
                number = int(value)
            except ValueError:
                number = None
            if number is not None and self.int_range[0] <= number <= self.int_range[1]:
                return None
        if not self.choices and not self.int_range:
            return None if value else "is empty"
        allowed = list(self.choices or []) + ([f"{self.int_range[0]}..{self.int_range[1]}"] if self.int_range else [])
        return f"must be {'one of ' if self.choices else 'in '}{', '.join(allowed)}"


    def check_list(self, value):
        known = {c.upper() for c in self.choices}
        for part in value.split(";"):
            coll, sep, items = part.rpartition(":")
            if sep and coll.lower() not in NCCL_COLLECTIVES:
                return f"names no NCCL collective in {part!r} (use {', '.join(NCCL_COLLECTIVES)})"
            bad = [v for v in items.lstrip("^").split(",") if v.strip().upper() not in known]
            if bad or not items.lstrip("^").strip():
                return f"must be a list of {', '.join(self.choices)} (^ excludes; per collective as coll:list;...)"
        return None


NCCL_COLLECTIVES = ("allreduce", "allgather", "reducescatter", "broadcast", "reduce", "sendrecv", "alltoall")
# Who reads a variable, by prefix (longest first): NCCL reads NCCL_* when a communicator is created;
# PyTorch's NCCL process group reads TORCH_NCCL_*; CUDA_* matter on GPUs only; Gloo reads GLOO_*; commbench itself reads its test hooks.
READERS = (("TORCH_NCCL_", ("nccl",)), ("NCCL_", ("nccl",)), ("CUDA_", ("nccl",)), ("GLOO_", ("gloo",)),
           ("OMPI_MCA_", ("mpi",)), ("COMMBENCH_", ("nccl", "gloo", "mpi")))


def read_by(name):
    """The backends whose behaviour name can change (an unknown prefix, e.g. Open MPI's OMPI_MCA_: assume every
    one)."""
    return next((backends for prefix, backends in READERS if name.startswith(prefix)), ("nccl", "gloo", "mpi"))


def split_values(text):
    """'A,B' -> ['A', 'B']; a double-quoted value keeps its commas: '"LL,LL128",Simple' -> ['LL,LL128', 'Simple']."""
    try:
        fields = next(csv.reader([text], skipinitialspace=True, strict=True), [])
    except csv.Error as exc:
        raise UserError(f"cannot split {text!r} into values: {exc}") from None
    return [f.strip() for f in fields if f.strip()]


BOOL = ("0", "1")
CATALOGUE = {v.name: v for v in [
    Var("NCCL_ALGO", "Collective algorithm(s) NCCL may use.",
        ("Ring", "Tree", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT"), listed=True),
    Var("NCCL_PROTO", "Protocol(s): LL (low latency), LL128, Simple (bandwidth).", ("LL", "LL128", "Simple"),
        listed=True),
    Var("NCCL_IB_DISABLE", "1 disables InfiniBand/RoCE; NCCL falls back to sockets.", BOOL),
    Var("NCCL_IB_GID_INDEX", "RoCE GID index (often 3 for RoCE v2).", int_range=(-1, 255)),
    Var("NCCL_IB_HCA", "Which HCAs/ports to use, e.g. mlx5_0:1,mlx5_1:1 or ^mlx5_2."),
    Var("NCCL_IB_QPS_PER_CONNECTION", "Queue pairs per connection (more can help adaptive routing).",
        int_range=(1, 128)),
    Var("NCCL_IB_TIMEOUT", "InfiniBand verbs timeout exponent (4.096 us x 2^value).", int_range=(1, 31)),
    Var("NCCL_IB_RETRY_CNT", "InfiniBand verbs retry count.", int_range=(0, 7)),
    Var("NCCL_IB_SL", "InfiniBand service level.", int_range=(0, 15)),
    Var("NCCL_IB_TC", "InfiniBand traffic class (RoCE: DSCP x 4).", int_range=(0, 255)),
    Var("NCCL_IB_AR_THRESHOLD", "Message size from which InfiniBand adaptive routing is used.", int_range=(0, 1 << 40)),
    Var("NCCL_IB_ADAPTIVE_ROUTING", "1 enables InfiniBand adaptive routing, 0 disables.", BOOL),
    Var("NCCL_IB_PCI_RELAXED_ORDERING", "PCI relaxed ordering for IB verbs: 0 off, 1 on, 2 automatic.", ("0", "1", "2")),
    Var("NCCL_IB_SPLIT_DATA_ON_QPS", "1 splits each message over the queue pairs, 0 uses one per message.", BOOL),
    Var("NCCL_IB_ROCE_VERSION_NUM", "RoCE version used with the GID index.", ("1", "2")),
    Var("NCCL_IB_CUDA_SUPPORT", "Deprecated: force (1) or disable (0) GPUDirect RDMA.", BOOL),
    Var("NCCL_NET", "Network module to use, e.g. IB or Socket."),
    Var("NCCL_NET_PLUGIN", "Network plugin library (libnccl-net-NAME.so, or a path), or none.", path=True),
    Var("NCCL_TUNER_PLUGIN", "Tuner plugin library (libnccl-tuner-NAME.so, or a path).", path=True),
    Var("NCCL_PROFILER_PLUGIN", "Profiler plugin library (libnccl-profiler-NAME.so, or a path).", path=True),
    Var("NCCL_TOPO_FILE", "XML topology file loaded before detection.", path=True),
    Var("NCCL_GRAPH_FILE", "XML file of the rings and trees to use instead of searching.", path=True),
    Var("NCCL_TOPO_DUMP_FILE", "File NCCL writes the detected topology to.", path=True),
    Var("NCCL_GRAPH_DUMP_FILE", "File NCCL writes the rings and trees it chose to.", path=True),
    Var("NCCL_DEBUG_FILE", "File NCCL writes its log to (%h host, %p pid).", path=True),
    Var("NCCL_COLLNET_ENABLE", "1 enables CollNet (in-network reductions, e.g. SHARP).", BOOL),
    Var("NCCL_PXN_DISABLE", "1 disables PCI x NVLink (sending through a peer GPU's NIC).", BOOL),
    Var("NCCL_P2P_PXN_LEVEL", "When to use PXN: 0 never, 1 when needed, 2 always.", ("0", "1", "2")),
    Var("NCCL_P2P_NET_CHUNKSIZE", "Chunk size of point-to-point transfers over the network.", int_range=(1, 1 << 30)),
    Var("NCCL_NET_SHARED_BUFFERS", "1 shares network buffers between peers, 0 disables.", BOOL),
    Var("NCCL_NVB_DISABLE", "1 disables NVLink-bridged paths through a third GPU.", BOOL),
    Var("NCCL_DMABUF_ENABLE", "1 uses dma-buf for GPUDirect RDMA, 0 disables.", BOOL),
    Var("NCCL_LAUNCH_MODE", "How kernels are launched on several GPUs per process.", ("PARALLEL", "GROUP")),
    Var("NCCL_CHECKS_DISABLE", "Deprecated: 1 skips argument checks.", BOOL),
    Var("NCCL_IGNORE_CPU_AFFINITY", "1 ignores the job's CPU affinity for NCCL threads.", BOOL),
    Var("NCCL_SOCKET_IFNAME", "Interface(s) for NCCL's bootstrap and socket transport, e.g. eth0 or ^docker."),
    Var("NCCL_SOCKET_NTHREADS", "CPU threads per socket connection.", int_range=(1, 16)),
    Var("NCCL_NSOCKS_PERTHREAD", "Sockets per socket thread.", int_range=(1, 64)),
    Var("NCCL_P2P_DISABLE", "1 disables peer-to-peer (NVLink/PCIe) between GPUs.", BOOL),
    Var("NCCL_P2P_LEVEL", "Farthest topology distance that still uses P2P.", LEVELS, (0, 5)),
    Var("NCCL_SHM_DISABLE", "1 disables the shared-memory transport.", BOOL),
    Var("NCCL_NET_GDR_LEVEL", "Farthest NIC-GPU distance that still uses GPUDirect RDMA.", LEVELS, (0, 5)),
    Var("NCCL_NET_GDR_READ", "1 lets the NIC read GPU memory directly when sending.", BOOL),
    Var("NCCL_NVLS_ENABLE", "1 enables NVLink SHARP (NVSwitch reductions), 0 disables.", BOOL),
    Var("NCCL_MIN_NCHANNELS", "Fewest channels (rings/trees in parallel).", int_range=(1, 64)),
    Var("NCCL_MAX_NCHANNELS", "Most channels.", int_range=(1, 64)),
    Var("NCCL_BUFFSIZE", "Bytes of buffer per channel and peer (default 4194304).", int_range=(1024, 1 << 30)),
    Var("NCCL_NTHREADS", "CUDA threads per block.", ("64", "128", "256", "512")),
    Var("NCCL_CROSS_NIC", "0: same NIC per ring; 1: rings may cross NICs; 2: NCCL decides.", ("0", "1", "2")),
    Var("NCCL_CUMEM_ENABLE", "1 uses cuMem* allocations for NCCL buffers.", BOOL),
    Var("NCCL_DEBUG", "Log level.", ("VERSION", "WARN", "INFO", "TRACE")),
    Var("NCCL_DEBUG_SUBSYS", "Subsystems to log, e.g. INIT,NET."),
    Var("NCCL_ASYNC_ERROR_HANDLING", "Deprecated name of TORCH_NCCL_ASYNC_ERROR_HANDLING.", ("0", "1", "2", "3")),
    Var("TORCH_NCCL_ASYNC_ERROR_HANDLING", "What PyTorch does on a NCCL error/timeout: 0 none, 1 tear down, "
        "2 clean up only, 3 skip clean-up.", ("0", "1", "2", "3")),
    Var("TORCH_NCCL_BLOCKING_WAIT", "1 makes wait() block and honour the process-group timeout.", BOOL),
    Var("TORCH_NCCL_HIGH_PRIORITY", "1 puts NCCL's streams at high priority, ahead of compute kernels (overlap).",
        BOOL),
    Var("CUDA_DEVICE_MAX_CONNECTIONS", "Hardware work queues per GPU; Megatron sets 1 so that communication kernels "
        "are launched before the GEMMs they overlap.", int_range=(1, 32)),
    Var("GLOO_SOCKET_IFNAME", "Interface Gloo binds, e.g. eth0 (commbench picks the one that routes to the peer)."),
    Var("OMPI_MCA_btl", "Open MPI's byte transfer layers, e.g. self,tcp (TCP even between local ranks), self,sm, "
        "^tcp (ompi_info lists them)."),
    Var("OMPI_MCA_pml", "Open MPI's point-to-point layer: ob1 (over the BTLs), ucx, cm (ompi_info lists them)."),
]}
# The test hooks (commbench/cases/faults.py: COMMBENCH_TEST_*) act only in a process whose environment has the test
# suite's switch; without it no --env, matrix or spec may name one, whatever it allows.
TEST_HOOK = "COMMBENCH_TEST_"
TEST_SWITCH = "COMMBENCH_TEST_HOOKS"
# The variables a spec's check set (accept names them here for the `commbench run` it starts, which cannot tell them
# from the rest of its environment): a launcher whose ranks start in an environment of their own (ssh) passes them
# on with the catalogue's, and every rank records what it saw of them.
NAMED_ENV = "COMMBENCH_ENV_NAMES"


def launch_names(environ):
    """The names in environ a launch sets for its ranks beyond the prefixes every launcher passes: the catalogue's
    and those NAMED_ENV lists."""
    named = {n for n in environ.get(NAMED_ENV, "").split(",") if NAME.fullmatch(n)}
    return {k for k in environ if k in CATALOGUE or k in named}


def hooks_on():
    return os.environ.get(TEST_SWITCH) == "1"


def validate(name, values, allow_unknown=False, allow_with="--allow-unknown"):
    """Raise UserError unless name is known (or allowed: allow_with says how) and every value fits it. Always:
    a name is letters, digits and _ (not starting with a digit) and no value holds a NUL byte (an environment
    cannot carry either)."""
    if not NAME.fullmatch(name):
        raise UserError(f"{shown(repr(name), 60)} is not a variable name (letters, digits, _)")
    if any("\0" in v for v in values):
        raise UserError(f"{name}: a value holds a NUL byte, which no environment carries")
    if name.startswith(TEST_HOOK):
        if hooks_on():
            return
        raise UserError(f"{name} is a test hook of commbench's own tests: refused (only the test suite turns them on)")
    var = CATALOGUE.get(name)
    if var is None:
        if allow_unknown:
            return
        close = difflib.get_close_matches(name, CATALOGUE, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else f"; see `commbench env`, or pass {allow_with}"
        raise UserError(f"unknown variable {name}{hint}")
    if allow_unknown:
        return
    for value in values:
        why = var.check(value)
        if why:
            raise UserError(f"{name}={shown(value, 60)}: {why}")
