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
`sequential` (each step's kernel and communication in turn, each waited: nothing overlaps) and `total`
(overlapped: what the step pays). The total record carries the figures (comm_us, compute_us, sequential_us,
overlapped_us, exposed_comm_us, overlap_efficiency, compute_slowdown, comm_slowdown) and the model's
prediction of the overlapped run (a simulation of the schedule: one link, one compute stream).
Communication is checked exactly as the collectives are; the kernels as commbench/cases/compute.py says.
"""
import collections
import time
from dataclasses import replace

from benchcore.errors import UserError
from benchcore.lazy import lazy
from commbench.cases import compute
from commbench.cases.case import TOTAL, Case, Timed
from commbench.cases.chunked import chunk_layout, inflight_groups
from commbench.cases.collectives import DTYPES
from commbench.cases.payload import Payload, factor, padded, payload_size
from commbench.model import alphabeta as model
from commbench.model.alphabeta import Phase, predict

torch = lazy("torch", globals())

PHASES = ("comm", "compute", "sequential", TOTAL)
TRACE_STEPS = 64       # an iteration of at most this many steps is traced for the timeline (per rank, host clock)
FLOOR_NOISE = 0.05     # an overlapped time at most this far under its longer part alone is noise (see hidden)
CALIBRATION_RUNS = 3   # communication-alone runs timed to size the compute (after one warm-up run)


def run_ahead(comms, call, depth, span):
    """Communication first: up to `depth` operations in flight, the kernel of step i after operation i
    completed (pipelined). span([start, end]) gets the communication's first launch and last completion."""
    t0 = time.perf_counter()
    pending = collections.deque(comms[j](True) for j in range(min(depth, len(comms))))
    for i in range(len(comms)):
        pending.popleft().wait()
        if i == len(comms) - 1:
            span(t0, time.perf_counter())
        if i + depth < len(comms):
            pending.append(comms[i + depth](True))
        call()


def run_behind(comms, call, depth, span):
    """Compute first: kernel i, then operation i launched, at most `depth` outstanding (the oldest waited before
    another starts); every operation waited at the end (ddp, pipelined-rs)."""
    pending, t0 = collections.deque(), None
    for comm in comms:
        call()
        if len(pending) >= depth:
            pending.popleft().wait()
        t0 = t0 or time.perf_counter()
        pending.append(comm(True))
    for work in pending:
        work.wait()
    span(t0, time.perf_counter())


def simulate(ahead, comm_s, compute_s, depth):
    """Seconds the overlapped schedule takes when operation i takes comm_s[i] on the one link (operations run in
    launch order, one at a time) and kernel i takes compute_s[i] on the one compute stream: the schedule of
    run_ahead (ahead) or run_behind, replayed on those two resources."""
    k, link, clock, done = len(comm_s), 0.0, 0.0, []

    def launch(j, at):
        nonlocal link
        link = max(link, at) + comm_s[j]
        done.append(link)
    if ahead:
        for j in range(min(depth, k)):
            launch(j, 0.0)
        for i in range(k):
            clock = max(clock, done[i])
            if i + depth < k:
                launch(i + depth, clock)
            clock += compute_s[i]
        return clock
    for i in range(k):
        clock += compute_s[i]
        if i >= depth:
            clock = max(clock, done[i - depth])
        launch(i, clock)
    return max(clock, done[-1])


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
    """The kernel: --gemm as given, else sized so that compute alone takes compute_ratio x communication alone
    (timed here: CALIBRATION_RUNS runs after one, the slowest rank's mean)."""
    if cfg.get("gemm"):
        return compute.Kernel(ctx, cfg["compute_kernel"], *cfg["gemm"])
    ignore = lambda t0, t1: None  # noqa: E731
    run(steps.comms, lambda: None, depth, ignore)
    ctx.barrier()
    t0 = time.perf_counter()
    for _ in range(CALIBRATION_RUNS):
        run(steps.comms, lambda: None, depth, ignore)
    mine = (time.perf_counter() - t0) / CALIBRATION_RUNS
    comm_s = max(t for t, in ctx.comm.gather_floats([mine]))
    d = compute.calibrate(ctx, cfg["compute_kernel"], cfg["compute_ratio"] * comm_s, len(steps.comms))
    return compute.Kernel(ctx, cfg["compute_kernel"], d, d, d)


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

        def sequential(a):
            for comm in steps.comms:
                if not ahead:
                    kernel.call("sequential")
                comm(False)
                if ahead:
                    kernel.call("sequential")

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
                    "timeline": timeline if all(timeline) else None}
        factors = {"comm": factor(collective, p.n), "compute": None, "sequential": None, TOTAL: None}
        return Timed(phases, factors, refill, poison, steps.result, check, fields, blocking=True, summary=summary)
    return build


