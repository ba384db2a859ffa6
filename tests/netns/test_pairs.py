"""commbench pairs across eight network-namespace nodes (one set for the module): as an accept check (its verdict and
its links against their median judged), the node whose link runs at a third of the others' is named, exactly, and
the check fails; then `commbench pairs` on every node with one slow pair only (tc toward each other): that link is
named, exactly, and neither of its ends. Both through the round-robin and the confirm pass. With every link alike
nothing is named and it passes: tests/slurm (the same accept check on 4 nodes through sbatch) runs that case."""
import json
import os
import subprocess

import pytest

from benchcore.emulate import netns
from tests.conftest import BIN, ROOT, read_records, run_tool
from tests.netns.conftest import needs_netns

pytestmark = [pytest.mark.slow, pytest.mark.root, needs_netns]
NODES, RATE = 8, 400_000_000   # bit/s on every node's link; the slow one gets a third


@pytest.fixture(scope="module")
def quad(tmp_path_factory):
    netns.reap("cbq")
    prefix = f"cbq{os.getpid()}"
    try:
        netns.up(NODES, str(RATE), prefix)
        yield prefix, tmp_path_factory.mktemp("pairs")
    finally:
        netns.down(prefix)


def shape_node(prefix, node, bits):
    """Both directions of one node's link: its eth0 (upload) and its switch port (download)."""
    netns.shape(netns.ns_name(prefix, node), netns.IFNAME, bits)
    netns.shape(netns.switch_name(prefix), f"port{node}", bits)


SPEC = """\
cluster:
  exec: scripts/netns-cluster exec {{node}} --
  rdzv_endpoint: {endpoint}
checks:
  - name: links
    kind: pairs
    nodes: 8
    size: 4M
    iters: 3
    warmup: 1
    timeout: 240
    thresholds:
      - wrong == 0
      - sendrecv busbw >= 0.8 x median
"""


def run_pairs(prefix, logdir, port, name):
    """commbench accept with a pairs check across the eight nodes (one commbench pairs per node through the
    spec's cluster exec): (exit code, verdict.json, the records, pairs' own verdict record)."""
    spec = logdir / f"{name}.yaml"
    spec.write_text(SPEC.format(endpoint=f"{netns.node_addr(0)}:{port}"))
    proc = run_tool("commbench", "accept", "--spec", spec, "--out", logdir / name, "--metrics",
                    logdir / f"{name}.prom", timeout=400, cwd=ROOT, env={"NETNS_CLUSTER_PREFIX": prefix})
    print(proc.stderr + proc.stdout)
    recs = read_records(logdir / name / "results.jsonl")
    (found,) = [r for r in recs if r.get("event") == "verdict" and r.get("check") == "pairs"]
    return proc.returncode, json.loads((logdir / name / "verdict.json").read_text()), recs, found


def outcomes(verdict):
    return {t["threshold"]: t for t in verdict["checks"][0]["thresholds"]}


