"""Overlap patterns: communication beside compute, scheduled as training steps schedule it.

  ddp           the payload in --buckets B all_reduce buckets; step i runs kernel i, then launches bucket i's
                all_reduce async and goes on with kernel i+1 while it is on the wire; all waited at the end
                (DDP's gradient buckets beside the backward GEMMs; B = 1 is one all_reduce after all compute).
  pipelined     the payload in chunks (--chunk-size, as `chunked` cuts it); chunk i+1's all_gather is in flight
                while the kernel of chunk i runs, up to --inflight gathers outstanding; the first gather is the
                pipeline's fill, the last kernel its drain (Megatron's collective matmul / TP overlap).
  pipelined-rs  the reduce-scatter side: kernel i produces chunk i, whose reduce_scatter runs while kernel i+1
                computes, up to --inflight outstanding (Megatron's GEMM + reduce-scatter overlap).

Every pattern is one Case with four phases, measured in one launch and interleaved per repeat:
`comm` (its communication alone, issued as in the overlapped run), `compute` (its kernels alone),
`sequential` (the kernels, then the communication issued exactly as in `comm`: nothing overlaps, so it is compute +
comm by construction and any excess is what one part leaves behind for the other) and `total` (overlapped: what
the step pays). The total record carries the figures (comm_us, compute_us, sequential_us,
overlapped_us, exposed_comm_us, overlap_efficiency, compute_slowdown, comm_slowdown) and the model's
prediction of the overlapped run (a simulation of the schedule: one link, one compute stream).
Communication is checked exactly as the collectives are; the kernels as commbench/cases/compute.py says.

Here: the Case rows and their options, and the rank-side run (each pattern's communication on this rank, the
kernel's sizing, the four phases). overlap_schedule.py orders the steps, overlap_model.py replays the schedule
for the model, overlap_figures.py figures the total record.
"""
import os
import statistics
import time
from dataclasses import replace

from benchcore.errors import UserError
from benchcore.lazy import lazy
from commbench.cases import compute
from commbench.cases.case import TOTAL, Case, Timed
from commbench.cases.chunked import INFLIGHT, chunk_layout, inflight_groups
from commbench.cases.collectives import DTYPES
from commbench.cases.overlap_figures import figures
from commbench.cases.overlap_model import steps_of
from commbench.cases.overlap_schedule import AHEAD, PHASES, run_ahead, run_behind, trace
from commbench.cases.payload import Payload, factor, padded, payload_size
from commbench.model import alphabeta as model
from commbench.model.alphabeta import Phase

torch = lazy("torch", globals())

WHOLE = "whole"   # a pipelined record's chunk label where its chunk holds the run's every payload (one operation)
CALIBRATION_RUNS = 3   # runs of the communication alone, then of the compute alone, timed to size the compute
CALIBRATION_CHECKS = 2   # rescales of the kernel once the pattern's own runs are timed beside the communication


class Steps:
    """The communication of one pattern on this rank: one function per step, its buffers' refill and poison,
    its result and check."""

    def __init__(self, comms, refill, poison, result, wrong):
        self.comms, self.refill, self.poison, self.result, self.wrong = comms, refill, poison, result, wrong


def _buckets(ctx, cfg, count, dtype, p, groups):
    """ddp: B contiguous all_reduce buckets of the payload, in place; rank r owns the r-th n-th of it."""
    buf = p.empty(p.count)
    own = [(p.rank * p.piece, (p.rank + 1) * p.piece)]
    edges = [round(i * p.count / cfg["buckets"]) for i in range(cfg["buckets"] + 1)]
    comms = [lambda a, lo=lo, hi=hi: ctx.comm.all_reduce(buf[lo:hi], "sum", async_op=a)
             for lo, hi in zip(edges, edges[1:])]
    return Steps(comms, lambda: p.fill_owned(buf, own), lambda: None, lambda: buf, lambda: p.wrong(buf))


