"""What every strategy shares: the payload T each rank ends up holding, who owns which slice of it, the
exact check against T, and the helpers a strategy row uses (places, size check, footprint, one-collective model).
"""
from benchcore.errors import UserError
from benchcore.lazy import lazy
from commbench.cases.case import TOTAL, Timed
from commbench.cases.collectives import CHUNK, COLLECTIVES, DTYPES, pieces, poison_value
from commbench.model.alphabeta import Phase

torch = lazy("torch", globals())

FILL_PERIOD = 251  # T[i] = i % 251 + 1 (fewer in types that hold fewer integers): a misplaced element shows


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

    def tile(self, length, like):
        """T[0:length + period]: every piece of T up to length elements is a slice of it (T repeats every period
        elements), so a fill or a check builds T once, not once a piece (1.5x-4x faster at 256M on a 2-core VM)."""
        return self.truth(0, min(CHUNK, length) + self.period, like)

    def write_truth(self, buf, start, stop, at=None):
        """buf[at:at + stop - start] = T[start:stop] (at defaults to start), a piece at a time."""
        at = start if at is None else at
        tile = self.tile(stop - start, buf)
        for lo, hi in pieces(stop - start):
            off = (start + lo) % self.period
            buf[at + lo:at + hi] = tile[off:off + hi - lo]

    def wrong(self, result):
        wrong, tile = 0, self.tile(self.count, result)
        for lo, hi in pieces(self.count):
            got, want = result[lo:hi], tile[lo % self.period:lo % self.period + hi - lo]
            if got.element_size() == 1 and got.is_floating_point():  # fp8 has no comparison kernels everywhere
                got, want = got.float(), want.float()
            if not torch.equal(got, want):   # equal pieces (nearly all) are not counted: 5x faster on a CPU
                wrong += int((got != want).sum().item())
        return wrong

    def poison(self, *bufs):
        for buf in bufs:
            buf.fill_(poison_value(self.type_name))

    def timed(self, phases, factors, refill, result, poison=lambda: None, **more):
        """A Timed whose check counts the elements of result() that differ from T."""
        return Timed(phases, factors, refill, poison, result, lambda: (self.wrong(result()), {}), **more)


def places(opts):
    return [p == "in" for p in ("out", "in") if p in opts.places]


def payload_size(size, elt, n):
    if size % elt:
        raise UserError(f"payload {size} B is not a multiple of the {elt} B element")


def padded(count, n):
    return ceil_div(count, n) * n


def one(name, collective):
    """The model of a strategy that is one collective of the payload N (ring: all_reduce; plain: all_gather):
    model(cfg, N, shape, backend) -> {phase: Phase}, as every strategy's model."""
    return lambda cfg, size, shape, backend: {
        TOTAL: Phase(factor(name, shape.n), collective(size, shape, backend), nccl=name)}
