"""commbench pairs on this machine: the tournament, the verdict rules, and an emulated run end to end."""
import itertools

import numpy as np
import pytest

from commbench.cases import pairs_simulate
from commbench.cases import pairs_verdict as pv
from commbench.cases.pairs import tournament
from tests.conftest import assert_one_line_error, read_records, run_tool


@pytest.mark.parametrize("n", [2, 3, 4, 7, 8, 32])
def test_a_round_robin_meets_every_pair_once(n):
    rounds = tournament(n)
    met = [tuple(sorted((a, b))) for partner in rounds for a, b in enumerate(partner) if b is not None and a < b]
    assert sorted(met) == list(itertools.combinations(range(n), 2))
    assert len(rounds) == (n - 1 if n % 2 == 0 else n)
    for partner in rounds:   # symmetric, and at most one bye
        assert all(partner[b] == a for a, b in enumerate(partner) if b is not None)
        assert sum(p is None for p in partner) == n % 2


def test_beyond_32_nodes_rounds_are_random_pairings():
    rounds = tournament(40, rounds=5)
    assert len(rounds) == 5 and all(sorted(p) == sorted(set(p)) for p in rounds)


def schedule(n, rounds=None):
    return np.array([[-1 if p is None else p for p in row] for row in tournament(n, rounds)], dtype=np.int64)


def measured(P, rate):
    """busbw of every pairing in P from rate(a, b) (nan: a bye)."""
    return np.array([[rate(a, b) if b >= 0 else np.nan for a, b in enumerate(row)] for row in P])


def two_passes(n, rate, min_fraction=0.7):
    P = schedule(n)
    W = measured(P, rate)
    C = pv.confirm_schedule(n, pv.find_suspects(P, W, min_fraction))
    return P, C, pv.judge(P, W, C, measured(C, rate), min_fraction)


def test_a_slow_node_is_told_from_a_slow_link_by_the_confirm_pass():
    jitter = lambda a, b: 1 + 0.01 * ((a * 7 + b * 13) % 5)  # noqa: E731  a symmetric spread of a few per cent
    P, C, v = two_passes(8, lambda a, b: (0.3 if 5 in (a, b) else 1.0) * jitter(min(a, b), max(a, b)))
    assert [s for s, _ in v.bad_nodes] == [5] and v.bad_links == [] and v.untested == []
    (_, ev), = v.bad_nodes
    # its evidence: the confirm pass against known-good nodes only, each a third of the median link
    assert ev["pairings"] == pv.CONFIRM_ROUNDS and 5 not in ev["peers"] and ev["median_ratio"] < 0.35
    assert ev["confidence"] > 0.99 and len(set(ev["peers"])) == len(ev["peers"])
    # one slow cable between two good nodes: both ends are suspects, fine against the others, the link slow again
    P, C, v = two_passes(8, lambda a, b: (0.3 if {a, b} == {2, 6} else 1.0) * jitter(min(a, b), max(a, b)))
    assert v.bad_nodes == [] and [link for link, _ in v.bad_links] == [(2, 6)] and v.cleared == []
    (_, ev), = v.bad_links
    assert ev["pairings"] == pv.RETESTS and ev["peers"] == [6] * pv.RETESTS and ev["confidence"] > 0.99
    assert sorted({int(p) for p in C[:, 2] if p >= 0} - {6}) and (C[:, 6] >= 0).any()   # both ends retested
    P, C, v = two_passes(8, lambda a, b: jitter(min(a, b), max(a, b)))   # every link alike: nobody
    assert (v.bad_nodes, v.bad_links, v.suspects) == ([], [], 0) and (C < 0).all()


def test_a_slow_link_that_is_noise_is_cleared_when_retested():
    first = {}

    def rate(a, b):   # 0-3 slow the first time they meet only (another job's burst), fine from then on
        slow = {a, b} == {0, 3} and not first.get((a, b))
        first[(a, b)] = first[(b, a)] = True
        return 0.3 if slow else 1.0
    P, C, v = two_passes(8, rate)
    assert v.suspects == 2 and v.bad_nodes == [] and v.bad_links == [] and sorted(v.cleared) == [0, 3]


