"""The pair case behind `commbench pairs`: one rank per node, nodes paired off in rounds.

A config is one round and one operation (the case gives one per operation; `commbench pairs` adds the
rounds' pairings): every pair of the round runs it at once on a 2-rank
process group of its own (sendrecv: both send to and receive from each other, busbw factor 1;
all_reduce of 2 ranks: factor 2(n-1)/n = 1), timed by the one timed path. Its records carry each
rank's own time (`rank_time_us`) and host, from which commbench/commands/pairs.py makes one record per pair.
Rounds are a round-robin tournament (the circle method): every pair meets once in N-1 rounds (N
even; N rounds with a bye when odd), for N <= 32; beyond that, rounds are random pairings.
"""
import random

from benchcore.errors import UserError
from benchcore.lazy import lazy
from commbench.cases.case import TOTAL, Case, Timed
from commbench.cases.collectives import count_wrong, fill_pattern, fill_values, poison_value
from commbench.model import alphabeta as model
from commbench.model.alphabeta import Phase
from commbench.transports.torch_dist import exchange

dist = lazy("torch.distributed", globals(), "dist")
torch = lazy("torch", globals())

FULL_COVERAGE_UP_TO = 32
KINDS = ("sendrecv", "all_reduce")


def tournament(n, rounds=None, seed=0):
    """[partner per rank (None: a bye)] for each round."""
    if n <= FULL_COVERAGE_UP_TO:
        slots = list(range(n)) + ([None] if n % 2 else [])
        m = len(slots)
        schedule = []
        for _ in range(m - 1):
            partner = [None] * n
            for i in range(m // 2):
                a, b = slots[i], slots[m - 1 - i]
                if a is not None and b is not None:
                    partner[a], partner[b] = b, a
            schedule.append(partner)
            slots = [slots[0], slots[-1]] + slots[1:-1]   # keep the first, rotate the rest
    else:
        schedule, rng = [], random.Random(seed)
        for _ in range(rounds or 8):
            order = list(range(n))
            rng.shuffle(order)
            partner = [None] * n
            for a, b in zip(order[::2], order[1::2]):
                partner[a], partner[b] = b, a
            schedule.append(partner)
    if rounds:  # more rounds than a tournament: play it again
        schedule = [schedule[i % len(schedule)] for i in range(rounds)]
    return schedule


def pair_groups(ctx, cfgs):
    """A 2-rank process group for every pair any round uses (created by every rank, in one order)."""
    pairs = sorted({tuple(sorted((r, p))) for cfg in cfgs for r, p in enumerate(cfg["partner"]) if p is not None})
    return {pair: dist.new_group(list(pair)) for pair in pairs}


def _build(ctx, cfg, count, dtype, groups):
    rank, partner, kind = ctx.rank, cfg["partner"][ctx.rank], cfg["kind"]
    send = torch.empty(count, dtype=dtype, device=ctx.device)
    recv = send if kind == "all_reduce" else torch.empty(count, dtype=dtype, device=ctx.device)
    mine = fill_values(rank, 2, cfg["dtype"])
    group = groups[tuple(sorted((rank, partner)))] if partner is not None else None

    def run(a):
        if group is None:   # a bye this round
            return None
        if kind == "all_reduce":
            return dist.all_reduce(send, group=group, async_op=a)
        for work in exchange(send, recv, partner, partner, group):
            work.wait()
        return None

    def expected():
        if group is None:
            return []
        theirs = fill_values(partner, 2, cfg["dtype"])
        values = [a + b for a, b in zip(mine, theirs)] if kind == "all_reduce" else theirs
        return [(0, count, values, 0)]
    return Timed({TOTAL: run}, {TOTAL: 1.0}, lambda: fill_pattern(send, mine),
                 lambda: recv.fill_(poison_value(cfg["dtype"])), lambda: recv,
                 lambda: (count_wrong(recv, expected(), dtype, ctx.device), {}), per_rank=True, blocking=True)


def _pair_model(cfg, size, shape, backend):
    """Each pair alone: two ranks on two nodes (one per node), sendrecv or a 2-rank all_reduce (factor 1)."""
    pair = model.Shape(2, 1, 2)
    return {TOTAL: Phase(1.0, (model.all_reduce if cfg.get("kind") == "all_reduce" else model.sendrecv)(size, pair,
                                                                                                   backend))}


def _whole_elements(size, elt, n):
    if size % elt:
        raise UserError(f"--size {size} B is not a whole number of {elt} B elements")


# its records' fields: the rounds' (each rank's time and host), and the per-pair records commbench pairs makes of them
FIELDS = {"rank_time_us": "pairs: every rank's own median iteration time", "rank_hosts": "pairs: every rank's host",
          "round": "pairs: the round of the tournament", "kind": "pairs: the operation (sendrecv, all_reduce)",
          "partner": "pairs: each rank's partner in the round (null: a bye)",
          "host": "pairs: one end of the pair", "peer_host": "pairs: the other end"}
PAIR_CASES = {"pair": Case("pair", "pairs", "sendrecv", (TOTAL,), _build,
                           lambda opts, dtype: [{"case": "pair", "kind": kind, "in_place": False} for kind in KINDS],
                           describe=lambda cfg: " round ".join(str(cfg[k]) for k in ("kind", "round") if k in cfg),
                           setup=pair_groups,
                           check_size=_whole_elements, model=_pair_model,
                           footprint=lambda cfg, count, n, elt: 2 * count * elt, fields=FIELDS)}
