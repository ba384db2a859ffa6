"""The pair case behind `commbench pairs`: one rank per node, nodes paired off in rounds.

A config is one round and one operation (the case gives one per operation; `commbench pairs` adds the
rounds' pairings): every pair of the round runs it at once on a 2-rank
process group of its own (sendrecv: both send to and receive from each other, busbw factor 1;
all_reduce of 2 ranks: factor 2(n-1)/n = 1), timed by the one timed path. Its records carry each
rank's own time (`rank_time_us`) and host, from which commbench/commands/pairs.py makes one record per pair.
Rounds are a round-robin tournament (the circle method): every pair meets once in N-1 rounds (N
even; N rounds with a bye when odd), for N <= 32; beyond that, rounds are random pairings. Then the confirm
pass (pairs_verdict.py): configs with a `confirm` index and no partner; the first one's build judges the rounds
before it (every rank holds every rank's times: `summary` keeps them) and every rank computes the same confirm
schedule from them, so the suspects meet known-good nodes without a second launch.
"""
import random

from benchcore.errors import UserError
from benchcore.lazy import lazy
from commbench.cases import pairs_verdict as pv
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
    """The state the rounds share: a 2-rank process group for every pair any round uses (created by every rank,
    in one order), the random rounds' sendrecv times as they end, the confirm pass' schedule once known."""
    pairs = sorted({tuple(sorted((r, p))) for cfg in cfgs for r, p in enumerate(cfg.get("partner") or [])
                    if p is not None})
    return {"groups": _new_groups(pairs, {}), "seen": [], "confirm": None, "n": ctx.world_size}


def _new_groups(pairs, groups):
    for pair in pairs:   # every rank, in the same order (a group is made by the whole world)
        if pair not in groups:
            groups[pair] = dist.new_group(list(pair))
    return groups


def _keep(shared, cfg):
    """summary of a random round's sendrecv record: its pairings' busbw, kept for the confirm pass."""
    def keep(recs):
        rec = recs[TOTAL]
        times = rec.get("rank_time_us")
        if times:
            shared["seen"].append([(p, pv.pair_busbw(rec["size_bytes"], times[r], times[p]) if p is not None else None)
                                   for r, p in enumerate(cfg["partner"])])
        return {}
    return keep


def confirm_partners(shared, j, min_fraction):
    """Partner per rank (None: a bye) in confirm round j, from the random rounds seen (the same on every rank)."""
    if shared["confirm"] is None:
        np = pv.np
        seen = shared["seen"]
        P = np.array([[-1 if p is None else p for p, _ in row] for row in seen], dtype=np.int64)
        P = P.reshape(-1, shared["n"])
        W = np.array([[np.nan if b is None else b for _, b in row] for row in seen], dtype=float).reshape(P.shape)
        C = pv.confirm_schedule(shared["n"], pv.find_suspects(P, W, min_fraction))
        shared["confirm"] = [[None if p < 0 else int(p) for p in row] for row in C]
        _new_groups(sorted({tuple(sorted((r, p))) for row in shared["confirm"] for r, p in enumerate(row)
                            if p is not None}), shared["groups"])
    return shared["confirm"][j]


def _build(ctx, cfg, count, dtype, shared):
    kind, groups = cfg["kind"], shared["groups"]
    confirm = cfg.get("confirm")
    partners = cfg["partner"] if confirm is None else confirm_partners(shared, confirm, cfg["min_fraction"])
    rank, partner = ctx.rank, partners[ctx.rank]
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
                 lambda: (count_wrong(recv, expected(), dtype, ctx.device), {}), per_rank=True, blocking=True,
                 fields=lambda phase: {} if confirm is None else {"partner": partners},
                 summary=_keep(shared, cfg) if confirm is None and kind == "sendrecv" else None)


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
          "confirm": "pairs: the round of the confirm pass (suspects against known-good nodes; null: a random round)",
          "min_fraction": "pairs: the fraction of the median link below which a node or link is slow",
          "host": "pairs: one end of the pair", "peer_host": "pairs: the other end"}
PAIR_CASES = {"pair": Case("pair", "pairs", "sendrecv", (TOTAL,), _build,
                           lambda opts, dtype: [{"case": "pair", "kind": kind, "in_place": False} for kind in KINDS],
                           describe=lambda cfg: " round ".join(str(cfg[k]) for k in ("kind", "round") if k in cfg),
                           setup=pair_groups,
                           check_size=_whole_elements, model=_pair_model,
                           footprint=lambda cfg, count, n, elt: 2 * count * elt, fields=FIELDS)}
