"""The pairs verdict, in two passes, on node indices (numpy; the same code judges a real run and a simulated one).

1. Random rounds (a round-robin up to 32 nodes): every node meets a few partners. A link is the best of its
   pairings; a node's rate the median of its links (of 2 links, the higher). The healthy rate is the median node's
   rate, then the median pairing between the nodes that are not slow against it. A node whose rate is below
   min_fraction of it is a suspect node; a link below it whose ends are not suspects (a slow partner explains the
   slow links it is on) makes both its ends suspects of a bad link.
   What this tells apart, from 3 nodes up (one fault among healthy nodes): a slow node is slow on all of its
   links: a node-level fault (3 nodes: 2 of the 3 links slow, the third, between the other two, healthy; 4 nodes:
   half the links, so the median link is no yardstick, the median node is). A slow link is one of each of its
   ends' links, each of which has healthy ones: a link-level fault (3 nodes: 1 of 3 links; each end's other link
   is healthy, so neither end is blamed). With 2 nodes one link is all there is: no fault can be placed.
2. The confirm pass (a few more rounds): every suspect against nodes already known good (not a suspect, no slow
   link), and each slow link retested. A node whose median against the known-good nodes is below the fraction
   is a bad node; a link slow in every retest, between two nodes that are fine against the known-good ones, is a
   bad link; every other suspect is cleared.
The confidence of an accusation: 1 - the chance that something exactly at the threshold would show evidence this
low, with this run's link noise (the robust spread, 1.4826 x MAD, of the links between known-good nodes), over
the number of suspects the confirm pass tested (Bonferroni): a one-sided normal test on the confirm pairings.
Matrices are (rounds, nodes): partner index (-1: none) and the busbw of that pairing (nan: none).
"""
import math
import warnings
from dataclasses import dataclass, field

from benchcore.lazy import lazy

np = lazy("numpy", globals(), "np")

CONFIRM_ROUNDS = 4   # rounds of the confirm pass
RETESTS = 2          # times a slow link is measured again in it


def pair_busbw(size, t_a, t_b):
    """GB/s of a pairing from both ends' times (us): the pair ends when both ends are done (sendrecv: factor 1)."""
    return size / max(t_a, t_b) / 1e3


@dataclass
class Suspects:
    healthy: float                     # the median link (busbw)
    noise: float                       # relative spread of the links between known-good nodes
    nodes: list                        # suspect nodes (their links' median is slow)
    links: list                        # slow links (a, b), a < b, between nodes that are not suspects; slowest first
    good: list                         # known-good nodes


def _links(P, W):
    """(a, b, busbw) of every pairing once (a < b)."""
    r, a = np.nonzero((P >= 0) & (P > np.arange(P.shape[1])))
    return a, P[r, a], W[r, a]


def _node_rates(n, a, b, best):
    """Each node's rate (nan: never paired): the median of its links; of 2 links, the higher one. One slow link of a
    node's 2 is as much the link's fault as the node's (3 nodes: one slow node puts its 2 links below, one slow link
    puts 1 of each end's 2); their mean would blame both ends, the higher one blames neither: the link is judged."""
    ends, rates = np.r_[a, b], np.r_[best, best]
    order = np.argsort(ends, kind="stable")
    ends, rates = ends[order], rates[order]
    degree = np.bincount(ends, minlength=n)
    table = np.full((n, max(1, int(degree.max()))), np.nan)
    table[ends, np.arange(len(ends)) - np.repeat(np.cumsum(degree) - degree, degree)] = rates
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)   # a node never paired: an empty row, nan
        return np.where(degree == 2, np.nanmax(table, axis=1), np.nanmedian(table, axis=1))


def find_suspects(P, W, min_fraction):
    P, W = np.asarray(P), np.asarray(W, dtype=float)
    n = P.shape[1]
    a, b, bw = _links(P, W)
    if not len(bw):
        return Suspects(math.nan, math.nan, [], [], [])
    paired = (P >= 0).any(axis=0)
    # the best of a pair's pairings is the link (other load only ever slows one)
    key = a * n + b
    order = np.argsort(key, kind="stable")
    first = np.flatnonzero(np.r_[True, np.diff(key[order]) != 0])
    best, ends = np.maximum.reduceat(bw[order], first), (a[order][first], b[order][first])
    node_rate = _node_rates(n, *ends, best)
    # the median node's rate: one slow node among 3 is on 2 of the 3 links, among 4 on half, which pulls the median
    # link down (a node at 0.58 of the others read 0.73 of it), but the median node is a healthy one
    healthy = float(np.median(node_rate[paired]))
    slow_node = node_rate < min_fraction * healthy
    clean = ~slow_node[a] & ~slow_node[b]
    if clean.any():   # the yardstick: the median pairing between nodes that are not slow
        healthy = float(np.median(bw[clean]))
        slow_node = node_rate < min_fraction * healthy
    a, b = ends
    low = (best < min_fraction * healthy) & ~slow_node[a] & ~slow_node[b]
    slowest = np.argsort(best[low], kind="stable")
    links = [(int(x), int(y)) for x, y in zip(a[low][slowest], b[low][slowest])]
    good = paired & ~slow_node
    good[a[low]] = good[b[low]] = False
    between = good[a] & good[b]
    spread = best[between] / healthy if between.any() else best / healthy
    noise = float(1.4826 * np.median(np.abs(spread - np.median(spread))))
    return Suspects(healthy, noise, [int(i) for i in np.flatnonzero(slow_node)], links,
                    [int(i) for i in np.flatnonzero(good)])


def tested(sus):
    """Every node the confirm pass tests: suspect nodes, then the ends of slow links."""
    return list(dict.fromkeys(sus.nodes + [x for link in sus.links for x in link]))


