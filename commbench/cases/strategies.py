"""Strategies that leave every rank holding the same N-byte tensor T, one table row each.

"The same payload" (N bytes, `size_bytes` in records): every strategy starts with each
rank owning disjoint slices of T (1/n of it) and ends with every rank holding all of T.

  ring        one all_reduce of N bytes: each rank contributes T with its own slices
              filled and zeros elsewhere, so the sum is exactly T (nccl-tests all_reduce
              size N, busbw factor 2(n-1)/n). Ring algorithm on NCCL (NCCL_ALGO=Ring).
  rs-ag       reduce_scatter of that N-byte tensor, then all_gather of the N/n pieces:
              the two halves of a ring all_reduce, timed apart (phase reduce_scatter,
              all_gather; factor (n-1)/n each) and together (phase total, 2(n-1)/n).
  plain       one all_gather of the whole payload (rank r owns the r-th n-th of T): the
              like-for-like baseline of chunked. size N, factor (n-1)/n.
  chunked     Megatron-style all_gather: N <= threshold goes in one all_gather (exactly
              what plain runs: verdicts treat the two as the same work); above it
              T is cut into chunks of n*floor(chunk/n/elt) elements, each all-gathered in
              place (rank r owns the r-th n-th of every chunk), with up to `inflight`
              chunk operations outstanding, each in-flight slot its own process group
              (its own NCCL stream). all_gather size N, factor (n-1)/n.
  compressed  all_gather of the owned slices cast to bf16, or fp8 e4m3 with a per-rank
              scale, cast back to float32; casts are inside the timed loop. Records the
              wire bytes and the numeric error against the exact T. size N, factor (n-1)/n.
  hierarchical  two levels, as NCCL, Horovod and Megatron do across NVLink islands:
              reduce_scatter inside each node, all_reduce of each shard across nodes among
              the ranks with the same local rank, all_gather inside each node. Phases are
              timed apart (each phase's busbw on its own group, counted against N: the
              inter-node all_reduce moves N/L) and together (total, 2(n-1)/n like ring).

Each strategy is a Case (commbench/case.py): one row in STRATEGY_CASES plus its functions here.

Payloads need not divide by n or by the chunk: the last piece is padded, the payload
is the first N bytes of the buffer, and the check covers exactly those.
"""
import collections

from benchcore.errors import UserError
from benchcore.lazy import lazy
from benchcore.units import format_size
from commbench import model
from commbench.case import TOTAL, Case, Timed
from commbench.collectives import COLLECTIVES, DTYPES, pieces, poison_value
from commbench.model import Phase

torch = lazy("torch", globals())

FILL_PERIOD = 251  # T[i] = i % 251 + 1 (fewer in types that hold fewer integers): a misplaced element shows
COMPRESS = {"bf16": "bfloat16", "fp8": "float8_e4m3fn"}   # wire type -> torch type name
FP8_MAX = 448.0


