"""The collectives registry: one table row per collective, nccl-tests style.

"size" is the byte count nccl-tests prints for each collective (see ARCHITECTURE.md, "Measurement rules"):
the per-rank buffer for all_reduce, broadcast, reduce and sendrecv; the whole
gathered / scattered array (n x the per-rank piece) for all_gather and
reduce_scatter; the per-rank send buffer (n chunks) for all_to_all.

Placements: a row lists every placement some transport offers; each transport drops what
its API lacks (torch.distributed: all_reduce and reduce in place only; MPI: no in-place
reduce_scatter). broadcast is in place only (MPI_Bcast has one buffer), all_to_all and
sendrecv out of place only. commbench never adds a copy to the timed loop to fake a variant.
"""
import math
from dataclasses import dataclass
from functools import partial
from typing import Callable, Tuple

from benchcore.errors import UserError
from benchcore.lazy import lazy
from benchcore.units import format_size
from benchcore.vocabulary import TYPES
from commbench.cases.case import TOTAL, Case, Timed
from commbench.model import alphabeta as model
from commbench.model.alphabeta import Phase

torch = lazy("torch", globals())


@dataclass(frozen=True)
class Dtype:
    name: str          # torch's name (torch.<name>)
    nccl_tests: str    # how nccl-tests spells it
    bytes: int
    exact: int         # every integer up to this is exact in the type (fill values, sums, products stay below)
    gloo: bool = True  # Gloo reduces it


def _dtype(name, exact, gloo=True):
    """A type commbench runs: its spellings and width from benchcore/vocabulary.py, what a run needs beside them."""
    return Dtype(name, TYPES[name].nccl_tests, TYPES[name].bytes, exact, gloo)


DTYPES = {d.name: d for d in [
    _dtype("float32", 1 << 24), _dtype("float16", 1 << 11), _dtype("bfloat16", 1 << 8), _dtype("float64", 1 << 53),
    _dtype("int8", 127), _dtype("uint8", 254), _dtype("int32", (1 << 31) - 1), _dtype("int64", (1 << 63) - 1),
    _dtype("float8_e4m3fn", 16, gloo=False),
]}
# nccl-tests name -> torch ReduceOp. avg is NCCL's ncclAvg (2.10+): floats are pre-multiplied by 1/n and summed,
# integers summed and divided by n; Gloo has no average.
OPS = ("sum", "prod", "max", "min", "avg")   # nccl-tests' names; each transport maps them to its own
NCCL_ONLY_OPS = ("avg",)
_PY_OPS = {"sum": sum, "prod": math.prod, "max": max, "min": min, "avg": lambda values: sum(values)}
PERIOD = 5    # the fill pattern repeats every PERIOD elements


def torch_dtype(name):
    return getattr(torch, name)


def poison_value(name):
    """A value no correct result holds: fill values, sums and products are positive and below `exact`."""
    return DTYPES[name].exact + 1 if name == "uint8" else -1


@dataclass(frozen=True)
class Collective:
    name: str
    bus_factor: Callable[[int], float]   # world size -> busbw / algbw (nccl-tests PERFORMANCE.md)
    split: bool                          # size is n per-rank pieces (count must divide by n)
    send_piece: bool                     # send buffer is one piece (all_gather)
    recv_piece: bool                     # recv buffer is one piece (reduce_scatter)
    placements: Tuple[str, ...]          # "out" and/or "in"
    bind: Callable                       # bind(comm, send, recv, op, root) -> run(async_op=...) -> work or None
                                         # (comm: the transport's primitives, commbench/transports/torch_dist.py)
    expected: Callable                   # expected(rank, n, count, op, vals, root) -> regions to check
    model: Callable                      # model(size, shape, backend) -> alpha-beta terms (commbench/model/alphabeta.py)
    reduces: bool = False                # takes --op (its records carry op)
    rooted: bool = False                 # has a root rank (its records carry root)

    def counts(self, count, n):
        """(send elements, recv elements) for a collective of `count` elements."""
        piece = count // n if self.split else count
        return (piece if self.send_piece else count), (piece if self.recv_piece else count)