def confirm_schedule(n, sus, rounds=CONFIRM_ROUNDS, retests=RETESTS, seed=0):
    """(rounds, n) partners of the confirm pass: each slow link retested `retests` times (slowest first, where both
    ends are free), every other suspect against a known-good node, a different one each round."""
    rng = np.random.default_rng(seed)
    P = np.full((rounds, n), -1, dtype=np.int64)
    todo = {link: retests for link in sus.links}
    suspects = np.array(tested(sus), dtype=np.int64)
    good = rng.permutation(np.array(sus.good, dtype=np.int64))
    offset = turn = 0
    for r in range(rounds):
        for (x, y), left in todo.items():
            if left and P[r, x] < 0 and P[r, y] < 0:
                P[r, x], P[r, y] = y, x
                todo[(x, y)] -= 1
        free = suspects[P[r, suspects] < 0]
        m = min(len(free), len(good))
        if not m:
            continue
        free = np.roll(free, -turn)[:m]   # fewer known-good nodes than suspects: each suspect in its turn
        partners = good[(offset + np.arange(m)) % len(good)]
        offset, turn = offset + m, turn + m
        P[r, free], P[r, partners] = partners, free
    return P


@dataclass
class Verdict:
    healthy: float
    noise: float
    bad_nodes: list = field(default_factory=list)    # [(node, evidence)]
    bad_links: list = field(default_factory=list)    # [((a, b), evidence)]
    cleared: list = field(default_factory=list)      # suspects the confirm pass found fine
    untested: list = field(default_factory=list)     # suspects with no pairing against a known-good node
    suspects: int = 0


def confidence(ratios, min_fraction, noise, tests):
    """1 - P(evidence this low | the truth exactly at min_fraction), over `tests` tests (see the module's text)."""
    spread = max(noise, 0.01) / math.sqrt(len(ratios))   # a spread under 1 % is not believed
    z = (min_fraction - float(np.mean(ratios))) / spread
    return max(0.0, 1.0 - 0.5 * math.erfc(z / math.sqrt(2)) * max(tests, 1))


def judge(P, W, C, CW, min_fraction):
    """The Verdict of random rounds (P, W) and their confirm pass (C, CW); evidence: peers, busbw, and the
    median ratio to the healthy link, with a confidence."""
    sus = find_suspects(P, W, min_fraction)
    out = Verdict(sus.healthy, sus.noise, suspects=len(tested(sus)))
    if not out.suspects:
        return out
    C, CW = np.asarray(C), np.asarray(CW, dtype=float)
    good = np.zeros(C.shape[1], dtype=bool)
    good[sus.good] = True
    fine, slow_nodes, slow_links = {}, set(sus.nodes), set(sus.links)
    P, W = np.asarray(P), np.asarray(W, dtype=float)
    for s in tested(sus):
        # against known-good nodes: the confirm pass, and the random rounds' pairings that did not make s a suspect
        rows = np.flatnonzero((C[:, s] >= 0) & good[np.maximum(C[:, s], 0)])
        before = [] if s in slow_nodes else [r for r in np.flatnonzero((P[:, s] >= 0) & good[np.maximum(P[:, s], 0)])
                                             if tuple(sorted((s, int(P[r, s])))) not in slow_links]
        if not len(rows) + len(before):
            out.untested.append(s)
            continue
        peers, busbw = np.r_[P[before, s], C[rows, s]], np.r_[W[before, s], CW[rows, s]]
        ratios = busbw / sus.healthy
        fine[s] = _rate(peers, ratios) >= min_fraction
        if not fine[s]:
            out.bad_nodes.append((s, _evidence(peers, busbw, ratios, min_fraction, sus, out.suspects)))
        elif s in slow_nodes and len(set(peers.tolist())) == 2:   # 3 nodes: fine on one of its 2 links; the other,
            # slow in every pairing, is the fault
            slow_links |= {tuple(sorted((s, int(p)))) for p in set(peers.tolist())
                           if (ratios[peers == p] < min_fraction).all()}
    for x, y in sorted(slow_links - set(sus.links)):
        rows = np.flatnonzero(C[:, x] == y)
        ratios = CW[rows, x] / sus.healthy
        if len(rows) and fine.get(x, good[x]) and fine.get(y, good[y]) and (ratios < min_fraction).all():
            out.bad_links.append(((x, y), _evidence([y] * len(rows), CW[rows, x], ratios, min_fraction, sus,
                                                    out.suspects)))
    for x, y in sus.links:
        rows = np.flatnonzero(C[:, x] == y)
        ratios = CW[rows, x] / sus.healthy
        if len(rows) and fine.get(x) and fine.get(y) and (ratios < min_fraction).all():
            out.bad_links.append(((x, y), _evidence([y] * len(rows), CW[rows, x], ratios, min_fraction, sus,
                                                    out.suspects)))
    named = {s for s, _ in out.bad_nodes} | {x for link, _ in out.bad_links for x in link}
    out.cleared = [s for s in tested(sus) if s not in named and s not in out.untested]
    return out


def _rate(peers, ratios):
    """A tested node's ratio to the healthy rate, as _node_rates has it: the median of its pairings; against 2
    partners only, the better partner's best pairing."""
    partners = sorted(set(peers.tolist()))
    if len(partners) == 2:
        return max(float(ratios[peers == p].max()) for p in partners)
    return float(np.median(ratios))


def _evidence(peers, busbw, ratios, min_fraction, sus, tests):
    return {"pairings": len(ratios), "peers": [int(p) for p in peers], "busbw_gbps": [float(b) for b in busbw],
            "median_ratio": float(np.median(ratios)), "healthy_busbw_gbps": sus.healthy,
            "confidence": confidence(ratios, min_fraction, sus.noise, tests)}
