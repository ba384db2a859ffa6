"""The chunked strategy (Megatron-style all_gather in chunks, up to `inflight` outstanding) and plain, its
one-all_gather baseline: the same function with a threshold no payload exceeds."""
import collections

from benchcore.errors import UserError
from benchcore.lazy import lazy
from benchcore.units import format_size
from commbench.cases.case import TOTAL, Case
from commbench.cases.collectives import DTYPES
from commbench.cases.payload import Payload, ceil_div, factor, one, padded, payload_size, places
from commbench.model import alphabeta as model
from commbench.model.alphabeta import Phase

torch = lazy("torch", globals())

# the record fields plain and chunked add (chunk_bytes is every commbench record's); the pipelined overlap patterns
# carry inflight too
CHUNK_FIELDS = {"chunks": "chunked: chunks per payload", "chunk_ops": "chunked: chunk operations issued per iteration",
                "max_inflight": "chunked: most chunk operations seen in flight at once"}
INFLIGHT = {"inflight": "chunked: operations in flight"}
# In-flight slots (--inflight): each is a process group of its own that every rank opens at start-up (an NCCL
# communicator with its own buffers on every GPU; on 2 Gloo ranks here 15-25 ms each: 2,000 outlast the 60 s
# --hang-timeout), and a GPU runs at most 128 kernels at once (CUDA's concurrent kernels from compute capability 7.0)
MAX_INFLIGHT = 128


def chunk_layout(count, n, elt, chunk_bytes, threshold_bytes):
    """[(start, padded length)] of each chunk all_gather; one chunk at or below the threshold."""
    if count * elt <= threshold_bytes:
        return [(0, ceil_div(count, n) * n)]
    full = max(1, chunk_bytes // elt // n) * n
    return [(s, min(full, ceil_div(count - s, n) * n)) for s in range(0, count, full)]


def chunks_of(count, n, elt, chunk_bytes, threshold_bytes):
    """How many chunks chunk_layout makes, without making them."""
    return 1 if count * elt <= threshold_bytes else ceil_div(count, max(1, chunk_bytes // elt // n) * n)


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


def _plain(ctx, cfg, count, dtype, shared):
    """One all_gather of the whole payload: the chunked strategy with a threshold no payload exceeds."""
    whole = {**cfg, "chunk_bytes": 1, "threshold_bytes": float("inf"), "inflight": 1}
    return _chunked(ctx, whole, count, dtype, [None])


def _gather_work(cfg, count, n, elt):
    """What plain and chunked execute: the chunk layout and the overlap it allows (k > chunks is k = chunks)."""
    layout = chunk_layout(count, n, elt, cfg.get("chunk_bytes", 1), cfg.get("threshold_bytes", float("inf")))
    if len(layout) == 1:
        return ("one all_gather of the payload, not chunked", layout[0][1], cfg["in_place"])
    return ("the same chunk all_gathers, as many in flight", layout[0][1], len(layout),
            min(cfg["inflight"], len(layout)), cfg["in_place"])


def _gather_footprint(cfg, count, n, elt):
    return (padded(count, n) + (0 if cfg["in_place"] else padded(count, n) // n)) * elt


def _chunked_configs(opts, dtype):
    elt = DTYPES[dtype].bytes
    for chunk in opts.chunk_sizes:
        if chunk > min(opts.thresholds):
            raise UserError(f"--chunk-size {format_size(chunk)} is larger than --threshold "
                            f"{format_size(min(opts.thresholds))}")
        if chunk % elt:
            raise UserError(f"--chunk-size {chunk} B is not a multiple of the {elt} B {dtype} element")
    return [{"case": "chunked", "chunk_bytes": c, "threshold_bytes": t, "inflight": k, "in_place": ip}
            for t in opts.thresholds for c in opts.chunk_sizes for k in opts.inflights for ip in places(opts)]


def _chunked_steps(cfg, size, n):
    elt = DTYPES[cfg["dtype"]].bytes
    return chunks_of(size // elt, n, elt, cfg["chunk_bytes"], cfg["threshold_bytes"])


def _chunked_label(cfg):
    return f"{format_size(cfg['chunk_bytes'])} x{cfg['inflight']} >{format_size(cfg['threshold_bytes'])}"


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
    return {TOTAL: Phase(factor("all_gather", n), terms, nccl="all_gather", calls=waves)}


PLAIN = Case("plain", "strategy", "all_gather", (TOTAL,), _plain,
             lambda opts, dtype: [{"case": "plain", "in_place": ip} for ip in places(opts)], check_size=payload_size,
             both_places=True, work=_gather_work, footprint=_gather_footprint, model=one("all_gather", model.all_gather),
             fields=CHUNK_FIELDS)
CHUNKED = Case("chunked", "strategy", "all_gather", (TOTAL,), _chunked, _chunked_configs,
               describe=_chunked_label, check_size=payload_size, setup=inflight_groups, both_places=True,
               work=_gather_work, footprint=_gather_footprint, steps=_chunked_steps, model=_chunked_model,
               fields={**CHUNK_FIELDS, "threshold_bytes": "chunked: payloads above it are chunked", **INFLIGHT})
