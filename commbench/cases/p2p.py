"""Point-to-point between two ranks in the style of the OSU Micro-Benchmarks (osu_latency, osu_bw, osu_bibw).

One registry row per mode, timed by the one timed path on any transport (send/recv of the table in
commbench/transports/torch_dist.py: torch.distributed or mpi4py):

  latency  ping-pong: rank 0 sends, rank 1 receives and sends back; time_us is half the round trip
           (one run = two one-way messages), as osu_latency reports.
  bw       rank 0 posts a window of W non-blocking sends of one buffer, rank 1 W receives into one
           buffer, then rank 1 sends a 4-byte ack; time_us is the time per message and algbw the
           bandwidth, as osu_bw (bytes x W x iterations / time).
  bibw     both ranks post W receives and W sends at once; algbw is per direction, busbw both
           directions together: osu_bibw's number.

OSU's defaults, which `commbench p2p` uses unless -n/-w are given: window 64; sizes 1 B .. 4 MiB;
up to 8 KiB ("small") latency 10000 iterations after 100 warm-up, bw/bibw 100 windows after 10;
above 8 KiB latency 1000 after 10, bw/bibw 20 windows after 2. Like OSU, every message of a window
uses the same send and the same receive buffer. Bytes (uint8, OSU's MPI_CHAR); exactly 2 ranks.
The check: the receive buffer holds the peer's fill pattern.
"""
from benchcore.errors import UserError
from benchcore.lazy import lazy
from commbench.cases.case import TOTAL, Case, Timed
from commbench.cases.collectives import count_wrong, fill_pattern, fill_values, poison_value
from commbench.model import alphabeta as model
from commbench.model.alphabeta import Phase

torch = lazy("torch", globals())

WINDOW = 64              # OSU's WINDOW_SIZE_LARGE
LARGE = 8192             # OSU's LARGE_MESSAGE_SIZE: above it, the large-message iteration counts
OSU_ITERS = {            # mode kind -> (small: iterations, warm-up), (large: iterations, warm-up)
    "latency": ((10000, 100), (1000, 10)),
    "window": ((100, 10), (20, 2)),
}
MODES = ("latency", "bw", "bibw")
FACTOR = {"latency": 1.0, "bw": 1.0, "bibw": 2.0}


def osu_counts(mode, size):
    """(iterations, warm-up) OSU runs mode at size bytes with."""
    small, large = OSU_ITERS["latency" if mode == "latency" else "window"]
    return small if size <= LARGE else large


def case_name(mode):
    return f"p2p_{mode}"


def _build(mode):
    def build(ctx, cfg, count, dtype, shared):
        comm, rank, window = ctx.comm, ctx.rank, cfg["window"]
        peer = 1 - rank
        send, recv, ack = (torch.empty(k, dtype=dtype, device=ctx.device) for k in (count, count, 4))
        sb, rb, ab = map(comm.buffer, (send, recv, ack))  # what send/recv take fastest
        mine, theirs = fill_values(rank, 2, cfg["dtype"]), fill_values(peer, 2, cfg["dtype"])

        out, back = comm.p2p_calls(sb, rb, peer)   # bound once: at 8 B every call in the loop shows

        def ping(a):   # rank 0: out and back
            out()
            back()

        def pong(a):
            back()
            out()

        def bw(a):
            if rank == 0:
                works = [comm.send(sb, peer, async_op=True) for _ in range(window)]
            else:
                works = [comm.recv(rb, peer, async_op=True) for _ in range(window)]
            for w in works:
                w.wait()
            (comm.recv if rank == 0 else comm.send)(ab, peer)

        def bibw(a):
            works = [comm.recv(rb, peer, async_op=True) for _ in range(window)]
            works += [comm.send(sb, peer, async_op=True) for _ in range(window)]
            for w in works:
                w.wait()

        receives = mode != "bw" or rank == 1
        return Timed(
            phases={TOTAL: {"latency": pong if rank else ping, "bw": bw, "bibw": bibw}[mode]},
            factors={TOTAL: FACTOR[mode]},
            refill=lambda: fill_pattern(send, mine),
            poison=lambda: recv.fill_(poison_value(cfg["dtype"])),
            result=lambda: recv,
            check=lambda: (count_wrong(recv, [(0, count, theirs, 0)], dtype, ctx.device) if receives else 0, {}),
            blocking=True, per_run=2 if mode == "latency" else window, departures=False)
    return build


def _check_size(size, elt, n):
    if n != 2:
        raise UserError(f"p2p measures one link between exactly 2 ranks, not {n}: --nodes 2 --nproc-per-node 1 "
                        "(two nodes) or --nproc-per-node 2 (one)")
    if size % elt:
        raise UserError(f"p2p size {size} B is not a multiple of the {elt} B element")


def _case(mode):
    return Case(case_name(mode), "p2p", case_name(mode), (TOTAL,), _build(mode),
                lambda opts, dtype: [{"case": case_name(mode), "in_place": False,
                                     "window": 1 if mode == "latency" else WINDOW}],
                check_size=_check_size,
                footprint=lambda cfg, count, n, elt: 2 * count * elt,
                model=lambda cfg, size, shape, backend: {
                    TOTAL: Phase(FACTOR[mode], model.sendrecv(size, shape, backend))},
                fields={"window": "p2p: messages in flight per window (OSU's window size; 1 for latency)"})


P2P_CASES = {case_name(mode): _case(mode) for mode in MODES}
