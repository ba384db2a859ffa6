"""scripts/netns-cluster: namespaces, veth pair or bridge, private subnet, tbf shaping, idempotent, clean down."""
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from benchcore.emulate import netns
from tests.netns.conftest import cluster, needs_netns

pytestmark = [pytest.mark.root, needs_netns]

PROBE = """
import socket, sys
print(socket.gethostname())
for host in sys.argv[1:]:
    try:  # a closed port answers with a reset when the host is reachable
        socket.create_connection((host, 9), timeout=2).close(); print(host, "open")
    except ConnectionRefusedError:
        print(host, "reachable")
    except OSError as exc:
        print(host, "unreachable", exc)
"""


def probe(prefix, node, *hosts):
    out = cluster("exec", "--prefix", prefix, node, "--", sys.executable, "-c", PROBE, *hosts)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    return lines[0], dict(ln.split(" ", 1) for ln in lines[1:])


def routes():
    return subprocess.run(["ip", "route", "show", "type", "blackhole"], capture_output=True, text=True).stdout


def qdisc(ns, dev="eth0"):
    return subprocess.run(["tc", "-n", ns, "qdisc", "show", "dev", dev], capture_output=True, text=True).stdout


@pytest.fixture
def prefix():
    name = f"cbu{os.getpid()}"
    netns.down(name)
    yield name
    netns.down(name)
    assert not [n for n in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.split()
                if n.startswith(name + "-")]


def test_pair_up_exec_status_reshape_down(prefix, capsys):
    t0 = time.monotonic()
    up = cluster("up", "--prefix", prefix, "--nodes", 2, "--rate", "500mbit")
    up_s = time.monotonic() - t0
    assert up.returncode == 0 and "links shaped to 500mbit" in up.stdout, up.stderr
    assert cluster("up", "--prefix", prefix, "--nodes", 2, "--rate", "500mbit").returncode == 0  # idempotent
    n0, n1 = netns.ns_name(prefix, 0), netns.ns_name(prefix, 1)
    assert "rate 500Mbit burst 125000b" in qdisc(n0) and "rate 500Mbit" in qdisc(n1)  # 2 ms bucket
    st = cluster("status", "--prefix", prefix)
    status = st.stdout
    assert st.returncode == 0 and status.startswith(f"netns-cluster: running with prefix '{prefix}': 2 nodes")
    assert f"{n0}: eth0 10.213.0.1/24 UP rate 500Mbit" in status and f"{n1}: eth0 10.213.0.2/24 UP" in status
    # the subnet exists only inside the namespaces; the host namespace blackholes it (a client there by mistake)
    assert "10.213.0." not in subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    assert f"blackhole 10.213.0.0/24 metric {netns.route_metric(prefix)}" in routes()
    name, seen = probe(prefix, 1, n0, "10.213.0.1", "127.0.0.1")
    assert name == n1 and seen == {n0: "reachable", "10.213.0.1": "reachable", "127.0.0.1": "reachable"}
    assert cluster("up", "--prefix", prefix, "--nodes", 2, "--rate", "2gbit").returncode == 0
    assert "rate 2Gbit burst 500000b" in qdisc(n0)
    assert cluster("up", "--prefix", prefix, "--nodes", 2).returncode == 0
    assert "tbf" not in qdisc(n0) and "tbf" not in qdisc(n1)
    t0 = time.monotonic()
    down = cluster("down", "--prefix", prefix)
    down_s = time.monotonic() - t0
    assert down.returncode == 0 and "removed" in down.stdout
    assert not Path(f"/etc/netns/{n0}").exists() and not netns.existing(prefix)[0]
    assert f"metric {netns.route_metric(prefix)}" not in routes()  # its own route gone, any other cluster's kept
    assert cluster("status", "--prefix", prefix).returncode == 3
    with capsys.disabled():
        print(f"\n[netns-cluster] up {up_s:.2f} s, down {down_s:.2f} s (wall, including the script's start)")


def test_bridge_for_three_nodes_rebuild_and_down_after_partial_up(prefix):
    assert cluster("up", "--prefix", prefix, "--nodes", 3, "--rate", "1gbit").returncode == 0
    nodes, switch = netns.existing(prefix)
    assert len(nodes) == 3 and switch
    assert "rate 1Gbit" in qdisc(netns.switch_name(prefix), "port2")  # the node's download is shaped too
    _, seen = probe(prefix, 2, netns.ns_name(prefix, 0), netns.ns_name(prefix, 1))
    assert set(seen.values()) == {"reachable"}
    assert cluster("up", "--prefix", prefix, "--nodes", 2).returncode == 0  # another shape: rebuilt as a pair
    assert netns.existing(prefix) == ([netns.ns_name(prefix, 0), netns.ns_name(prefix, 1)], False)
    assert cluster("down", "--prefix", prefix).returncode == 0
    for name in (netns.ns_name(prefix, 0), netns.ns_name(prefix, 1), netns.switch_name(prefix)):  # a partial up
        subprocess.run(["ip", "netns", "add", name], check=True)
    assert cluster("status", "--prefix", prefix).returncode == 1  # namespaces without links
    sleeper = subprocess.Popen(["ip", "netns", "exec", netns.ns_name(prefix, 1), "sleep", "300"])
    down = cluster("down", "--prefix", prefix)
    assert down.returncode == 0 and "ended 1 processes" in down.stdout, down.stdout + down.stderr
    assert sleeper.wait(timeout=10) != 0 and netns.existing(prefix) == ([], False)


def test_bad_input_is_one_line():
    for args, needle in ((["up", "--nodes", 1], "at least 2"), (["up", "--rate", "fast"], "is not a rate"),
                         (["exec", "--prefix", "cbnone", 0, "--", "true"], "no node 0")):
        out = cluster(*args)
        assert out.returncode == 1 and out.stderr.startswith("netns-cluster: error:") and needle in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1
