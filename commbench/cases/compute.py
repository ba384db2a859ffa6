"""Compute beside communication: the kernel an overlap pattern runs, its check, and its calibration.

A GEMM (torch.matmul, M x K @ K x N into a preallocated output; bf16 on GPU, float32 on CPU) or an
elementwise kernel (out = a + a over M x K elements, memory-bound), sized explicitly (--gemm M,N,K) or
calibrated at start-up so that one pattern's compute alone takes about R x its communication alone.

Check: the operands hold small integers, A[i,k] = (i + 2k) % 3 and W[k,j] = j % 2 + 1, so
C[i,j] = rowsum(A)[i] x (j % 2 + 1), computed without a GEMM. In float32 that is exact (every partial sum
is an integer below 2^24 while K < 2^22); a bf16 output rounds the sum to 8 significant bits, so on GPU the
check allows a relative error of 2^-8 per element (the `compute_check` field says which applies).

Time: each call is timed on its own (perf_counter on CPU, where a GEMM runs synchronously on the calling
thread; a CUDA event pair on the current stream on GPU), summed per phase, so the time one GEMM takes inside
the overlapped run can be set against the time it takes alone (compute_slowdown).
"""
import time

from benchcore.errors import UserError, shown
from benchcore.lazy import lazy

torch = lazy("torch", globals())

KERNELS = ("gemm", "elementwise")
PROBE_BATCHES, PROBE_SECONDS = 3, 0.01   # a calibration probe: the best of 3 batches of 10 ms of calls
PROBE_DIM = 128                # first probe M = N = K
MAX_DIM = {"cpu": 2048, "cuda": 16384}   # calibration never goes past this (memory, and seconds per GEMM)
ALIGN = 16                     # calibrated dimensions are multiples of this (tensor-core friendly)


def compute_dtype(device):
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def flops(kernel, m, n, k):
    """Floating-point operations of one call: 2 M N K for a GEMM, M K for the elementwise add."""
    return 2 * m * n * k if kernel == "gemm" else m * k


def footprint(kernel, m, n, k, elt=4):
    """Bytes of one kernel's operands and output."""
    return (m * k + k * n + m * n if kernel == "gemm" else 2 * m * k) * elt


def parse_gemm(text):
    """'M,N,K' -> (M, N, K) positive whole numbers; None for None."""
    if text is None:
        return None
    parts = [p.strip() for p in str(text).split(",")]
    if len(parts) != 3 or not all(p.isascii() and p.isdigit() and len(p) <= 9 and int(p) > 0 for p in parts):
        raise UserError(f"--gemm takes M,N,K (three positive whole numbers), got {shown(repr(text), 60)}")
    dims = tuple(int(p) for p in parts)
    if max(dims) > 1 << 20:
        raise UserError(f"--gemm {text}: a dimension above 1048576 is not a GEMM one rank can hold")
    return dims


class Kernel:
    """One rank's compute operands for a pattern: `calls` kernel calls per run, each timed."""

    def __init__(self, ctx, kind, m, n, k):
        self.ctx, self.kind, self.m, self.n, self.k = ctx, kind, m, n, k
        self.dtype = compute_dtype(ctx.device)
        dev = ctx.device
        self.a = torch.empty(m, k, dtype=self.dtype, device=dev)
        self.w = torch.empty(k, n, dtype=self.dtype, device=dev) if kind == "gemm" else None
        self.out = torch.empty(m, n if kind == "gemm" else k, dtype=self.dtype, device=dev)
        self.spent = {}     # phase -> [seconds, calls] since the last read
        self._events = {}   # phase -> [(start, end)] CUDA event pairs not yet read
        self.refill()

    def refill(self):
        i = torch.arange(self.m, device=self.ctx.device).view(-1, 1)
        kk = torch.arange(self.k, device=self.ctx.device).view(1, -1)
        self.a.copy_((i + 2 * kk) % 3)
        if self.w is not None:
            self.w.copy_((torch.arange(self.n, device=self.ctx.device) % 2 + 1).expand(self.k, self.n))

    def poison(self):
        self.out.fill_(-1)

    def call(self, phase):
        """One kernel call, its time added to phase's."""
        cuda = self.ctx.device.type == "cuda"
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            t0 = time.perf_counter()
        if self.kind == "gemm":
            torch.matmul(self.a, self.w, out=self.out)
        else:
            torch.add(self.a, self.a, out=self.out)
        if cuda:
            end.record()
            self._events.setdefault(phase, []).append((start, end))
        else:
            spent = self.spent.setdefault(phase, [0.0, 0])
            spent[0] += time.perf_counter() - t0
            spent[1] += 1

    def per_call(self, phase):
        """Mean seconds per call in phase since the last read (then forgotten); None if none ran."""
        pairs = self._events.pop(phase, [])
        if pairs:
            pairs[-1][1].synchronize()
            spent = self.spent.setdefault(phase, [0.0, 0])
            spent[0] += sum(a.elapsed_time(b) for a, b in pairs) / 1e3
            spent[1] += len(pairs)
        seconds, calls = self.spent.pop(phase, [0.0, 0])
        return seconds / calls if calls else None

    def wrong(self):
        """Elements of the output that differ from the closed-form result (bf16: beyond 2^-8 relative)."""
        rows = self.a.double().sum(dim=1, keepdim=True)
        want = rows * (torch.arange(self.n, device=self.ctx.device) % 2 + 1) if self.kind == "gemm" else \
            2 * self.a.double()
        got = self.out.double()
        if self.dtype == torch.float32:
            return int((got != want).sum().item())
        return int(((got - want).abs() > want.abs() * 2.0 ** -8).sum().item())

    def check_name(self):
        return "exact" if self.dtype == torch.float32 else "relative 2^-8 (bf16 output)"

    def fields(self):
        return {"gemm_m": self.m, "gemm_n": self.n if self.kind == "gemm" else None,
                "gemm_k": self.k, "compute_dtype": str(self.dtype).replace("torch.", "")}


def calibrate(ctx, kind, target_s, calls):
    """The square size d (M = N = K = d, multiple of ALIGN) at which `calls` kernel calls take about target_s on
    this rank, agreed over every rank (the median of their answers); capped at MAX_DIM."""
    cap = MAX_DIM[ctx.device.type]
    per_call = target_s / calls
    d = PROBE_DIM
    for _ in range(4):   # probe, rescale by the kernel's order (d^3 GEMM, d^2 elementwise), probe again
        took = _probe(ctx, kind, d)
        scale = (per_call / took) ** (1 / 3 if kind == "gemm" else 1 / 2) if took else 2
        d = min(cap, max(ALIGN, int(round(d * scale / ALIGN)) * ALIGN))
        if 0.9 < scale < 1.1 or d == cap:
            break
    every = sorted(v for v, in ctx.comm.gather_floats([float(d)]))
    return int(every[len(every) // 2])


def _probe(ctx, kind, d):
    """Seconds one call of a d x d x d kernel takes here: the best of a few batches after a warm-up call."""
    probe = Kernel(ctx, kind, d, d, d)
    probe.call("probe")   # warm-up, not counted
    probe.per_call("probe")
    best = None
    for _ in range(PROBE_BATCHES):
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < PROBE_SECONDS:
            probe.call("probe")
        took = probe.per_call("probe")
        best = took if best is None else min(best, took)
    return best
