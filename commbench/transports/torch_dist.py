"""The primitives a transport supplies: the one table the cases and the timed path call.

Per transport (gloo, nccl, mpi) only these differ (ARCHITECTURE.md): collectives.py, strategies.py,
timing.py and context.py never call torch.distributed or mpi4py themselves. Every operation takes
torch tensors; `async_op=True` returns a work with wait() and is_completed(), else None. Reduction
ops are nccl-tests' names (sum, prod, max, min, avg). `group` is None (every rank) or one that
new_group / subgroup made.

The torch.distributed table is here; the MPI table (mpi4py on the tensors' memory) is
commbench/transports/mpi.py's.
"""
from dataclasses import dataclass
from functools import partial
from typing import Callable

from benchcore.lazy import lazy

torch = lazy("torch", globals())
dist = lazy("torch.distributed", globals(), "dist")

OPS = {"sum": "SUM", "prod": "PRODUCT", "max": "MAX", "min": "MIN", "avg": "AVG"}   # -> torch's ReduceOp
NO_OUT_OF_PLACE = ("all_reduce", "reduce")   # torch.distributed reduces in place only (MPI has both)


@dataclass(frozen=True)
class Primitives:
    all_reduce: Callable       # (t, op, group=None, async_op=False): in place; MPI's also src= (out of place)
    all_gather: Callable       # (out, inp, group=None, async_op=False): inp may be out's own slot (in place)
    reduce_scatter: Callable   # (out, inp, op, group=None, async_op=False)
    broadcast: Callable        # (t, root, async_op=False)
    reduce: Callable           # (t, root, op, async_op=False): in place, the result on root; MPI's also src=
    all_to_all: Callable       # (out, inp, async_op=False)
    sendrecv: Callable         # (send, recv, async_op=False): to rank + 1, from rank - 1
    send: Callable             # (t, peer, async_op=False)
    recv: Callable             # (t, peer, async_op=False)
    barrier: Callable          # ()
    gather_floats: Callable    # (list of floats) -> one such list per rank (the per-rank time gather)
    reduce_int: Callable       # (int, op) -> int over every rank (wrong counts, peak memory)
    gather_object: Callable    # (picklable) -> one per rank
    new_group: Callable        # () -> a group of every rank (its own stream / communicator)
    subgroup: Callable         # (partition: list of rank lists) -> the group holding this rank
    buffer: Callable = lambda t: t   # t as the operations above take it fastest, made once outside the timed loop
    p2p_calls: Callable = None  # (send_t, recv_t, peer) -> (send(), recv()): blocking send and receive bound once,
                                # called without arguments in the timed loop (p2p latency, where each call shows)


class Works:
    """Several works waited on as one."""

    def __init__(self, works):
        self.works = works

    def wait(self):
        for w in self.works:
            w.wait()

    def is_completed(self):
        return all(w.is_completed() for w in self.works)


def drops(case_name, cfg):
    """Whether torch.distributed lacks config cfg's placement (left out, shown n/a)."""
    return not cfg.get("in_place") and case_name in NO_OUT_OF_PLACE


def _op(name):
    return getattr(dist.ReduceOp, OPS[name])


def all_gather_fn():
    """torch's single-tensor all_gather (renamed in torch 2.13)."""
    return getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor


def reduce_scatter_fn():
    return getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def exchange(send, recv, dst, src, group=None):
    """send to dst and receive from src at once; the works. The receive is posted first: Gloo stalls a pair's
    inbound data until its receive is posted (send first: 0.5 of a full-duplex link across netns nodes; receive
    first: 1.0). NCCL runs the batch as one group, in any order."""
    return dist.batch_isend_irecv([dist.P2POp(dist.irecv, recv, src, group), dist.P2POp(dist.isend, send, dst, group)])


def _sendrecv(send, recv, async_op=False):
    rank, n = dist.get_rank(), dist.get_world_size()
    works = Works(exchange(send, recv, (rank + 1) % n, (rank - 1) % n))
    if async_op:
        return works
    works.wait()
    return None


def _p2p(blocking, nonblocking):
    def op(t, peer, async_op=False):
        if async_op:
            return nonblocking(t, peer)
        blocking(t, peer)
        return None
    return op


def torch_primitives(device, local_rank=None):
    """torch.distributed's table on the default process group (NCCL when device is a GPU, else Gloo)."""
    all_gather, reduce_scatter = all_gather_fn(), reduce_scatter_fn()
    n = dist.get_world_size()

    def gather_floats(values):
        mine = torch.tensor(values, dtype=torch.float64, device=device)
        every = torch.empty(n * mine.numel(), dtype=torch.float64, device=device)
        all_gather(every, mine)
        return every.view(n, -1).cpu().tolist()

    def reduce_int(value, op):
        t = torch.tensor([int(value)], dtype=torch.int64, device=device)
        dist.all_reduce(t, op=_op(op))
        return int(t.item())

    def gather_object(obj):
        out = [None] * n
        dist.all_gather_object(out, obj)
        return out

    return Primitives(
        all_reduce=lambda t, op, group=None, async_op=False: dist.all_reduce(t, op=_op(op), group=group,
                                                                             async_op=async_op),
        all_gather=lambda out, inp, group=None, async_op=False: all_gather(out, inp, group=group, async_op=async_op),
        reduce_scatter=lambda out, inp, op, group=None, async_op=False: reduce_scatter(
            out, inp, op=_op(op), group=group, async_op=async_op),
        broadcast=lambda t, root, async_op=False: dist.broadcast(t, src=root, async_op=async_op),
        reduce=lambda t, root, op, async_op=False: dist.reduce(t, dst=root, op=_op(op), async_op=async_op),
        all_to_all=lambda out, inp, async_op=False: dist.all_to_all_single(out, inp, async_op=async_op),
        sendrecv=_sendrecv,
        send=_p2p(dist.send, dist.isend), recv=_p2p(dist.recv, dist.irecv),
        p2p_calls=lambda s, r, peer: (partial(dist.send, s, peer), partial(dist.recv, r, peer)),
        barrier=(lambda: dist.barrier(device_ids=[local_rank])) if device.type == "cuda" else dist.barrier,
        gather_floats=gather_floats, reduce_int=reduce_int, gather_object=gather_object,
        new_group=dist.new_group, subgroup=lambda members: dist.new_subgroups_by_enumeration(members)[0])
