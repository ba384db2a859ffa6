"""The catalogue of environment variables users sweep, with allowed values and meaning.

Sources: NCCL's environment-variable documentation (docs.nvidia.com/deeplearning/nccl,
"Environment Variables"), PyTorch's ProcessGroupNCCL and Gloo documentation.
"""
import difflib
from dataclasses import dataclass
from typing import Optional, Tuple

from benchcore.errors import UserError

LEVELS = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")


@dataclass(frozen=True)
class Var:
    name: str
    meaning: str
    choices: Optional[Tuple[str, ...]] = None      # allowed values (case-insensitive)
    int_range: Optional[Tuple[int, int]] = None    # or an integer in [lo, hi]
    # neither: free text (interface or device names)

    def check(self, value):
        """None when value is allowed, else why not."""
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


BOOL = ("0", "1")
CATALOGUE = {v.name: v for v in [
    Var("NCCL_ALGO", "Collective algorithm(s) NCCL may use.",
        ("Ring", "Tree", "CollnetDirect", "CollnetChain", "NVLS", "NVLSTree", "PAT")),
    Var("NCCL_PROTO", "Protocol(s): LL (low latency), LL128, Simple (bandwidth).", ("LL", "LL128", "Simple")),
    Var("NCCL_IB_DISABLE", "1 disables InfiniBand/RoCE; NCCL falls back to sockets.", BOOL),
    Var("NCCL_IB_GID_INDEX", "RoCE GID index (often 3 for RoCE v2).", int_range=(-1, 255)),
    Var("NCCL_IB_HCA", "Which HCAs/ports to use, e.g. mlx5_0:1,mlx5_1:1 or ^mlx5_2."),
    Var("NCCL_IB_QPS_PER_CONNECTION", "Queue pairs per connection (more can help adaptive routing).",
        int_range=(1, 128)),
    Var("NCCL_IB_TIMEOUT", "InfiniBand verbs timeout exponent (4.096 us x 2^value).", int_range=(1, 31)),
    Var("NCCL_IB_RETRY_CNT", "InfiniBand verbs retry count.", int_range=(0, 7)),
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
    Var("GLOO_SOCKET_IFNAME", "Interface Gloo binds, e.g. eth0 (commbench picks the one that routes to the peer)."),
    Var("COMMBENCH_TEST_EXIT_RANK", "Test only: this rank exits with status 17 right after start-up.",
        int_range=(0, 1 << 20)),
    Var("COMMBENCH_TEST_CORRUPT", "Test only: corrupt one element of this case's result on rank 0."),
    Var("COMMBENCH_TEST_SKIP", "Test only: the check run of these cases (comma list) does nothing (the check must catch it)."),
]}


def validate(name, values, allow_unknown=False):
    """Raise UserError unless name is known (or allowed) and every value fits it."""
    var = CATALOGUE.get(name)
    if var is None:
        if allow_unknown:
            return
        close = difflib.get_close_matches(name, CATALOGUE, n=1, cutoff=0.6)
        hint = f"; did you mean {close[0]}?" if close else "; see `commbench env`, or pass --allow-unknown"
        raise UserError(f"unknown variable {name}{hint}")
    if allow_unknown:
        return
    for value in values:
        why = var.check(value)
        if why:
            raise UserError(f"{name}={value}: {why}")