class _Work:
    """A work whose wait() notes when the communication was seen complete."""

    def __init__(self, work, note):
        self.work, self.note = work, note

    def wait(self):
        self.work.wait()
        self.note()

    def is_completed(self):
        return self.work.is_completed()


def trace(ctx, steps, kernel, run, depth):
    """One overlapped iteration with every operation's launch and completion (as waited on) and every kernel's
    start and end, in us from the iteration's start, on this rank's host clock: [{what, step, start_us, end_us}].
    None on GPU (the host does not see when kernels run there) and past TRACE_STEPS steps."""
    if ctx.device.type != "cpu" or len(steps.comms) > TRACE_STEPS:
        return None
    events, t0 = [], time.perf_counter()
    now = lambda: (time.perf_counter() - t0) * 1e6  # noqa: E731

    def comm(i):
        def launch(a):
            event = {"what": "comm", "step": i, "start_us": now(), "end_us": None}
            events.append(event)
            return _Work(steps.comms[i](a), lambda: event.update(end_us=now()))
        return launch
    calls = iter(range(len(steps.comms)))

    def call():
        event = {"what": "kernel", "step": next(calls), "start_us": now()}
        kernel.call("trace")
        events.append({**event, "end_us": now()})
    ctx.barrier()
    t0 = time.perf_counter()
    run([comm(i) for i in range(len(steps.comms))], call, depth, lambda a, b: None)
    kernel.per_call("trace")
    return events


def hidden(comm, comp, over):
    """{exposed_comm_us, overlap_efficiency[, overlap_note]} of an overlapped time against its parts alone. It
    cannot beat its longer part alone (its floor): measured under it, that part ran slower alone (noise between
    phases); within FLOOR_NOISE the figures are taken at the floor and the note says so, beyond it they are n/a."""
    floor, under = max(comm, comp), 1 - over / max(comm, comp)
    if under <= 0:
        return {"exposed_comm_us": over - comp, "overlap_efficiency": (comm + comp - over) / min(comm, comp)}
    note = f"overlapped {100 * under:.1f} % under its {'communication' if comm >= comp else 'compute'} alone"
    if under > FLOOR_NOISE:
        return {"exposed_comm_us": None, "overlap_efficiency": None,
                "overlap_note": f"{note}: a phase was disturbed, beyond {100 * FLOOR_NOISE:.0f} % noise; not figured"}
    return {"exposed_comm_us": floor - comp, "overlap_efficiency": 1.0,
            "overlap_note": f"{note} (noise between phases): taken at that floor, fully hidden"}


