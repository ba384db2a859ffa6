"""commbench pairs across four network-namespace nodes: the node whose link runs at a third of the others' is
named, exactly; with every link alike, nothing is named."""
import os
import statistics
import time

import pytest

from benchcore import procs
from commbench.launch import netns
from tests.conftest import BIN, read_records
from tests.netns.conftest import NETNS_CLUSTER, needs_netns, wait_all

pytestmark = [pytest.mark.slow, pytest.mark.root, needs_netns]
NODES, RATE = 4, 400_000_000   # bit/s on every node's link; the slow one gets a third


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


def run_pairs(prefix, logdir, port, out):
    started = []
    for node in reversed(range(NODES)):   # node 0 (the store) last, so the others already wait for it
        argv = [str(NETNS_CLUSTER), "exec", "--prefix", prefix, str(node), "--", str(BIN / "commbench"), "pairs",
                "--nodes", str(NODES), "--rdzv-endpoint", f"{netns.node_addr(0)}:{port}", "--node-rank", str(node),
                "--size", "4M", "-n", "3", "-w", "1", "--timeout", "60", "--rdzv-timeout", "60",
                *(["--out", str(out)] if node == 0 else [])]
        err = logdir / f"{port}-{node}.err"
        with open(err, "w") as fe:
            proc = procs.spawn(argv, stdout=open(logdir / f"{port}-{node}.out", "w"), stderr=fe)
        proc.err = err
        started.append(proc)
    results = wait_all(started, time.monotonic(), 240)
    assert all(code == 0 for code, _, _ in results), [e for _, e, _ in results]
    (found,) = [r for r in read_records(out) if r.get("event") == "verdict"]
    return read_records(out), found


def test_the_slow_node_is_named_and_only_it(quad):
    prefix, logdir = quad
    shape_node(prefix, 3, RATE // 3)
    try:
        recs, found = run_pairs(prefix, logdir, 29560, logdir / "slow.jsonl")
    finally:
        shape_node(prefix, 3, RATE)
    assert found["bad_nodes"] == [netns.ns_name(prefix, 3)] and found["bad_links"] == [], found["reason"]
    pairs = [r for r in recs if r.get("peer_host")]
    # 6 rounds (two round-robins of 3) x 2 pairs x 2 operations, each with its hosts and round
    assert len(pairs) == 24 and {r["round"] for r in pairs} == set(range(6))
    assert all(r["wrong"] == 0 and r["host"] != r["peer_host"] for r in pairs)
    slow = [r["busbw_gbps"] for r in pairs if netns.ns_name(prefix, 3) in (r["host"], r["peer_host"])
            and r["collective"] == "sendrecv"]
    fast = [r["busbw_gbps"] for r in pairs if netns.ns_name(prefix, 3) not in (r["host"], r["peer_host"])
            and r["collective"] == "sendrecv"]
    assert statistics.median(slow) < 0.5 * statistics.median(fast), (slow, fast)
    # both directions at once, near the link's rate: 0.72-0.99 of the TCP ceiling measured (4 ranks on 2 cores);
    # with Gloo's send posted before its receive, 0.51 in every round
    assert statistics.median(fast) >= 0.65 * RATE / 8e9 * 1448 / 1514, fast


def test_with_every_link_alike_nothing_is_named(quad):
    prefix, logdir = quad
    _, found = run_pairs(prefix, logdir, 29561, logdir / "even.jsonl")
    assert found["bad_nodes"] == [] and found["bad_links"] == [] and found["passed"] is True, found["reason"]
