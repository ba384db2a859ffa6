"""commbench accept with acceptance/netns-2node.yaml on two tc-shaped namespaces: passes at the rate the nodes
are shaped to, fails when one node's link runs at half that rate (node 0 still detects the full rate); and a
selftest-link check judged on the records of its own private pair."""
import json
import os

import pytest

from benchcore.emulate import netns
from tests.conftest import ROOT, run_tool
from tests.netns.conftest import RATE, needs_netns

pytestmark = [pytest.mark.slow, pytest.mark.root, needs_netns]
SPEC = ROOT / "acceptance" / "netns-2node.yaml"


@pytest.fixture(scope="module")
def cluster():
    """A cluster of the spec's shape under a prefix private to this test process."""
    netns.reap("cbacc")
    prefix = f"cbacc{os.getpid()}"
    try:
        netns.up(2, RATE, prefix)
        yield prefix
    finally:
        netns.down(prefix)


def accept(prefix, tmp_path, port):
    # a port of its own per run: the previous run's rendezvous port may still be in TIME_WAIT, which
    # commbench's endpoint check refuses
    spec = tmp_path / "netns-2node.yaml"
    spec.write_text(SPEC.read_text().replace("10.213.0.1:29500", f"10.213.0.1:{port}"))
    proc = run_tool("commbench", "accept", "--spec", spec, "--out", tmp_path / "out", timeout=600, cwd=ROOT,
                    env={"NETNS_CLUSTER_PREFIX": prefix})
    print(proc.stderr + proc.stdout)
    return proc, json.loads((tmp_path / "out" / "verdict.json").read_text())


def busbw_threshold(verdict):
    return next(t for t in verdict["checks"][0]["thresholds"] if t["threshold"] == "busbw >= 0.8 x link peak at 64M")


def test_passes_at_the_configured_rate(cluster, tmp_path):
    proc, verdict = accept(cluster, tmp_path, 29510)
    assert proc.returncode == 0, proc.stderr
    t = busbw_threshold(verdict)
    peak = netns.parse_rate(RATE) / 8e9 * 1448 / 1514      # what node 0 detects: the rate's TCP payload
    assert t["passed"] and t["expected"] == pytest.approx(0.8 * peak, rel=1e-3)
    assert t["measured"] >= 0.8 * peak


def test_fails_when_one_nodes_link_runs_at_half_the_rate(cluster, tmp_path):
    netns.shape(netns.ns_name(cluster, 1), netns.IFNAME, netns.parse_rate(RATE) // 2)
    try:
        proc, verdict = accept(cluster, tmp_path, 29520)
    finally:
        netns.shape(netns.ns_name(cluster, 1), netns.IFNAME, netns.parse_rate(RATE))
    assert proc.returncode == 1, proc.stderr
    t = busbw_threshold(verdict)
    peak = netns.parse_rate(RATE) / 8e9 * 1448 / 1514
    assert not t["passed"] and t["measured"] < 0.6 * peak
    assert "measured busbw_gbps" in t["message"] and "expected >= " in t["message"] and "at 64M" in t["message"]
    assert verdict["checks"][0]["reason"] is None      # the run itself worked: the link is what failed


def test_a_selftest_link_check_is_judged_on_its_records(tmp_path):
    spec = tmp_path / "link.yaml"
    spec.write_text("""\
checks:
  - name: link
    kind: selftest-link
    rate: 1gbit
    min_bytes: 64M
    max_bytes: 64M
    cycles: 3   # judged on the median: one pass at 0.62 of the link from a busy moment failed CI with 1
    thresholds:
      - wrong == 0
      - busbw >= 0.8 x link peak at 64M
""")
    proc = run_tool("commbench", "accept", "--spec", spec, "--out", tmp_path / "out", timeout=600)
    print(proc.stderr + proc.stdout)
    assert proc.returncode == 0, proc.stderr
    verdict = json.loads((tmp_path / "out" / "verdict.json").read_text())
    t = verdict["checks"][0]["thresholds"][1]
    assert t["passed"] and t["expected"] == pytest.approx(0.8 * netns.parse_rate(RATE) / 8e9 * 1448 / 1514, rel=1e-3)