def _reduced(op, n, vals):
    reduced = [_PY_OPS[op](vals(r)[k] for r in range(n)) for k in range(PERIOD)]
    return [v // n for v in reduced] if op == "avg" else reduced   # avg: every value is a multiple of n


def _src(send, recv):
    """The input of an out-of-place all_reduce / reduce (MPI's send buffer); nothing in place."""
    return {} if send is recv else {"src": send}


# expected(rank, n, count, op, vals, root) -> list of (recv offset, length, 5 pattern values, pattern start index)
# vals(r) gives rank r's fill pattern (PERIOD values); input element i of rank r is vals(r)[i % PERIOD].
def _exp_all_reduce(rank, n, count, op, vals, root):
    return [(0, count, _reduced(op, n, vals), 0)]


def _exp_reduce(rank, n, count, op, vals, root):
    return [(0, count, _reduced(op, n, vals), 0)] if rank == root else []


def _exp_broadcast(rank, n, count, op, vals, root):
    return [(0, count, vals(root), 0)]


def _exp_all_gather(rank, n, count, op, vals, root):
    m = count // n
    return [(q * m, m, vals(q), 0) for q in range(n)]


def _exp_reduce_scatter(rank, n, count, op, vals, root):
    m = count // n
    return [(0, m, _reduced(op, n, vals), rank * m)]


def _exp_all_to_all(rank, n, count, op, vals, root):
    m = count // n
    return [(q * m, m, vals(q), rank * m) for q in range(n)]


def _exp_sendrecv(rank, n, count, op, vals, root):
    return [(0, count, vals((rank - 1) % n), 0)]


COLLECTIVES = {c.name: c for c in [
    Collective(name="all_reduce", bus_factor=lambda n: 2 * (n - 1) / n, split=False, send_piece=False,
               recv_piece=False, placements=("out", "in"),
               bind=lambda comm, send, recv, op, root: partial(comm.all_reduce, recv, op, **_src(send, recv)),
               expected=_exp_all_reduce, model=model.all_reduce, reduces=True),
    Collective(name="all_gather", bus_factor=lambda n: (n - 1) / n, split=True, send_piece=True, recv_piece=False,
               placements=("out", "in"),
               bind=lambda comm, send, recv, op, root: partial(comm.all_gather, recv, send),
               expected=_exp_all_gather, model=model.all_gather),
    Collective(name="reduce_scatter", bus_factor=lambda n: (n - 1) / n, split=True, send_piece=False,
               recv_piece=True, placements=("out", "in"),
               bind=lambda comm, send, recv, op, root: partial(comm.reduce_scatter, recv, send, op),
               expected=_exp_reduce_scatter, model=model.reduce_scatter, reduces=True),
    Collective(name="broadcast", bus_factor=lambda n: 1.0, split=False, send_piece=False, recv_piece=False,
               placements=("in",),
               bind=lambda comm, send, recv, op, root: partial(comm.broadcast, recv, root),
               expected=_exp_broadcast, model=model.chain, rooted=True),
    Collective(name="reduce", bus_factor=lambda n: 1.0, split=False, send_piece=False, recv_piece=False,
               placements=("out", "in"),
               bind=lambda comm, send, recv, op, root: partial(comm.reduce, recv, root, op, **_src(send, recv)),
               expected=_exp_reduce, model=model.chain, reduces=True, rooted=True),
    Collective(name="all_to_all", bus_factor=lambda n: (n - 1) / n, split=True, send_piece=False, recv_piece=False,
               placements=("out",),
               bind=lambda comm, send, recv, op, root: partial(comm.all_to_all, recv, send),
               expected=_exp_all_to_all, model=model.all_to_all),
    Collective(name="sendrecv", bus_factor=lambda n: 1.0, split=False, send_piece=False, recv_piece=False,
               placements=("out",),
               bind=lambda comm, send, recv, op, root: partial(comm.sendrecv, send, recv),
               expected=_exp_sendrecv, model=model.sendrecv),
]}


def fill_values(rank, n, dtype, op="sum"):
    """Rank r's PERIOD-value fill pattern: small integers whose sum (or product) over n ranks is exact. For avg,
    n times such integers a: x (1/n) rounds back to a even where 1/n does not fit the type (|a| (n fl(1/n) - 1)
    stays below half an ulp of a), and the sum of the a is exact, so NCCL's average is exact too."""
    n = max(n, 1)
    exact = DTYPES[dtype].exact
    top = int(exact ** (1 / n)) if op == "prod" else exact // (n * n if op == "avg" else n)
    top = max(1, min(PERIOD, top))
    return [(((k + 3 * rank) % top) + 1) * (n if op == "avg" else 1) for k in range(PERIOD)]


CHUNK = 1 << 22   # elements per piece of the fill and the check: their scratch stays small at any size


def pieces(length):
    """(lo, hi) pieces of range(length), CHUNK elements each."""
    return [(lo, min(lo + CHUNK, length)) for lo in range(0, length, CHUNK)]


def fill_pattern(out, values):
    """out[i] = values[i % PERIOD], a piece at a time (slices of one tile: building each piece anew took a third of
    the time of a 512M fill and check on a 2-core VM)."""
    flat = out.reshape(-1)
    tile = pattern(values, 0, min(CHUNK, flat.numel()) + PERIOD, flat.dtype, flat.device)
    for lo, hi in pieces(flat.numel()):
        flat[lo:hi] = tile[lo % PERIOD:lo % PERIOD + hi - lo]


def pattern(values, start, length, dtype, device):
    """Elements start..start+length of the periodic sequence values[i % PERIOD] (dtype: a torch dtype)."""
    base = torch.tensor(values, dtype=torch.float64, device=device).to(dtype)
    tiled = base.repeat(length // PERIOD + 2)
    offset = start % PERIOD
    return tiled[offset:offset + length]


def count_wrong(result, regions, dtype, device):
    """Elements of `result` that differ from the expected regions (offset, length, values, start)."""
    flat = result.reshape(-1)
    wrong = 0
    for offset, length, values, start in regions:
        tile = pattern(values, 0, min(CHUNK, length) + PERIOD, dtype, device)
        for lo, hi in pieces(length):
            at = (start + lo) % PERIOD
            want = tile[at:at + hi - lo]
            got = flat[offset + lo:offset + hi]
            if got.element_size() == 1 and got.is_floating_point():  # fp8 has no comparison kernels everywhere
                got, want = got.float(), want.float()
            if not torch.equal(got, want):   # equal pieces (nearly all) are not counted: 5x faster on a CPU
                wrong += int((got != want).sum().item())
    return wrong


def buffers(coll, in_place, count, ctx, dtype):
    """(send, recv) tensors; in place they share storage as nccl-tests' in-place variants do."""
    n, rank = ctx.world_size, ctx.rank
    send_n, recv_n = coll.counts(count, n)
    empty = lambda k: torch.empty(k, dtype=dtype, device=ctx.device)  # noqa: E731
    if not in_place:
        return empty(send_n), empty(recv_n)
    if coll.send_piece:
        recv = empty(recv_n)
        return recv[rank * send_n:(rank + 1) * send_n], recv
    if coll.recv_piece:
        send = empty(send_n)
        return send, send[rank * recv_n:(rank + 1) * recv_n]
    buf = empty(count)
    return buf, buf


def _case(coll):
    """The case that times collective coll: one phase, nccl-tests' check of every element."""
    def build(ctx, cfg, count, dtype, shared):
        n, op_name, root = ctx.world_size, cfg["op"] or "sum", cfg["root"]
        send, recv = buffers(coll, cfg["in_place"], count, ctx, dtype)
        vals = lambda r: fill_values(r, n, cfg["dtype"], op_name)  # noqa: E731
        send_buf = ctx.comm.buffer(send)
        run = coll.bind(ctx.comm, send_buf, send_buf if recv is send else ctx.comm.buffer(recv), op_name, root)
        return Timed(
            phases={TOTAL: lambda a: run(async_op=a)},
            factors={TOTAL: coll.bus_factor(n)},
            refill=lambda: fill_pattern(send, vals(ctx.rank)),
            poison=lambda: recv.fill_(poison_value(cfg["dtype"])),
            result=lambda: recv,
            check=lambda: (count_wrong(recv, coll.expected(ctx.rank, n, count, op_name, vals, root), dtype,
                                       ctx.device), {}))

    def configs(opts, dtype):
        return [{"case": coll.name, "in_place": place == "in"} for place in coll.placements if place in opts.places]

    def unit(elt, n):
        return elt * (n if coll.split else 1)

    def check_size(size, elt, n):
        if size % unit(elt, n):
            why = f"{n} ranks x {elt} B elements" if coll.split else f"{elt} B elements"
            raise UserError(f"size {format_size(size)} ({size} B) does not suit {coll.name}: "
                            f"needs a multiple of {unit(elt, n)} B ({why})")

    def footprint(cfg, count, n, elt):
        send_n, recv_n = coll.counts(count, n)
        return (max(send_n, recv_n) if cfg["in_place"] else send_n + recv_n) * elt
    return Case(coll.name, "collective", coll.name, (TOTAL,), build, configs, check_size=check_size, unit=unit,
                footprint=footprint,
                both_places=len(coll.placements) > 1, reduces=coll.reduces, rooted=coll.rooted,
                model=lambda cfg, size, shape, backend: {
                    TOTAL: Phase(coll.bus_factor(shape.n), coll.model(size, shape, backend))})


COLLECTIVE_CASES = {name: _case(coll) for name, coll in COLLECTIVES.items()}
