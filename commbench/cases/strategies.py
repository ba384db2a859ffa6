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

Each strategy is a Case (commbench/cases/case.py): one row in STRATEGY_CASES plus its functions, here
(ring, rs-ag) or in a module of its own (chunked.py with plain, compressed.py, hierarchical.py); what they
all share (the payload T, ownership, the check) is payload.py's.

Payloads need not divide by n or by the chunk: the last piece is padded, the payload
is the first N bytes of the buffer, and the check covers exactly those.
"""
from commbench.cases import chunked, compressed, hierarchical
from commbench.cases.case import TOTAL, Case
from commbench.cases.payload import Payload, factor, one, padded, payload_size, places
from commbench.model import alphabeta as model
from commbench.model.alphabeta import Phase


def _ring(ctx, cfg, count, dtype, shared):
    p = Payload(ctx, cfg, count, dtype)
    buf = p.empty(p.count)
    own = [(p.rank * p.piece, (p.rank + 1) * p.piece)]
    return p.timed({TOTAL: lambda a: ctx.comm.all_reduce(buf, "sum", async_op=a)}, {TOTAL: factor("all_reduce", p.n)},
                   lambda: p.fill_owned(buf, own), lambda: buf)


def _rs_ag(ctx, cfg, count, dtype, shared):
    p = Payload(ctx, cfg, count, dtype)
    whole = p.piece * p.n
    send = p.empty(whole)
    mine = slice(p.rank * p.piece, (p.rank + 1) * p.piece)
    if cfg["in_place"]:  # reduce_scatter into this rank's slice of send, gather back over send
        piece, out = send[mine], send
    else:
        piece, out = p.empty(p.piece), p.empty(whole)

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


def _rs_ag_footprint(cfg, count, n, elt):
    """The payload (padded to n pieces), out of place also the separate output and this rank's piece."""
    whole = padded(count, n)
    return (whole if cfg["in_place"] else 2 * whole + count // n) * elt


def _rs_ag_model(cfg, size, shape, backend):
    """reduce_scatter then all_gather of N: the halves of a ring all_reduce, each (n-1) alpha + (n-1)/n N beta."""
    n = shape.n
    return {"reduce_scatter": Phase(factor("reduce_scatter", n), model.reduce_scatter(size, shape, backend),
                                    nccl="reduce_scatter"),
            "all_gather": Phase(factor("all_gather", n), model.all_gather(size, shape, backend), nccl="all_gather"),
            TOTAL: Phase(factor("all_reduce", n))}


STRATEGY_CASES = {c.name: c for c in [
    Case("ring", "strategy", "all_reduce", (TOTAL,), _ring, lambda opts, dtype: [{"case": "ring", "in_place": True}],
         check_size=payload_size, nccl_env={"NCCL_ALGO": "Ring"}, footprint=lambda cfg, count, n, elt: count * elt,
         sums=True, model=one("all_reduce", model.all_reduce)),
    Case("rs-ag", "strategy", "all_reduce", ("reduce_scatter", "all_gather", TOTAL), _rs_ag,
         lambda opts, dtype: [{"case": "rs-ag", "in_place": ip} for ip in places(opts)], check_size=payload_size,
         both_places=True, sums=True, footprint=_rs_ag_footprint, model=_rs_ag_model),
    chunked.PLAIN,
    chunked.CHUNKED,
    compressed.CASE,
    hierarchical.CASE,
]}