def test_with_more_suspects_than_known_good_nodes_each_is_judged():
    """8 nodes, 0-1 a slow cable, 2-3 and 4-5 slow the first time only (a busy machine): 6 suspects, 2 known good
    nodes; every suspect takes its turn against them (and its round-robin pairings with them count): the cable is
    named, the others cleared."""
    first = {}

    def rate(a, b):
        slow = {a, b} == {0, 1} or ({a, b} in ({2, 3}, {4, 5}) and not first.get((a, b)))
        first[(a, b)] = first[(b, a)] = True
        return 0.3 if slow else 1.0
    P, C, v = two_passes(8, rate)
    assert v.suspects == 6 and [link for link, _ in v.bad_links] == [(0, 1)] and v.bad_nodes == []
    assert sorted(v.cleared) == [2, 3, 4, 5] and v.untested == []
    # the confirm rounds the retests leave (2) x the known-good nodes (2): four suspects met one, no one twice
    met = [int(((C[:, s] == 6) | (C[:, s] == 7)).sum()) for s in range(6)]
    assert sum(met) == 4 and max(met) == 1, met


def test_random_rounds_as_measured_across_4_netns_nodes():
    """d at a third of the rate, a-c slowed by the machine in both its rounds (as measured): d is the suspect."""
    hosts = "abcd"
    seen = {("a", "d"): .0152, ("b", "c"): .0474, ("a", "c"): .0343, ("b", "d"): .0154, ("a", "b"): .0476,
            ("c", "d"): .0146}
    P = schedule(4)
    W = measured(P, lambda a, b: seen[tuple(sorted((hosts[a], hosts[b])))])
    sus = pv.find_suspects(P, W, 0.7)
    assert sus.nodes == [3] and sus.links == [] and sus.good == [0, 1, 2]
    assert sus.healthy == .0474   # the median link without d's: d's third is told as a third, not 0.45


def test_the_simulation_meets_its_target_at_1024_nodes():
    """The issue's target: one bad node at 0.5 of the rate among 1,024 nodes, 10 % link noise: >= 99 % found,
    <= 0.1 % of the nodes falsely accused, in 4 random rounds + the confirm pass (the same verdict code)."""
    row = pairs_simulate.simulate(1024, 0.1, "bad node", 100, 4, 0.5, 0.7)
    assert row["detection"] >= 0.99 and row["false_per_node"] <= 0.001, row
    assert row["rounds_max"] <= 4 + pv.CONFIRM_ROUNDS
    none = pairs_simulate.simulate(1024, 0.1, "none", 50, 4, 0.5, 0.7)
    assert none["false_per_node"] <= 0.001, none


@pytest.mark.parametrize("n", [3, 4, 5, 8])
def test_a_small_allocation_names_one_slow_node_and_one_slow_link(n):
    """Issue 46 P1: from 3 nodes up (3: the slow node is on 2 of the 3 links, the slow link 1 of 3), a node or a
    link at a third of the rate is named and nothing else, over a full round-robin and the confirm pass; with every
    link alike nothing is."""
    for scenario in ("bad node", "bad link"):
        row = pairs_simulate.simulate(n, 0.05, scenario, 50, None, 0.33, 0.7)
        assert row["detection"] == 1.0 and row["false_per_run"] == 0, row
    assert pairs_simulate.simulate(n, 0.05, "none", 50, None, 0.33, 0.7)["false_per_run"] == 0


def test_three_nodes_with_one_slow_node_or_one_slow_link_exactly():
    """The rule on 3 nodes without noise: node 2 at a third is slow on both of its links, a node-level fault; the
    link 0-1 at a third is one of each end's 2 links, a link-level fault; each confirmed as such."""
    P = np.array(tournament(3), dtype=object)
    P = np.where(P == None, -1, P).astype(np.int64)   # noqa: E711 (an object array's None)
    me = np.broadcast_to(np.arange(3), P.shape)
    for slow, truth in (((me == 2) | (P == 2), ([2], [])), (((me == 0) & (P == 1)) | ((me == 1) & (P == 0)),
                                                              ([], [(0, 1)]))):
        W = np.where(P >= 0, np.where(slow, 1.0, 3.0), np.nan)
        sus = pv.find_suspects(P, W, 0.7)
        assert sus.healthy == 3.0 and (sus.nodes, sus.links) == truth, sus
        C = pv.confirm_schedule(3, sus)
        cme = np.broadcast_to(np.arange(3), C.shape)
        cslow = (cme == 2) | (C == 2) if truth[0] else ((cme == 0) & (C == 1)) | ((cme == 1) & (C == 0))
        v = pv.judge(P, W, C, np.where(C >= 0, np.where(cslow, 1.0, 3.0), np.nan), 0.7)
        assert ([s for s, _ in v.bad_nodes], [link for link, _ in v.bad_links]) == truth, v


