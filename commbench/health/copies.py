"""Copy-engine bandwidth as nvbandwidth's CE cases measure it (NVIDIA/nvbandwidth@66746a3, testcases_ce.cpp):
host-to-device and device-to-host per GPU from pinned host memory, and device-to-device per GPU pair, each a
cudaMemcpyAsync of BUFFER bytes repeated LOOPS times, timed with CUDA events, the median of SAMPLES. torch issues a
peer copy on the source GPU's stream, which is nvbandwidth's write case (device_to_device_memcpy_write_ce: the copy
launched in the source's context, pushed to the peer); its read case (launched in the destination's context) has no
torch equivalent and is not measured. A GPU or pair below SLOW x the topology's published value (copy_engine:, with
its source), or x the median of its kind where none is published, is flagged. torch is imported only here."""
import statistics

BUFFER = 512 << 20      # nvbandwidth's default buffer (-b 512)
LOOPS, SAMPLES = 4, 3
SLOW = 0.9


def unavailable():
    """Why there is nothing to measure here, or None."""
    try:
        import torch
    except ImportError:
        return "n/a: torch is not installed"
    if not torch.cuda.is_available():
        return "n/a: CUDA is not available to torch"
    return None


def _timed(torch, device, copy, nbytes):
    """GB/s of copy() issued LOOPS times on device's current stream: the median of SAMPLES."""
    rates = []
    with torch.cuda.device(device):
        copy()                                   # warm-up
        for _ in range(SAMPLES):
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(LOOPS):
                copy()
            end.record()
            end.synchronize()
            rates.append(nbytes * LOOPS / (start.elapsed_time(end) / 1e3) / 1e9)
    return statistics.median(rates)


def measure(buffer=BUFFER):
    """{"h2d": [GB/s per GPU], "d2h": [...], "d2d": [[GB/s row -> column, None on the diagonal]]}."""
    import torch
    n = torch.cuda.device_count()
    host = torch.empty(buffer, dtype=torch.uint8).pin_memory()
    bufs = [torch.empty(buffer, dtype=torch.uint8, device=f"cuda:{i}") for i in range(n)]
    out = {"h2d": [], "d2h": [], "d2d": [[None] * n for _ in range(n)]}
    for i in range(n):
        out["h2d"].append(_timed(torch, i, lambda: bufs[i].copy_(host, non_blocking=True), buffer))
        out["d2h"].append(_timed(torch, i, lambda: host.copy_(bufs[i], non_blocking=True), buffer))
    for i in range(n):
        for j in range(n):
            if i != j:
                out["d2d"][i][j] = _timed(torch, i, lambda: bufs[j].copy_(bufs[i], non_blocking=True), buffer)
    return out


def _reference(topo, kind):
    ref = dict(topo.copy_engine) if topo is not None else {}
    return ref.get(kind), ref.get("source")


def judge(result, topo):
    """(health lines, flagged pairs {(i, j)}): one line per GPU for H2D and D2H, one for the D2D matrix."""
    rows, flagged = [], set()
    for kind, key in (("H2D", "h2d_gbps"), ("D2H", "d2h_gbps")):
        ref, source = _reference(topo, key)
        values = result[kind.lower()]
        base = ref or statistics.median(values)
        for i, v in enumerate(values):
            rows.append({"item": f"{kind} GPU {i}", "value": f"{v:.1f} GB/s" + (f" of {ref:g} published" if ref else
                                                                                f" (median {base:.1f})"),
                         "verdict": "warn" if v < SLOW * base else "ok",
                         "threshold": f">= {SLOW} x {'published' if ref else 'the median'}",
                         "source": source or "no published value for this topology: the node's own median",
                         "read": "cudaMemcpyAsync from pinned memory (torch copy_), CUDA events"})
    ref, source = _reference(topo, "d2d_write_gbps")
    pairs = [(i, j, v) for i, row in enumerate(result["d2d"]) for j, v in enumerate(row) if v is not None]
    if pairs:
        base = ref or statistics.median(v for _, _, v in pairs)
        flagged = {(i, j) for i, j, v in pairs if v < SLOW * base}
        slow = ", ".join(f"{i}->{j} {v:.1f}" for i, j, v in pairs if (i, j) in flagged)
        values = [v for *_, v in pairs]
        rows.append({"item": f"D2D write, {len(pairs)} pairs",
                     "value": f"min {min(values):.1f}, median {statistics.median(values):.1f} GB/s" +
                              (f" of {ref:g} published" if ref else "") + (f"; slow: {slow}" if slow else ""),
                     "verdict": "warn" if flagged else "ok",
                     "threshold": f">= {SLOW} x {'published' if ref else 'the median'}",
                     "source": source or "no published value for this topology: the node's own median",
                     "read": "cudaMemcpyAsync peer copy issued on the source GPU (torch copy_), CUDA events"})
    return rows, flagged


def matrix(d2d, flagged):
    """The D2D matrix as table rows (row GPU -> column GPU, GB/s; a flagged pair marked '!')."""
    n = len(d2d)
    return [{"label": str(i), **{str(j): "-" if v is None else f"{v:.1f}{' !' if (i, j) in flagged else ''}"
                                 for j, v in enumerate(d2d[i])}} for i in range(n)]


def columns(n):
    return [("label", "GPU ->", None)] + [(str(j), str(j), None) for j in range(n)]