def test_the_slow_node_is_named_and_only_it(quad):
    prefix, logdir = quad
    slow = netns.ns_name(prefix, 3)
    shape_node(prefix, 3, RATE // 3)
    try:
        code, verdict, recs, found = run_pairs(prefix, logdir, 29560, "slow")
    finally:
        shape_node(prefix, 3, RATE)
    assert found["bad_nodes"] == [slow] and found["bad_links"] == [], found["reason"]
    # its evidence: the confirm pass against known-good nodes, each pairing near a third of the median link
    (accused,) = found["accused"]
    assert accused["node"] == slow and slow not in accused["peers"] and accused["pairings"] >= 3, accused
    assert accused["median_ratio"] < 0.5 and accused["confidence"] > 0.99, accused
    assert [v["host"] for v in found["node_verdicts"] if not v["passed"]] == [slow]
    # accept --metrics: the check failed, node 3 bad and the other seven fine, as node_exporter's textfile reads it
    prom = (logdir / "slow.prom").read_text().splitlines()
    passed = [ln for ln in prom if ln.startswith("commbench_check_passed{")]
    assert passed == ['commbench_check_passed{check="links",spec="slow.yaml"} 0.0',   # accept's check, and pairs'
                      'commbench_check_passed{check="pairs",spec="slow.yaml"} 0.0'], passed   # own verdict in it
    bad = {ln.split('host="')[1].split('"')[0]: ln.rsplit(" ", 1)[1] for ln in prom
           if ln.startswith("commbench_bad_node{")}
    assert bad == {netns.ns_name(prefix, i): "1.0" if i == 3 else "0.0" for i in range(NODES)}, bad
    # accept judges pairs' verdict and the links against their median: both fail, naming node 3
    assert code == 1 and verdict["checks"][0]["reason"] is None
    judged = outcomes(verdict)
    own = judged["pairs verdict: no bad node, no bad link"]
    assert not own["passed"] and f"bad node(s): {slow}" in own["message"], own
    link = judged["sendrecv busbw >= 0.8 x median"]
    assert not link["passed"] and slow in link["message"], link
    pairs = [r for r in recs if r.get("peer_host")]
    rounds = [r for r in pairs if r.get("confirm") is None]
    # a round-robin: 7 rounds x 4 pairs x 2 operations, each with its hosts and round; then the confirm pass
    assert len(rounds) == 56 and {r["round"] for r in rounds} == set(range(7))
    confirm = [r for r in pairs if r.get("confirm") is not None]
    assert {r["round"] for r in confirm} <= set(range(7, 11)) and all(r["collective"] == "sendrecv" for r in confirm)
    assert all(r["wrong"] == 0 and r["host"] != r["peer_host"] for r in pairs)
    fast = [r["busbw_gbps"] for r in rounds if slow not in (r["host"], r["peer_host"])
            and r["collective"] == "sendrecv"]
    # both directions at once, near the link's rate: 0.72-0.99 of the TCP ceiling measured on 4 nodes (2 cores),
    # so the best round is judged
    assert max(fast) >= 0.65 * RATE / 8e9 * 1448 / 1514, fast


def test_one_slow_pair_is_named_as_a_link_and_its_ends_are_not(quad):
    """`commbench pairs` on every node, as a health check runs it without accept, nodes 2 and 6 slow toward each
    other only: node rank 0, which judges, exits 1 naming that link; the other nodes 0."""
    prefix, logdir = quad
    a, b = netns.ns_name(prefix, 2), netns.ns_name(prefix, 6)
    for x, y in ((2, 6), (6, 2)):
        netns.shape_toward(netns.ns_name(prefix, x), netns.IFNAME, RATE, netns.node_addr(y), RATE // 3)
    try:
        nodes = [subprocess.Popen([str(ROOT / "scripts/netns-cluster"), "exec", "--prefix", prefix, str(node), "--",
                                   str(BIN / "commbench"), "pairs", "--nodes", str(NODES), "--size", "4M", "-n", "3",
                                   "-w", "1", "--rdzv-endpoint", f"{netns.node_addr(0)}:29570", "--node-rank",
                                   str(node), "--out", str(logdir / f"alone{node}.jsonl")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for node in range(NODES)]
        ends = [(p.communicate(timeout=300)[1], p.returncode) for p in nodes]
    finally:
        for x in (2, 6):
            shape_node(prefix, x, RATE)
    (stderr, code), others = ends[0], ends[1:]
    (found,) = [r for r in read_records(logdir / "alone0.jsonl") if r.get("event") == "verdict"]
    print({k: found.get(k) for k in ("reason", "accused", "suspects", "cleared", "healthy_busbw_gbps", "matrix")})
    assert code == 1 and stderr.splitlines()[-1] == f"error: verdict: bad link(s): {a} - {b} (sendrecv busbw " \
        "below 0.7 of the median link, against known-good nodes in the confirm pass)", stderr
    assert [c for _, c in others] == [0] * (NODES - 1), others
    assert found["bad_nodes"] == [] and found["bad_links"] == [[a, b]], found["reason"]
    (accused,) = found["accused"]
    # retested in the confirm pass, slow again; both ends were fine against the known-good nodes
    assert accused["link"] == [a, b] and accused["peers"] == [b] * accused["pairings"], accused
    assert accused["pairings"] >= 1 and accused["median_ratio"] < 0.5 and accused["confidence"] > 0.99, accused
    assert all(v["passed"] for v in found["node_verdicts"]) and len(found["node_verdicts"]) == NODES


def test_three_nodes_one_of_them_slow_is_named(quad):
    """Issue 46 P1: `commbench pairs` in a 3-node allocation (nodes 0-2 of the module's 8), node 2's link at a third
    of the others': node 2 is named, and only it (it was 'no bad node or link': the median link was its)."""
    prefix, logdir = quad
    slow = netns.ns_name(prefix, 2)
    shape_node(prefix, 2, RATE // 3)
    try:
        nodes = [subprocess.Popen([str(ROOT / "scripts/netns-cluster"), "exec", "--prefix", prefix, str(node), "--",
                                   str(BIN / "commbench"), "pairs", "--nodes", "3", "--size", "4M", "-n", "3",
                                   "-w", "1", "--rdzv-endpoint", f"{netns.node_addr(0)}:29580", "--node-rank",
                                   str(node), "--out", str(logdir / f"three{node}.jsonl")],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                 for node in range(3)]
        ends = [(p.communicate(timeout=300)[1], p.returncode) for p in nodes]
    finally:
        shape_node(prefix, 2, RATE)
    (stderr, code), others = ends[0], ends[1:]
    (found,) = [r for r in read_records(logdir / "three0.jsonl") if r.get("event") == "verdict"]
    print({k: found.get(k) for k in ("reason", "accused", "suspects", "cleared", "healthy_busbw_gbps")})
    assert code == 1 and f"error: verdict: bad node(s): {slow}" in stderr.splitlines()[-1], stderr
    assert [c for _, c in others] == [0, 0], others
    assert found["bad_nodes"] == [slow] and found["bad_links"] == [], found["reason"]
    (accused,) = found["accused"]
    assert accused["median_ratio"] < 0.5 and slow not in accused["peers"], accused
