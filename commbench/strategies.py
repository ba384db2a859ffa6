"""Strategies that leave every rank holding the same N-byte tensor T, one table row each.

"The same payload" (N bytes, `size_bytes` in records): every strategy starts with each
rank owning disjoint slices of T (1/n of it) and ends with every rank holding all of T.

  ring        one all_reduce of N bytes: each rank contributes T with its own slices
              filled and zeros elsewhere, so the sum is exactly T (nccl-tests all_reduce
              size N, busbw factor 2(n-1)/n). Ring algorithm on NCCL (NCCL_ALGO=Ring).
  rs-ag       reduce_scatter of that N-byte tensor, then all_gather of the N/n pieces:
              the two halves of a ring all_reduce, timed apart (phase reduce_scatter,
              all_gather; factor (n-1)/n each) and together (phase total, 2(n-1)/n).
  chunked     Megatron-style all_gather: N <= threshold goes in one all_gather; above it
              T is cut into chunks of n*floor(chunk/n/elt) elements, each all-gathered in
              place (rank r owns the r-th n-th of every chunk), with up to `inflight`
              chunk operations outstanding, each in-flight slot its own process group
              (its own NCCL stream). all_gather size N, factor (n-1)/n.
  compressed  all_gather of the owned slices cast to bf16, or fp8 e4m3 with a per-rank
              scale, cast back to float32; casts are inside the timed loop. Records the
              wire bytes and the numeric error against the exact T. size N, factor (n-1)/n.

Payloads need not divide by n or by the chunk: the last piece is padded, the payload
is the first N bytes of the buffer, and the check covers exactly those.
"""
import collections
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist

from commbench.collectives import DTYPES, _all_gather, _reduce_scatter
from commbench.context import agg_time, measure, summed

FILL_PERIOD = 251  # T[i] = i % 251 + 1: exact in every dtype, and a misplaced element shows
COMPRESS = {"bf16": torch.bfloat16, "fp8": getattr(torch, "float8_e4m3fn", None)}
FP8_MAX = 448.0