def figures(ctx, cfg, kernel, records, per_call, per_span, ahead, depth, steps):
    """The overlap figures of one measured set (records by phase), rank-averaged where measured per rank."""
    comm, comp, seq, over = (records[p]["time_us"] for p in PHASES)
    mean = lambda v: None if v is None else sum(x for x, in ctx.comm.gather_floats([v])) / ctx.world_size  # noqa
    alone, inside = mean(per_call.get("compute")), mean(per_call.get(TOTAL))
    span_alone, span_inside = mean(per_span.get("comm")), mean(per_span.get(TOTAL))
    out = {"comm_us": comm, "compute_us": comp, "sequential_us": seq, "overlapped_us": over, **hidden(comm, comp, over),
           "sequential_efficiency": (comm + comp - seq) / min(comm, comp),
           "compute_slowdown": inside / alone if alone and inside else None,
           "comm_slowdown": span_inside / span_alone if span_alone and span_inside else None,
           "compute_tflops": compute.flops(kernel.kind, kernel.m, kernel.n, kernel.k) / alone / 1e12 if alone else None,
           "compute_ratio_measured": comp / comm}
    predicted_comm = records["comm"].get("predicted_time_us")
    if predicted_comm and comp:   # the link's predicted time per step; the kernel's measured time alone per step
        pred = simulate(ahead, [predicted_comm / steps] * steps, [comp / steps] * steps, depth)
        out.update(predicted_overlapped_us=pred, predicted_exposed_comm_us=pred - comp,
                   predicted_overlap_efficiency=(predicted_comm + comp - pred) / min(predicted_comm, comp))
    return out


def steps_of(cfg, size, n):
    """Communication operations (and kernel calls) of a pattern config at size bytes on n ranks."""
    if cfg.get("buckets"):
        return cfg["buckets"]
    elt = DTYPES[cfg["dtype"]].bytes
    return len(chunk_layout(size // elt, n, elt, cfg["chunk_bytes"], 0))


def predicted(case, cfg, size, topo, world_size, nodes, backend, ratio):
    """{comm_us, compute_us, overlapped_us, exposed_comm_us, overlap_efficiency} the model gives pattern config
    cfg at size: the communication from its alpha-beta terms on the topology, compute = ratio x that, and the
    pattern's schedule replayed over equal steps."""
    pred = predict(case, cfg, size, topo, world_size, nodes, backend)["comm"]
    if pred.reason:      # no ceiling on a tier it crosses: nothing to predict
        return {"comm_us": None, "link_peak_reason": pred.reason}
    comm = pred.time_us
    steps, comp = steps_of(cfg, size, world_size), ratio * comm
    over = simulate(AHEAD[case.name], [comm / steps] * steps, [comp / steps] * steps, cfg.get("inflight") or steps)
    return {"comm_us": comm, "compute_us": comp, "overlapped_us": over, "exposed_comm_us": over - comp,
            "overlap_efficiency": (comm + comp - over) / min(comm, comp) if comm and comp else None}


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
    parts = [f"B={cfg['buckets']}" if "buckets" in cfg else f"{cfg['chunk_bytes'] >> 10}K x{cfg['inflight']}"]
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


AHEAD = {"ddp": False, "pipelined": True, "pipelined-rs": False}   # communication before its kernel, or after
OVERLAP_CASES = {c.name: c for c in [
    Case("ddp", "overlap", "all_reduce", PHASES, _pattern(_buckets, AHEAD["ddp"], "all_reduce"), _configs("ddp"),
         describe=_describe, check_size=_check_size, sums=True,
         footprint=_footprint(lambda c, k, n: k), model=_model("all_reduce")),
    Case("pipelined", "overlap", "all_gather", PHASES, _pattern(_gathers, AHEAD["pipelined"], "all_gather"),
         _configs("pipelined"),
         describe=_describe, check_size=_check_size, setup=inflight_groups,
         footprint=_footprint(lambda c, k, n: padded(k, n)), model=_model("all_gather")),
    Case("pipelined-rs", "overlap", "reduce_scatter", PHASES, _pattern(_scatters, AHEAD["pipelined-rs"], "reduce_scatter"),
         _configs("pipelined-rs"), describe=_describe, check_size=_check_size, setup=inflight_groups, sums=True,
         footprint=_footprint(lambda c, k, n: padded(k, n) * 2), model=_model("reduce_scatter")),
]}