@pytest.mark.alone
def test_the_simulation_at_10000_nodes_takes_seconds():
    row = pairs_simulate.simulate(10000, 0.1, "bad node", 5, 4, 0.5, 0.7)
    assert row["detection"] == 1.0 and row["false_per_run"] <= 10 and row["cpu_s_per_run"] < 2, row


def test_pairs_simulate_prints_its_table_and_launches_nothing():
    proc = run_tool("commbench", "pairs", "--simulate", "64", "--noise", "0.1", "--trials", 20, timeout=60,
                    env={"COLUMNS": "100"})
    assert proc.returncode == 0, proc.stderr
    assert "64" in proc.stdout and "bad node" in proc.stdout and "100.0%" in proc.stdout, proc.stdout
    # within 100 columns in a pipe, a two-line header (it was 105 wide with 8), the columns said below (issue 49)
    lines = proc.stdout.splitlines()
    rule = next(i for i, ln in enumerate(lines) if ln.startswith("\u2500"))
    table = lines[:rule + 4]   # the title, the header, the rule, the 3 scenarios
    assert max(len(ln) for ln in table) <= 100 and rule <= 4, proc.stdout   # the title (2 lines at most), header (2)
    assert lines[rule - 1].split() == ["nodes", "noise", "scenario", "runs", "detected", "met", "per", "run", "per",
                                       "node", "mean", "max", "per", "run"], proc.stdout
    assert any(ln.startswith("bad link met: the runs whose random rounds paired") for ln in lines[rule:]), proc.stdout
    assert_one_line_error(run_tool("commbench", "pairs", "--simulate", "64", "--size", "1M", timeout=60),
                          "--simulate launches nothing")
    assert_one_line_error(run_tool("commbench", "pairs", "--simulate", "1,x", timeout=60), "comma list")


@pytest.mark.slow
def test_emulated_nodes_give_pair_records_and_judge_nothing(tmp_path):
    out, plot = tmp_path / "p.jsonl", tmp_path / "m.png"
    proc = run_tool("commbench", "pairs", "--nodes", 3, "--size", "64K", "-n", 2, "-w", 1, "--out", out,
                    "--plot", plot)
    assert proc.returncode == 0, proc.stderr
    recs = read_records(out)
    pairs = [r for r in recs if r.get("peer_host")]
    rounds = [r for r in pairs if r.get("confirm") is None]
    assert len(rounds) == 3 * 2  # a round-robin of 3 rounds (one bye each), 1 pair, 2 operations
    # then the confirm pass: sendrecv only, rounds 3.. (what it retests depends on this machine's noise)
    assert all(r["collective"] == "sendrecv" and r["round"] >= 3 for r in pairs if r.get("confirm") is not None)
    assert {r["collective"] for r in pairs} == {"sendrecv", "all_reduce"} and all(r["wrong"] == 0 for r in pairs)
    (found,) = [r for r in recs if r.get("event") == "verdict"]
    assert found["passed"] is None and "emulated" in found["reason"]
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and "link matrix" in proc.stdout


def test_pairs_refuses_what_it_cannot_do():
    assert_one_line_error(run_tool("commbench", "pairs", "--nodes", 1, timeout=60), "at least 2 nodes")
    assert_one_line_error(run_tool("commbench", "pairs", "--nodes", 2, "--nproc-per-node", 2, timeout=60),
                          "one rank per node")
    assert_one_line_error(run_tool("commbench", "pairs", "--nodes", 2, "-b", "1M", timeout=60), "--size")