def ceil_div(a, b):
    return -(-a // b)


def factor(name, n):
    """nccl-tests' bus factor of collective name on n ranks."""
    return COLLECTIVES[name].bus_factor(n)


class Payload:
    """Buffers and ownership for one strategy at one size on this rank."""

    def __init__(self, ctx, cfg, count, dtype):
        self.ctx, self.count, self.dtype, self.type_name = ctx, count, dtype, cfg["dtype"]
        self.n, self.rank = ctx.world_size, ctx.rank
        self.piece = ceil_div(count, self.n)
        self.period = min(FILL_PERIOD, DTYPES[self.type_name].exact)

    def truth(self, start, length, like):
        """T[start:start+length], typed and placed like tensor `like`."""
        idx = torch.arange(start, start + length, device=like.device, dtype=torch.int64)
        return (idx % self.period + 1).to(like.dtype)

    def empty(self, k, dtype=None):
        return torch.empty(k, dtype=dtype or self.dtype, device=self.ctx.device)

    def fill_owned(self, buf, ranges):
        """Zero buf, then write T into the [start, stop) ranges this rank owns (clipped to N)."""
        buf.zero_()
        for start, stop in ranges:
            self.write_truth(buf, start, max(start, min(stop, self.count)))

    def write_truth(self, buf, start, stop, at=None):
        """buf[at:at + stop - start] = T[start:stop] (at defaults to start), a piece at a time."""
        at = start if at is None else at
        for lo, hi in pieces(stop - start):
            buf[at + lo:at + hi] = self.truth(start + lo, hi - lo, buf)

    def wrong(self, result):
        wrong = 0
        for lo, hi in pieces(self.count):
            got, want = result[lo:hi], self.truth(lo, hi - lo, result)
            if got.element_size() == 1 and got.is_floating_point():  # fp8 has no comparison kernels everywhere
                got, want = got.float(), want.float()
            wrong += int((got != want).sum().item())
        return wrong

    def poison(self, *bufs):
        for buf in bufs:
            buf.fill_(poison_value(self.type_name))

    def timed(self, phases, factors, refill, result, poison=lambda: None, **more):
        """A Timed whose check counts the elements of result() that differ from T."""
        return Timed(phases, factors, refill, poison, result, lambda: (self.wrong(result()), {}), **more)


def _places(opts):
    return [p == "in" for p in ("out", "in") if p in opts.places]


def _ring(ctx, cfg, count, dtype, shared):
    p = Payload(ctx, cfg, count, dtype)
    buf = p.empty(p.count)
    own = [(p.rank * p.piece, (p.rank + 1) * p.piece)]
    return p.timed({TOTAL: lambda a: ctx.comm.all_reduce(buf, "sum", async_op=a)}, {TOTAL: factor("all_reduce", p.n)},
                   lambda: p.fill_owned(buf, own), lambda: buf)


def _rs_ag(ctx, cfg, count, dtype, shared):
    p = Payload(ctx, cfg, count, dtype)
    padded = p.piece * p.n
    send = p.empty(padded)
    mine = slice(p.rank * p.piece, (p.rank + 1) * p.piece)
    if cfg["in_place"]:  # reduce_scatter into this rank's slice of send, gather back over send
        piece, out = send[mine], send
    else:
        piece, out = p.empty(p.piece), p.empty(padded)

    def rs(a):
        return ctx.comm.reduce_scatter(piece, send, "sum", async_op=a)

    def ag(a):
        return ctx.comm.all_gather(out, piece, async_op=a)

    def total(a):
        rs(False)
        return ag(a)
    return p.timed({"reduce_scatter": rs, "all_gather": ag, TOTAL: total},
                   {"reduce_scatter": factor("reduce_scatter", p.n), "all_gather": factor("all_gather", p.n),
                    TOTAL: factor("all_reduce", p.n)},
                   lambda: p.fill_owned(send, [(mine.start, mine.stop)]), lambda: out,
                   poison=lambda: p.poison(piece, out))


def chunk_layout(count, n, elt, chunk_bytes, threshold_bytes):
    """[(start, padded length)] of each chunk all_gather; one chunk at or below the threshold."""
    if count * elt <= threshold_bytes:
        return [(0, ceil_div(count, n) * n)]
    full = max(1, chunk_bytes // elt // n) * n
    return [(s, min(full, ceil_div(count - s, n) * n)) for s in range(0, count, full)]


class Counter:
    """Counts chunk operations and the most that were issued and not yet complete at once."""

    def __init__(self):
        self.ops, self.max_inflight = 0, 0

    def issued(self, pending):
        self.ops += 1
        self.max_inflight = max(self.max_inflight, sum(1 for w in pending if not w.is_completed()))


def _chunked(ctx, cfg, count, dtype, groups):
    p = Payload(ctx, cfg, count, dtype)
    elt = torch.empty((), dtype=dtype).element_size()
    chunks = chunk_layout(p.count, p.n, elt, cfg["chunk_bytes"], cfg["threshold_bytes"])
    start_last, len_last = chunks[-1]
    buf = p.empty(start_last + len_last)
    own = [(s + p.rank * (ln // p.n), s + (p.rank + 1) * (ln // p.n)) for s, ln in chunks]
    if cfg["in_place"]:  # each chunk gathers from this rank's slice of the chunk itself
        inputs = [buf[a:b] for a, b in own]
        refill = lambda: p.fill_owned(buf, own)  # noqa: E731
    else:  # this rank's slices packed in a separate shard buffer
        shard = p.empty(sum(b - a for a, b in own))
        offsets = [sum(b - a for a, b in own[:i]) for i in range(len(own))]
        inputs = [shard[o:o + b - a] for o, (a, b) in zip(offsets, own)]

        def refill():
            p.poison(buf)
            for piece, (a, b) in zip(inputs, own):
                piece.zero_()
                p.write_truth(piece, a, a + max(0, min(b, p.count) - a), at=0)
    views = [(mine, buf[s:s + ln]) for mine, (s, ln) in zip(inputs, chunks)]
    k = cfg["inflight"]
    counter = Counter()

    def run(a):
        pending = collections.deque()
        for i, (mine, whole) in enumerate(views):
            if len(pending) >= k:
                pending.popleft().wait()
            pending.append(ctx.comm.all_gather(whole, mine, group=groups[i % k], async_op=True))
            counter.issued(pending)
        for work in pending:
            work.wait()

    def fields(phase):  # chunk operations actually issued per iteration, and the overlap seen
        out = {"chunks": len(chunks), "chunk_ops": counter.ops // (ctx.plan.iters + ctx.plan.warmup),
               "max_inflight": counter.max_inflight, "blocking": k == 1}
        counter.ops = counter.max_inflight = 0
        return out
    return p.timed({TOTAL: run}, {TOTAL: factor("all_gather", p.n)}, refill, lambda: buf, fields=fields,
                   blocking=True)


def inflight_groups(ctx, cfgs):
    """One process group per in-flight slot (all ranks), so chunk operations can overlap."""
    k = max([cfg["inflight"] for cfg in cfgs] + [1])
    return [None] + [ctx.comm.new_group() for _ in range(k - 1)]


def _compressed(ctx, cfg, count, dtype, shared):
    p = Payload(ctx, cfg, count, dtype)
    narrow = getattr(torch, COMPRESS[cfg["compress"]])
    ag = ctx.comm.all_gather
    padded = p.piece * p.n
    own_start = p.rank * p.piece
    exact = torch.randn(padded, generator=torch.Generator().manual_seed(1234), dtype=torch.float32).to(ctx.device)
    exact[p.count:] = 0
    shard = exact[own_start:own_start + p.piece].clone()
    wire = p.empty(padded, narrow)
    out = p.empty(padded, torch.float32)
    scales = p.empty(p.n, torch.float32)
    fp8 = cfg["compress"] == "fp8"

    def run(a):
        mine = wire[own_start:own_start + p.piece]
        if fp8:
            scale = shard.abs().max().clamp(min=1e-30) / FP8_MAX
            mine.copy_((shard / scale).to(narrow))
            ag(scales, scale.reshape(1))
            ag(wire.view(torch.uint8), mine.view(torch.uint8))
            out.copy_(wire.to(torch.float32).view(p.n, p.piece).mul_(scales.view(p.n, 1)).view(-1))
        else:
            mine.copy_(shard.to(narrow))
            ag(wire, mine)
            out.copy_(wire.to(torch.float32))

    def check():
        """Elements outside the wire type's rounding bound; max errors over every rank."""
        err = (out[:p.count] - exact[:p.count]).abs()
        ref = exact[:p.count].abs()
        if fp8:
            bound = ref * 2.0 ** -4 + scales.repeat_interleave(p.piece)[:p.count] * 2.0 ** -9
        else:
            bound = ref * 2.0 ** -8
        errs = torch.tensor([err.max().item() if p.count else 0.0,
                             err.max().item() / ref.max().item() if p.count else 0.0],  # normwise
                            dtype=torch.float64, device=ctx.device)
        ctx.comm.all_reduce(errs, "max")
        return int((err > bound).sum().item()), {"max_abs_error": errs[0].item(), "max_rel_error": errs[1].item()}
    wire_bytes = p.count * torch.empty((), dtype=narrow).element_size()
    return Timed({TOTAL: run}, {TOTAL: factor("all_gather", p.n)}, lambda: None, lambda: p.poison(out),
                 lambda: out, check, lambda phase: {"wire_bytes": wire_bytes}, blocking=True)


def node_groups(ctx, cfgs):
    """(group of this rank's node, group of the ranks with its local rank on every node, L, M)."""
    nodes = sorted(set(ctx.node_of))
    members = [[r for r in range(ctx.world_size) if ctx.node_of[r] == node] for node in nodes]
    local = len(members[0])
    if any(len(m) != local for m in members):
        raise RuntimeError("hierarchical needs the same number of ranks on every node")
    intra = ctx.comm.subgroup(members)
    inter = ctx.comm.subgroup([[m[j] for m in members] for j in range(local)])
    return intra, inter, local, len(nodes)


def _hierarchical_factors(n, local, nodes):
    """busbw of each step on its own group, counted against the payload N (the inter-node step moves N/L)."""
    return {"reduce_scatter": factor("reduce_scatter", local), "all_reduce": factor("all_reduce", nodes) / local,
            "all_gather": factor("all_gather", local), TOTAL: factor("all_reduce", n)}


def _hierarchical(ctx, cfg, count, dtype, groups):
    intra, inter, local, nodes = groups
    p = Payload(ctx, cfg, count, dtype)
    buf = p.empty(p.piece * p.n)
    shard = p.empty(p.piece * p.n // local)
    own = [(p.rank * p.piece, (p.rank + 1) * p.piece)]

    def rs(a):
        return ctx.comm.reduce_scatter(shard, buf, "sum", group=intra, async_op=a)

    def ar(a):
        return ctx.comm.all_reduce(shard, "sum", group=inter, async_op=a)

    def ag(a):
        return ctx.comm.all_gather(buf, shard, group=intra, async_op=a)

    def total(a):
        rs(False)
        ar(False)
        return ag(a)
    return p.timed({"reduce_scatter": rs, "all_reduce": ar, "all_gather": ag, TOTAL: total},
                   _hierarchical_factors(p.n, local, nodes),
                   lambda: p.fill_owned(buf, own), lambda: buf)


def _plain(ctx, cfg, count, dtype, shared):
    """One all_gather of the whole payload: the chunked strategy with a threshold no payload exceeds."""
    whole = {**cfg, "chunk_bytes": 1, "threshold_bytes": float("inf"), "inflight": 1}
    return _chunked(ctx, whole, count, dtype, [None])


def _gather_work(cfg, count, n, elt):
    """What plain and chunked execute: the chunk layout and the overlap it allows (k > chunks is k = chunks)."""
    layout = chunk_layout(count, n, elt, cfg.get("chunk_bytes", 1), cfg.get("threshold_bytes", float("inf")))
    if len(layout) == 1:
        return ("all_gather", layout[0][1], cfg["in_place"])
    return ("chunked all_gather", layout[0][1], len(layout), min(cfg["inflight"], len(layout)), cfg["in_place"])


def _gather_footprint(cfg, count, n, elt):
    return (_padded(count, n) + (0 if cfg["in_place"] else _padded(count, n) // n)) * elt


def _chunked_configs(opts, dtype):
    elt = DTYPES[dtype].bytes
    for chunk in opts.chunk_sizes:
        if chunk > min(opts.thresholds):
            raise UserError(f"--chunk-size {format_size(chunk)} is larger than --threshold "
                            f"{format_size(min(opts.thresholds))}")
        if chunk % elt:
            raise UserError(f"--chunk-size {chunk} B is not a multiple of the {elt} B {dtype} element")
    return [{"case": "chunked", "chunk_bytes": c, "threshold_bytes": t, "inflight": k, "in_place": ip}
            for t in opts.thresholds for c in opts.chunk_sizes for k in opts.inflights for ip in _places(opts)]


def _chunked_label(cfg):
    return f"{format_size(cfg['chunk_bytes'])} x{cfg['inflight']} >{format_size(cfg['threshold_bytes'])}"


def _compressed_configs(opts, dtype):
    if dtype != "float32":
        raise UserError("the compressed strategy casts float32 down; use --dtype float32")
    if not hasattr(torch, COMPRESS[opts.compress]):  # imports torch: only for the compressed strategy
        raise UserError(f"this torch build has no {opts.compress} type")
    return [{"case": "compressed", "compress": opts.compress, "in_place": False}]


def _payload_size(size, elt, n):
    if size % elt:
        raise UserError(f"payload {size} B is not a multiple of the {elt} B element")


def _padded(count, n):
    return ceil_div(count, n) * n


# Each strategy's alpha-beta model (commbench/model.py): model(cfg, N, shape, backend) -> {phase: Phase},
# built from the collectives it runs; a Phase without terms (TOTAL of a multi-phase case) is their sum.

def _one(name, collective):
    """A strategy that is one collective of the payload N (ring: all_reduce; plain: all_gather)."""
    return lambda cfg, size, shape, backend: {
        TOTAL: Phase(factor(name, shape.n), collective(size, shape, backend))}


def _rs_ag_model(cfg, size, shape, backend):
    """reduce_scatter then all_gather of N: the halves of a ring all_reduce, each (n-1) alpha + (n-1)/n N beta."""
    n = shape.n
    return {"reduce_scatter": Phase(factor("reduce_scatter", n), model.reduce_scatter(size, shape, backend)),
            "all_gather": Phase(factor("all_gather", n), model.all_gather(size, shape, backend)),
            TOTAL: Phase(factor("all_reduce", n))}


def _chunked_model(cfg, size, shape, backend):
    """k chunk all_gathers of c_i bytes, up to d = min(inflight, k) outstanding. The chunks share the links, so
    the bandwidth term is the one all_gather's, (n-1)/n sum(c_i) beta; the per-chunk latency (n-1) alpha is
    paid once per wave of d overlapping chunks: ceil(k/d) (n-1) alpha. Chunking therefore never beats one
    all_gather in isolation; what it buys is overlap with other work (Megatron), which this model leaves out."""
    n, elt = shape.n, DTYPES[cfg["dtype"]].bytes
    chunks = chunk_layout(size // elt, n, elt, cfg["chunk_bytes"], cfg["threshold_bytes"])
    waves = ceil_div(len(chunks), min(cfg["inflight"], len(chunks)))
    moved = sum(length for _, length in chunks) * elt
    terms = model.ring_terms((n - 1) / n * moved, (n - 1) * waves, shape) if n > 1 else []
    return {TOTAL: Phase(factor("all_gather", n), terms)}


def _compressed_model(cfg, size, shape, backend):
    """all_gather of the wire bytes (N x wire element / 4 B), plus fp8's all_gather of the n scales."""
    n = shape.n
    wire = size * DTYPES[COMPRESS[cfg["compress"]]].bytes / DTYPES["float32"].bytes
    terms = model.all_gather(wire, shape, backend)
    if cfg["compress"] == "fp8":
        terms += model.all_gather(4 * n, shape, backend)
    return {TOTAL: Phase(factor("all_gather", n), terms)}


def _hierarchical_model(cfg, size, shape, backend):
    """reduce_scatter of N inside each node (L ranks), all_reduce of the N/L shards across the M nodes (L such
    groups at once, sharing the node's NICs), all_gather of N inside each node; each phase bounded by its own
    tier: 2(L-1) alpha_intra + 2 (L-1)/L N beta_intra + 2(M-1) alpha_inter + 2(M-1)/M N beta_node."""
    local, nodes = shape.local, shape.nodes
    f = _hierarchical_factors(shape.n, local, nodes)
    intra, inter = model.Shape(local, local, 1), model.Shape(nodes, 1, nodes, groups=local)
    return {"reduce_scatter": Phase(f["reduce_scatter"], model.reduce_scatter(size, intra, backend), intra),
            "all_reduce": Phase(f["all_reduce"], model.all_reduce(size / local, inter, backend), inter),
            "all_gather": Phase(f["all_gather"], model.all_gather(size, intra, backend), intra),
            TOTAL: Phase(f[TOTAL])}


STRATEGY_CASES = {c.name: c for c in [
    Case("ring", "strategy", "all_reduce", (TOTAL,), _ring, lambda o, d: [{"case": "ring", "in_place": True}],
         check_size=_payload_size, nccl_env={"NCCL_ALGO": "Ring"}, footprint=lambda c, k, n, e: k * e, sums=True,
         model=_one("all_reduce", model.all_reduce)),
    Case("rs-ag", "strategy", "all_reduce", ("reduce_scatter", "all_gather", TOTAL), _rs_ag,
         lambda o, d: [{"case": "rs-ag", "in_place": ip} for ip in _places(o)], check_size=_payload_size,
         both_places=True, sums=True,
         footprint=lambda c, k, n, e: (_padded(k, n) if c["in_place"] else 2 * _padded(k, n) + k // n) * e,
         model=_rs_ag_model),
    Case("plain", "strategy", "all_gather", (TOTAL,), _plain,
         lambda o, d: [{"case": "plain", "in_place": ip} for ip in _places(o)], check_size=_payload_size,
         both_places=True, work=_gather_work,
         footprint=_gather_footprint, model=_one("all_gather", model.all_gather)),
    Case("chunked", "strategy", "all_gather", (TOTAL,), _chunked, _chunked_configs,
         describe=_chunked_label, check_size=_payload_size, setup=inflight_groups, both_places=True,
         work=_gather_work,
         footprint=_gather_footprint, model=_chunked_model),
    Case("compressed", "strategy", "all_gather", (TOTAL,), _compressed, _compressed_configs,
         describe=lambda c: c["compress"], check_size=_payload_size,
         model=_compressed_model,
         footprint=lambda c, k, n, e: 8 * _padded(k, n) * e),  # exact, shard, wire, out, and the check's error terms
    Case("hierarchical", "strategy", "all_reduce", ("reduce_scatter", "all_reduce", "all_gather", TOTAL),
         _hierarchical, lambda o, d: [{"case": "hierarchical", "in_place": True}], check_size=_payload_size,
         setup=node_groups, footprint=lambda c, k, n, e: 2 * _padded(k, n) * e, sums=True,
         model=_hierarchical_model),
]}