def _gathers(ctx, cfg, count, dtype, p, groups):
    """pipelined: the chunks of `chunked` (in place), each all_gathered on the in-flight slot's group."""
    elt = DTYPES[cfg["dtype"]].bytes
    chunks = chunk_layout(p.count, p.n, elt, cfg["chunk_bytes"], 0)
    buf = p.empty(chunks[-1][0] + chunks[-1][1])
    own = [(s + p.rank * (ln // p.n), s + (p.rank + 1) * (ln // p.n)) for s, ln in chunks]
    k = cfg["inflight"]
    comms = [lambda a, i=i, s=s, ln=ln, mine=mine: ctx.comm.all_gather(
        buf[s:s + ln], buf[mine[0]:mine[1]], group=groups[i % k], async_op=a)
        for i, ((s, ln), mine) in enumerate(zip(chunks, own))]
    return Steps(comms, lambda: p.fill_owned(buf, own), lambda: None, lambda: buf, lambda: p.wrong(buf))


def _scatters(ctx, cfg, count, dtype, p, groups):
    """pipelined-rs: chunk i of the payload reduce-scattered; every rank contributes (rank + 1) x T, so rank r's
    piece of each chunk holds n (n + 1) / 2 x T there."""
    elt = DTYPES[cfg["dtype"]].bytes
    chunks = chunk_layout(p.count, p.n, elt, cfg["chunk_bytes"], 0)
    inp = p.empty(chunks[-1][0] + chunks[-1][1])
    pieces = [ln // p.n for _, ln in chunks]
    out = p.empty(sum(pieces))
    at = [sum(pieces[:i]) for i in range(len(pieces))]
    k, scale = cfg["inflight"], p.n * (p.n + 1) // 2
    comms = [lambda a, i=i, s=s, ln=ln: ctx.comm.reduce_scatter(
        out[at[i]:at[i] + pieces[i]], inp[s:s + ln], "sum", group=groups[i % k], async_op=a)
        for i, (s, ln) in enumerate(chunks)]

    def refill():
        inp.zero_()
        p.write_truth(inp, 0, p.count)
        inp.mul_(p.rank + 1)

    def wrong():
        bad = 0
        for (s, ln), o, piece in zip(chunks, at, pieces):
            lo = s + p.rank * piece
            valid = max(0, min(piece, p.count - lo))
            got = out[o:o + valid]
            bad += int((got != p.truth(lo, valid, got) * scale).sum().item()) if valid else 0
            bad += int((out[o + valid:o + piece] != 0).sum().item())
        return bad
    return Steps(comms, refill, lambda: p.poison(out), lambda: out, wrong)


def _calibrated(ctx, cfg, steps, run, depth):
    """The kernel: --gemm as given, else sized so that compute alone takes compute_ratio x communication alone.
    compute.calibrate's probes give a first size; then the pattern's own runs are timed as its comm and compute
    phases time them (CALIBRATION_RUNS communication runs back to back, then as many compute runs, each kernel call
    timed as the phases time it; the slowest rank's median run of each), and the kernel rescaled to the ratio (up
    to CALIBRATION_CHECKS times, until within 10 %). Where the cap or the floor stops it, or the machine's load moves
    the phases apart, compute_ratio_measured says what it reached and the table marks it."""
    if cfg.get("gemm"):
        return compute.Kernel(ctx, cfg["compute_kernel"], *cfg["gemm"])
    kind, ratio, calls = cfg["compute_kernel"], cfg["compute_ratio"], len(steps.comms)

    def comm():   # seconds per communication run: the median of CALIBRATION_RUNS back to back, as the comm phase
        times = []
        for _ in range(CALIBRATION_RUNS):
            t0 = time.perf_counter()
            run(steps.comms, lambda: None, depth, lambda t0, t1: None)
            if ctx.device.type == "cuda":
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        return _slowest(ctx, statistics.median(times))
    run(steps.comms, lambda: None, depth, lambda t0, t1: None)   # warm-up: connections, buffers
    ctx.barrier()
    d = compute.calibrate(ctx, kind, ratio * comm(), calls)
    order, cap = (1 / 3 if kind == "gemm" else 1 / 2), compute.MAX_DIM[ctx.device.type]
    for check in range(CALIBRATION_CHECKS + 1):
        kernel = compute.Kernel(ctx, kind, d, d, d)
        if check == CALIBRATION_CHECKS:
            break
        kernel.call("calibrate")   # warm-up: the kernel's first call
        kernel.per_call("calibrate")
        ctx.barrier()
        comm_s, runs = comm(), []
        for _ in range(CALIBRATION_RUNS):   # as the compute phase runs them: back to back
            for _ in range(calls):
                kernel.call("calibrate")
            runs.append(kernel.per_call("calibrate") * calls)
        scale = (ratio * comm_s / _slowest(ctx, statistics.median(runs))) ** order
        rescaled = min(cap, max(compute.ALIGN, int(round(d * scale / compute.ALIGN)) * compute.ALIGN))
        if 0.9 < scale < 1.1 or rescaled == d:
            break
        d = rescaled
    return kernel


def _slowest(ctx, seconds):
    """The slowest rank's seconds (the same on every rank)."""
    return max(v for v, in ctx.comm.gather_floats([seconds]))


def _pattern(make, ahead, collective):
    """build(ctx, cfg, count, dtype, shared) of a pattern whose communication `make` lays out."""
    def build(ctx, cfg, count, dtype, groups):
        if ctx.device.type == "cpu":
            torch.set_num_threads(cfg["compute_threads"])
        p = Payload(ctx, cfg, count, dtype)
        steps = make(ctx, cfg, count, dtype, p, groups)
        depth = cfg.get("inflight") or len(steps.comms)
        run = run_ahead if ahead else run_behind
        kernel = _calibrated(ctx, cfg, steps, run, depth)
        spans = {}

        def span(phase):
            def add(t0, t1):
                total = spans.setdefault(phase, [0.0, 0])
                total[0] += t1 - t0
                total[1] += 1
            return add

        def sequential(a):   # the kernels, then the communication as the comm phase issues it: nothing overlaps
            for _ in steps.comms:
                kernel.call("sequential")
            run(steps.comms, lambda: None, depth, lambda t0, t1: None)

        def compute_alone(a):
            for _ in steps.comms:
                kernel.call("compute")
        phases = {"comm": lambda a: run(steps.comms, lambda: None, depth, span("comm")),
                  "compute": compute_alone, "sequential": sequential,
                  TOTAL: lambda a: run(steps.comms, lambda: kernel.call(TOTAL), depth, span(TOTAL))}
        per_call, per_span = {}, {}

        def fields(phase):   # read after each phase is timed: the kernel's and the communication's own times
            per_call[phase] = kernel.per_call(phase)
            seconds, runs = spans.pop(phase, [0.0, 0])
            per_span[phase] = seconds / runs if runs else None
            return {**kernel.fields(), "steps": len(steps.comms),
                    "gemm_us": per_call[phase] * 1e6 if per_call[phase] else None}

        def refill():
            steps.refill()
            kernel.refill()

        def poison():
            steps.poison()
            kernel.poison()

        def check():
            wrong_kernel = kernel.wrong()
            return steps.wrong() + wrong_kernel, {"compute_wrong": wrong_kernel, "compute_check": kernel.check_name()}

        def summary(records):
            timeline = ctx.comm.gather_object(trace(ctx, steps, kernel, run, depth))
            return {**figures(ctx, cfg, kernel, records, per_call, per_span, ahead, depth, len(steps.comms)),
                    "timeline": timeline if all(timeline) else None, **_host()}
        factors = {"comm": factor(collective, p.n), "compute": None, "sequential": None, TOTAL: None}
        return Timed(phases, factors, refill, poison, steps.result, check, fields, blocking=True, summary=summary)
    return build


def _host():
    """What shares this rank's cores: the CPUs it may run on and its OS threads (compute, the backend's, torch's)."""
    try:
        threads = len(os.listdir("/proc/self/task"))
    except OSError:
        threads = None
    return {"host_cpus": len(os.sched_getaffinity(0)), "rank_threads": threads}


def _configs(name):
    def configs(opts, dtype):
        if not opts.compute_ratios and not opts.gemm:
            raise UserError("give --compute-ratio R (compute alone about R x communication alone) or --gemm M,N,K")
        base = {"case": name, "in_place": True, "compute_kernel": opts.compute_kernel,
                "compute_threads": opts.compute_threads}
        sizing = [{"gemm": list(opts.gemm), "compute_ratio": None}] if opts.gemm else \
            [{"gemm": None, "compute_ratio": r} for r in opts.compute_ratios]
        if name == "ddp":
            return [{**base, **s, "buckets": b} for s in sizing for b in opts.buckets]
        elt = DTYPES[dtype].bytes
        for chunk in opts.chunk_sizes:
            if chunk % elt:
                raise UserError(f"--chunk-size {chunk} B is not a multiple of the {elt} B {dtype} element")
        return [{**base, **s, "chunk_bytes": c, "inflight": k}
                for s in sizing for c in opts.chunk_sizes for k in opts.inflights]
    return configs


def _describe(cfg):
    if "buckets" in cfg:
        parts = [f"B={cfg['buckets']}"]
    else:   # a record whose chunk holds the run's largest payload (one operation at every size) says so
        whole = cfg.get("max_bytes") and cfg["chunk_bytes"] >= cfg["max_bytes"]
        parts = [WHOLE if whole else f"{cfg['chunk_bytes'] >> 10}K x{cfg['inflight']}"]
    parts.append("gemm " + "x".join(map(str, cfg["gemm"])) if cfg.get("gemm") else f"R={cfg['compute_ratio']:g}")
    return " ".join(parts)


def _footprint(extra):
    """Bytes a rank holds: the communication's buffers plus the kernel (--gemm's, else the calibration's cap)."""
    def footprint(cfg, count, n, elt):
        dims = cfg.get("gemm") or [compute.MAX_DIM["cpu"]] * 3
        return extra(cfg, count, n) * elt + compute.footprint(cfg["compute_kernel"], *dims)
    return footprint


def _model(collective):
    """The communication phase's alpha-beta terms: its steps' collectives of their share of N."""
    def terms(cfg, size, shape, backend):
        steps = steps_of(cfg, size, shape.n)
        one = getattr(model, collective)(size / steps, shape, backend)
        return {"comm": Phase(factor(collective, shape.n),
                              [replace(t, steps=t.steps * steps, rank_bytes=t.rank_bytes * steps) for t in one],
                              nccl=collective, calls=steps)}
    return terms


def _check_size(size, elt, n):
    payload_size(size, elt, n)


# The record fields every pattern adds: four phase records per measurement (comm, compute, sequential, total =
# overlapped); the total record carries the figures drawn from all four. ddp adds buckets, the pipelined patterns
# inflight (chunk_bytes is every commbench record's).
FIELDS = dict(
    pattern="overlap: ddp, pipelined or pipelined-rs (phase says which of the four timings the record is)",
    compute_kernel="overlap: gemm (torch.matmul) or elementwise",
    compute_threads="overlap: torch intra-op threads each rank's compute had on CPU (the backend keeps its own)",
    compute_ratio="overlap: compute alone / communication alone the kernel was calibrated to (null with --gemm)",
    gemm="overlap: M, N, K as given by --gemm (null when calibrated)",
    steps="overlap: kernel calls (and communication operations) per run: buckets or chunks",
    gemm_m="overlap: the kernel's M", gemm_n="overlap: the kernel's N (null for elementwise)",
    gemm_k="overlap: the kernel's K", compute_dtype="overlap: the kernel's type (bfloat16 on GPU, float32 on CPU)",
    gemm_us="overlap: mean time of one kernel call in this phase on this rank (rank 0's record: rank 0)",
    compute_wrong="overlap: wrong kernel output elements over every rank (included in wrong)",
    compute_check="overlap: exact, or the tolerance the kernel's output type forces",
    comm_us="overlap: communication alone (the comm phase's time_us)",
    compute_us="overlap: compute alone (the compute phase's time_us)",
    sequential_us="overlap: the kernels, then the communication as the comm phase issues it: nothing overlapped",
    overlapped_us="overlap: the pattern's schedule (the total phase's time_us)",
    exposed_comm_us="overlap: overlapped - compute alone: the time communication adds to the step",
    overlap_efficiency="overlap: (comm + compute - overlapped) / min(comm, compute): 1 when the shorter is hidden, "
                       "below 0 when together costs more than in turn; never above 1 (an overlapped time under its "
                       "longer part alone is taken at that floor within 5 %, null beyond; overlap_note says which)",
    overlap_note="overlap: why efficiency and exposed_comm_us are taken at the floor max(comm, compute) or null",
    sequential_efficiency="overlap: the same for the sequential run (the negative control: about 0)",
    compute_slowdown="overlap: a kernel's mean time inside the overlapped run / alone, averaged over ranks",
    comm_slowdown="overlap: first launch to last completion of the communication inside the overlapped run / alone; "
                  "completion is seen when waited on, so an upper bound where compute is the longer part",
    compute_tflops="overlap: the kernel's rate alone (2MNK per GEMM call) in TFLOP/s",
    compute_ratio_measured="overlap: compute alone / communication alone as measured",
    compute_ratio_note="overlap: set where compute_ratio_measured is off the asked compute_ratio by more than "
                       "RATIO_BAND (overlap_figures): the figures are for the ratio measured (kept, and marked *)",
    host_cpus="overlap: CPUs rank 0 may run on (where ranks share a host, their compute and communication share them)",
    rank_threads="overlap: OS threads of rank 0's process (its compute thread(s), the backend's, torch's)",
    predicted_overlapped_us="overlap: the model's overlapped time: the schedule replayed with the comm phase's "
                            "predicted time per step and the kernel's measured time alone",
    predicted_exposed_comm_us="overlap: predicted_overlapped_us - compute alone",
    predicted_overlap_efficiency="overlap: the model's efficiency",
    timeline="overlap: one traced overlapped iteration per rank: [{what: comm|kernel, step, start_us, end_us}] on "
             "the rank's host clock from the iteration's start (a comm's end is when it was seen complete); null on "
             "GPU")
OVERLAP_CASES = {c.name: c for c in [
    Case("ddp", "overlap", "all_reduce", PHASES, _pattern(_buckets, AHEAD["ddp"], "all_reduce"), _configs("ddp"),
         describe=_describe, check_size=_check_size, sums=True,
         footprint=_footprint(lambda cfg, count, n: count), steps=steps_of, model=_model("all_reduce"),
         fields={**FIELDS, "buckets": "overlap: ddp's all_reduce buckets"}),
    Case("pipelined", "overlap", "all_gather", PHASES, _pattern(_gathers, AHEAD["pipelined"], "all_gather"),
         _configs("pipelined"),
         describe=_describe, check_size=_check_size, setup=inflight_groups,
         footprint=_footprint(lambda cfg, count, n: padded(count, n)), steps=steps_of, model=_model("all_gather"),
         fields={**FIELDS, **INFLIGHT}),
    Case("pipelined-rs", "overlap", "reduce_scatter", PHASES, _pattern(_scatters, AHEAD["pipelined-rs"], "reduce_scatter"),
         _configs("pipelined-rs"), describe=_describe, check_size=_check_size, setup=inflight_groups, sums=True,
         footprint=_footprint(lambda cfg, count, n: padded(count, n) * 2), steps=steps_of,
         model=_model("reduce_scatter"),
         fields={**FIELDS, **INFLIGHT}),
]}
