"""`commbench pairs --simulate`: the pairs verdict (pairs_verdict.py) on synthetic link matrices, to measure it.

Each pairing's busbw is the healthy rate x the slower end's factor (a bad node: --bad-rate, others 1) x the link's
(a bad link: --bad-rate) x (1 + noise x a standard normal draw, at least 0.01). The rounds are the ones a real run
plays (commbench/cases/pairs.py: a round-robin up to 32 nodes, random pairings beyond), then the confirm pass the
verdict schedules. Per scenario (one bad node, one bad link, none) and noise: how often the bad one is named
(detection), how many healthy nodes or links are named per run (false accusations, also per node), the rounds
used (random + confirm rounds with a pairing in them) and the CPU time of one run.
"""
import time

from benchcore.lazy import lazy
from commbench.cases import pairs_verdict as pv
from commbench.cases.pairs import tournament

np = lazy("numpy", globals(), "np")

SCENARIOS = ("bad node", "bad link", "none")


def _measure(P, rng, factor, bad_link, bad_rate, noise):
    """busbw (healthy rate 1) of every pairing in P; one noise draw per pairing (both ends see the same)."""
    n = P.shape[1]
    me = np.broadcast_to(np.arange(n), P.shape)
    peer = np.maximum(P, 0)
    draw = rng.standard_normal(P.shape)
    low = np.minimum(me, peer)
    W = np.minimum(factor[me], factor[peer]) * np.maximum(0.01, 1 + noise * np.take_along_axis(draw, low, axis=1))
    if bad_link:
        x, y = bad_link
        W = np.where(((me == x) & (P == y)) | ((me == y) & (P == x)), W * bad_rate, W)
    return np.where(P >= 0, W, np.nan)


def one_run(n, rounds, scenario, noise, bad_rate, min_fraction, seed):
    """(named as truly bad, falsely named, rounds used, the random rounds measured the bad link)."""
    rng = np.random.default_rng(seed)
    factor, bad_link, truth = np.ones(n), None, set()
    if scenario == "bad node":
        bad = int(rng.integers(n))
        factor[bad], truth = bad_rate, {bad}
    elif scenario == "bad link":
        bad_link = tuple(sorted(int(x) for x in rng.choice(n, 2, replace=False)))
        truth = {bad_link}
    P = np.array([[-1 if p is None else p for p in row] for row in tournament(n, rounds, seed)], dtype=np.int64)
    W = _measure(P, rng, factor, bad_link, bad_rate, noise)
    sus = pv.find_suspects(P, W, min_fraction)
    C = pv.confirm_schedule(n, sus, seed=seed)
    v = pv.judge(P, W, C, _measure(C, rng, factor, bad_link, bad_rate, noise), min_fraction)
    named = {s for s, _ in v.bad_nodes} | {link for link, _ in v.bad_links}
    met = bool(bad_link) and bool((P[:, bad_link[0]] == bad_link[1]).any())
    return len(named & truth), len(named - truth), len(P) + int((C >= 0).any(axis=1).sum()), met


def simulate(n, noise, scenario, trials, rounds, bad_rate, min_fraction, seed=1):
    """One row of the table."""
    found = false = met = 0
    used = []
    t0 = time.process_time()
    for t in range(trials):
        hit, wrong, r, saw = one_run(n, rounds, scenario, noise, bad_rate, min_fraction, seed * 1_000_003 + t)
        found, false, met = found + hit, false + wrong, met + saw
        used.append(r)
    cpu = (time.process_time() - t0) / trials
    return {"nodes": n, "noise": noise, "scenario": scenario, "runs": trials,
            "detection": found / trials if scenario != "none" else None,
            "link_measured": met / trials if scenario == "bad link" else None,
            "false_per_run": false / trials, "false_per_node": false / trials / n,
            "rounds_mean": sum(used) / trials, "rounds_max": max(used), "cpu_s_per_run": cpu}


def table(nodes, noises, trials, rounds_of, bad_rate, min_fraction, scenarios=SCENARIOS):
    return [simulate(n, noise, scenario, trials, rounds_of(n), bad_rate, min_fraction)
            for n in nodes for noise in noises for scenario in scenarios]