def ceil_div(a, b):
    return -(-a // b)


def truth(start, length, dtype, device):
    """T[start:start+length]."""
    idx = torch.arange(start, start + length, device=device, dtype=torch.int64)
    return (idx % FILL_PERIOD + 1).to(dtype)


class Payload:
    """Buffers and ownership for one strategy at one size on this rank."""

    def __init__(self, ctx, count, dtype):
        self.ctx, self.count, self.dtype = ctx, count, dtype
        self.n, self.rank = ctx.world_size, ctx.rank
        self.piece = ceil_div(count, self.n)

    def empty(self, k, dtype=None):
        return torch.empty(k, dtype=dtype or self.dtype, device=self.ctx.device)

    def fill_owned(self, buf, ranges):
        """Zero buf, then write T into the [start, stop) ranges this rank owns (clipped to N)."""
        buf.zero_()
        for start, stop in ranges:
            stop = min(stop, self.count)
            if stop > start:
                buf[start:stop] = truth(start, stop - start, buf.dtype, buf.device)

    def wrong(self, result):
        return int((result[:self.count] != truth(0, self.count, result.dtype, result.device)).sum().item())


class Counter:
    """Counts chunk operations and the most that were issued and not yet complete at once."""

    def __init__(self):
        self.ops, self.max_inflight = 0, 0

    def issued(self, pending):
        self.ops += 1
        self.max_inflight = max(self.max_inflight, sum(1 for w in pending if not w.is_completed()))


def _ring(p, cfg, groups):
    buf = p.empty(p.count)
    own = [(p.rank * p.piece, (p.rank + 1) * p.piece)]
    return {"total": lambda a: dist.all_reduce(buf, async_op=a)}, lambda: p.fill_owned(buf, own), lambda: buf, {}


def _rs_ag(p, cfg, groups):
    padded = p.piece * p.n
    send = p.empty(padded)
    mine = slice(p.rank * p.piece, (p.rank + 1) * p.piece)
    if cfg["in_place"]:  # reduce_scatter into this rank's slice of send, gather back over send
        piece, out = send[mine], send
    else:
        piece, out = p.empty(p.piece), p.empty(padded)
    own = [(mine.start, mine.stop)]

    def rs(a):
        return _reduce_scatter(piece, send, async_op=a)

    def ag(a):
        return _all_gather(out, piece, async_op=a)

    def total(a):
        rs(False)
        return ag(a)
    return {"reduce_scatter": rs, "all_gather": ag, "total": total}, lambda: p.fill_owned(send, own), lambda: out, {}


def chunk_layout(count, n, elt, chunk_bytes, threshold_bytes):
    """[(start, padded length)] of each chunk all_gather; one chunk at or below the threshold."""
    if count * elt <= threshold_bytes:
        return [(0, ceil_div(count, n) * n)]
    full = max(1, chunk_bytes // elt // n) * n
    return [(s, min(full, ceil_div(count - s, n) * n)) for s in range(0, count, full)]


def _chunked(p, cfg, groups):
    elt = torch.empty((), dtype=p.dtype).element_size()
    chunks = chunk_layout(p.count, p.n, elt, cfg["chunk_bytes"], cfg["threshold"])
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
            buf.zero_()
            for piece, (a, b) in zip(inputs, own):
                piece.zero_()
                valid = max(0, min(b, p.count) - a)
                piece[:valid] = truth(a, valid, piece.dtype, piece.device)
    views = [(mine, buf[s:s + ln]) for mine, (s, ln) in zip(inputs, chunks)]
    k = cfg["inflight"]
    counter = Counter()

    def run(a):
        pending = collections.deque()
        for i, (mine, whole) in enumerate(views):
            if len(pending) >= k:
                pending.popleft().wait()
            pending.append(_all_gather(whole, mine, group=groups[i % k], async_op=True))
            counter.issued(pending)
        for work in pending:
            work.wait()
    return {"total": run}, refill, lambda: buf, {"chunks": len(chunks), "counter": counter}


def _compressed(p, cfg, groups):
    narrow = COMPRESS[cfg["compress"]]
    padded = p.piece * p.n
    own_start = p.rank * p.piece
    exact = torch.randn(padded, generator=torch.Generator().manual_seed(1234), dtype=torch.float32).to(p.ctx.device)
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
            _all_gather(scales, scale.reshape(1))
            _all_gather(wire.view(torch.uint8), mine.view(torch.uint8))
            out.copy_(wire.to(torch.float32).view(p.n, p.piece).mul_(scales.view(p.n, 1)).view(-1))
        else:
            mine.copy_(shard.to(narrow))
            _all_gather(wire, mine)
            out.copy_(wire.to(torch.float32))

    def wrong(result):
        err = (result[:p.count] - exact[:p.count]).abs()
        ref = exact[:p.count].abs()
        if fp8:
            bound = ref * 2.0 ** -4 + scales.repeat_interleave(p.piece)[:p.count] * 2.0 ** -9
        else:
            bound = ref * 2.0 ** -8
        info = {"max_abs_error": float(err.max().item()) if p.count else 0.0,
                "max_rel_error": float(err.max().item() / ref.max().item()) if p.count else 0.0}  # normwise
        return int((err > bound).sum().item()), info
    wire_bytes = p.count * torch.empty((), dtype=narrow).element_size()
    return {"total": run}, lambda: None, lambda: out, {"wrong": wrong, "wire_bytes": wire_bytes}


@dataclass(frozen=True)
class Strategy:
    name: str
    collective: str                       # the underlying collective, for nccl-tests' rules
    factor: Callable[[int], float]        # busbw factor of the whole strategy
    build: Callable                       # build(payload, cfg, groups) -> (runs, refill, result, extras)


STRATEGIES = {s.name: s for s in [
    Strategy("ring", "all_reduce", lambda n: 2 * (n - 1) / n, _ring),
    Strategy("rs-ag", "all_reduce", lambda n: 2 * (n - 1) / n, _rs_ag),
    Strategy("chunked", "all_gather", lambda n: (n - 1) / n, _chunked),
    Strategy("compressed", "all_gather", lambda n: (n - 1) / n, _compressed),
]}
IN_PLACE_ONLY = {"ring": True, "compressed": False}  # torch all_reduce is in place; compressed casts apart


PHASE_FACTOR = {"reduce_scatter": lambda n: (n - 1) / n, "all_gather": lambda n: (n - 1) / n}


def inflight_groups(ctx, plan):
    """One process group per in-flight slot (all ranks), so chunk operations can overlap."""
    k = max([cfg.get("inflight", 1) for cfg in plan["strategies"]] + [1])
    return [dist.group.WORLD] + [dist.new_group() for _ in range(k - 1)]


def measure_strategy(ctx, cfg, size, groups):
    """Records (one per phase) for strategy cfg at payload `size` bytes."""
    plan, strategy = ctx.plan, STRATEGIES[cfg["name"]]
    dtype = DTYPES[plan["dtype"]]
    count = size // torch.empty((), dtype=dtype).element_size()
    payload = Payload(ctx, count, dtype)
    runs, refill, result, extras = strategy.build(payload, cfg, groups)
    records = []
    for phase, run_once in runs.items():
        refill()
        t, t_min, t_max = agg_time(plan, measure(ctx, run_once, plan["iters"], plan["warmup"], True))
        factor = strategy.factor if phase == "total" else PHASE_FACTOR[phase]
        algbw = size / t / 1e9
        fields = dict(collective=strategy.collective if phase == "total" else phase, strategy=cfg["name"],
                      phase=phase, size_bytes=size, count=count, dtype=plan["dtype"], op=None,
                      blocking=cfg.get("inflight", 1) == 1, chunk_bytes=cfg.get("chunk_bytes"),
                      threshold_bytes=cfg.get("threshold"), inflight=cfg.get("inflight"),
                      compress=cfg.get("compress"), in_place=cfg.get("in_place", IN_PLACE_ONLY.get(cfg["name"])),
                      time_us=t * 1e6, time_us_min=t_min * 1e6, time_us_max=t_max * 1e6, algbw_gbps=algbw, busbw_gbps=algbw * factor(ctx.world_size),
                      iters=plan["iters"], warmup=plan["warmup"], agg=plan["agg"])
        if "counter" in extras:  # chunk operations actually issued per iteration, and overlap seen
            counter = extras["counter"]
            fields.update(chunks=extras["chunks"], chunk_ops=counter.ops // (plan["iters"] + plan["warmup"]),
                          max_inflight=counter.max_inflight)
            counter.ops = counter.max_inflight = 0
        if "wire_bytes" in extras:
            fields["wire_bytes"] = extras["wire_bytes"]
            fields["wire_busbw_gbps"] = extras["wire_bytes"] / t / 1e9 * factor(ctx.world_size)
        records.append(fields)
    if not plan["check"]:
        return [ctx.record(**fields, wrong=None) for fields in records]
    refill()
    runs["total"](False)
    if ctx.device.type == "cuda":
        torch.cuda.synchronize()
    checker = extras.get("wrong")
    mine, info = checker(result()) if checker else (payload.wrong(result()), {})
    wrong = summed(ctx, mine)
    if info:
        errs = torch.tensor([info["max_abs_error"], info["max_rel_error"]], dtype=torch.float64, device=ctx.device)
        dist.all_reduce(errs, op=dist.ReduceOp.MAX)
        info = {"max_abs_error": errs[0].item(), "max_rel_error": errs[1].item()}
    return [ctx.record(**fields, wrong=wrong, **info) for fields in records]
