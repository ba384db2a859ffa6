"""GLOO_SOCKET_IFNAME shown applied from the ranks' own sockets (issue 47 item 6): a namespace node with two interfaces
(eth0 on the cluster's subnet, eth1 on a second veth pair added here), a real sweep over both on its 2 ranks."""
import ipaddress
import json
import re
import subprocess

import pytest

from benchcore.emulate import netns
from tests.conftest import read_records
from tests.netns.conftest import needs_netns

pytestmark = [pytest.mark.slow, pytest.mark.root, needs_netns]

SECOND = ipaddress.ip_network("10.214.0.0/24")   # eth1's subnet, inside the namespaces only


@pytest.fixture(scope="module")
def two_links(pair):
    """The module's pair with a second link, eth1, between its nodes (removed with the namespaces)."""
    a, b = pair.ns(0), pair.ns(1)
    subprocess.run(["ip", "link", "add", "name", "eth1", "netns", a, "type", "veth", "peer", "name", "eth1",
                    "netns", b], check=True, timeout=10)
    for i, ns in enumerate((a, b)):
        subprocess.run(["ip", "-n", ns, "addr", "add", f"{SECOND[i + 1]}/{SECOND.prefixlen}", "dev", "eth1"],
                       check=True, timeout=10)
        subprocess.run(["ip", "-n", ns, "link", "set", "eth1", "up"], check=True, timeout=10)
    return pair


def test_a_sweep_over_two_interfaces_shows_each_applied_from_the_sockets(two_links, tmp_path, monkeypatch):
    out = tmp_path / "sweep.jsonl"
    monkeypatch.setenv("COLUMNS", "200")   # the settings table's lines whole
    proc = two_links.commbench(0, "sweep", "--env", "GLOO_SOCKET_IFNAME=eth0,eth1", "--nproc-per-node", 2,
                               "-b", "4K", "-e", "4K", "-n", 2, "-w", 1, "--repeats", 1, "--out", out)
    assert proc.wait(timeout=300) == 0, proc.err.read_text()
    recs = read_records(out)
    measured = [r for r in recs if not r.get("event")]
    first = {"eth0": netns.node_addr(0), "eth1": str(SECOND[1]), "lo": "127.0.0.1"}
    by_config = {r["sweep_config"]: r["effective"] for r in measured}
    assert set(by_config) == {"baseline", "GLOO_SOCKET_IFNAME=eth0", "GLOO_SOCKET_IFNAME=eth1"}
    for key, eff in by_config.items():
        ifname = key.partition("=")[2] or "lo"   # the baseline: the interface commbench chose (loopback here)
        assert eff["interfaces"] == {"0": ifname, "1": ifname}, eff
        assert eff["local_addrs"] == {"0": [first[ifname]], "1": [first[ifname]]}, eff
        assert eff["connections"] == {"0": 1, "1": 1} and eff["interfaces_read"], eff
    for rec in measured:
        asked = rec["env"]["GLOO_SOCKET_IFNAME"]
        assert rec["applied"]["GLOO_SOCKET_IFNAME"]["status"] == "applied", rec["applied"]
        assert rec["applied"]["GLOO_SOCKET_IFNAME"]["evidence"].startswith(
            f"every rank's Gloo connections left from {asked}: rank 0 from {first[asked]} ({asked})")
    text = proc.out.read_text()
    for ifname in ("eth0", "eth1"):
        assert re.search(rf"GLOO_SOCKET_IFNAME={ifname} +│ GLOO_SOCKET_IFNAME +│ applied +│ every rank's Gloo "
                         rf"connections left from {ifname}: rank 0 from {first[ifname]} \({ifname}\)", text), text
    assert "not applied" not in text
    [found] = [r for r in recs if r.get("event") == "verdict"]
    assert "GLOO_SOCKET_IFNAME=eth1" in json.dumps(found)   # ranked
