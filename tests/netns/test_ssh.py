"""The ssh launcher on 4 network-namespace nodes, each running a real sshd (tests/netns/sshd.py), links shaped to
RATE: 2 and 4 hosts, a host that refuses ssh, a host lost mid-run, Ctrl-C; pairs and accept over the same host
list. The launcher runs inside node 0 (the host namespace has no route to the nodes), as a login node that is
also the first host. Every launch ends with no process of it left on any node and no plan left in a temp dir.
"""
import glob
import shutil
import signal
import tempfile
import time

import pytest

from benchcore.emulate.netns import parse_rate
from tests.conftest import BIN, read_records
from tests.netns.conftest import errors, needs_netns
from tests.netns.sshd import needs_sshd, ssh_nodes

pytestmark = [pytest.mark.slow, pytest.mark.root, needs_netns, needs_sshd]

RATE = "400mbit"
QUICK = ["-n", 3, "-w", 1, "--timeout", 30, "--rdzv-timeout", 30]


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    yield from ssh_nodes(tmp_path_factory, 4, RATE, "cbs")


def remote_dirs():
    return set(glob.glob(f"{tempfile.gettempdir()}/commbench-ssh-*"))


@pytest.fixture
def clean(nodes):
    """The module's nodes; after the test, nothing of a launch left on them, no node's temp dir left."""
    before = remote_dirs()
    yield nodes
    deadline = time.monotonic() + 10
    while nodes.leftovers() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not nodes.leftovers()
    assert remote_dirs() <= before


def commbench(nodes, *args, hosts=None, node=0, **kw):
    hosts = hosts or nodes.hosts()
    return nodes.run(node, [BIN / "commbench", *args, "--hosts", ",".join(hosts), "--ssh-command", nodes.ssh_command],
                     **kw)


def test_two_and_four_hosts(clean, tmp_path):
    """2 hosts from --hosts, 4 from --hostfile: records from every host, the interface each chose, busbw near the
    shaped rate."""
    out2, out4 = tmp_path / "two.jsonl", tmp_path / "four.jsonl"
    done = commbench(clean, "run", "--collective", "all_reduce", "-b", "1M", "-e", "16M", "-f", 16, *QUICK,
                     "--out", out2, hosts=clean.hosts(2))
    assert done.returncode == 0, done.stderr
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the module's nodes\n" + "".join(f"{h} slots=1\n" for h in clean.hosts()))
    done4 = clean.run(0, [BIN / "commbench", "run", "--collective", "all_reduce", "-b", "1M", "-e", "16M", "-f", 16,
                          *QUICK, "--hostfile", hostfile, "--ssh-command", clean.ssh_command, "--out", out4])
    assert done4.returncode == 0, done4.stderr
    print(done4.stdout)
    for out, n in ((out2, 2), (out4, 4)):
        recs = read_records(out)
        assert [r["size_bytes"] for r in recs] == [1 << 20, 16 << 20]
        for rec in recs:
            assert rec["launcher"] == "ssh" and rec["nodes"] == n and rec["world_size"] == n and rec["wrong"] == 0
            assert rec["hosts"] == clean.hosts(n)
            assert rec["env"]["GLOO_SOCKET_IFNAME"] == "eth0"
        rate = parse_rate(RATE) / 8e9
        assert 0.3 * rate < recs[-1]["busbw_gbps"] < 1.05 * rate, (n, recs[-1]["busbw_gbps"], rate)


def test_host_that_refuses_ssh_is_named(clean, tmp_path):
    key = clean.authorized(2)
    kept = key.read_text()
    key.write_text("")   # node 2's sshd takes no key now
    try:
        t0 = time.monotonic()
        done = commbench(clean, "run", "--collective", "all_reduce", "-b", "1K", "-e", "1K", *QUICK,
                         hosts=clean.hosts(3))
        took = time.monotonic() - t0
    finally:
        key.write_text(kept)
    assert done.returncode != 0
    lines = errors(done.stderr)
    assert len(lines) == 1 and clean.host(2) in lines[0] and "refuses ssh" in lines[0], done.stderr
    assert "Permission denied" in lines[0]
    assert took < 25, took   # the other hosts' agents were stopped, not left waiting for the rendezvous


def start_long(nodes, tmp_path, hosts):
    out = tmp_path / "long.jsonl"
    err = open(tmp_path / "long.err", "w")
    proc = nodes.spawn(0, [BIN / "commbench", "run", "--collective", "all_reduce", "-b", "1M", "-e", "256M", "-f", 2,
                           *QUICK, "--hosts", ",".join(hosts), "--ssh-command", nodes.ssh_command, "--out", out],
                       out=open(tmp_path / "long.out", "w"), err=err)
    deadline = time.monotonic() + 90
    while not read_records(out) and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.1)
    assert read_records(out), (tmp_path / "long.err").read_text()
    return proc, out


def test_host_lost_mid_run_is_named(clean, tmp_path):
    """Node 3's session (its ssh server process, node agent, torchrun, rank) killed after the first record."""
    before = remote_dirs()
    proc, out = start_long(clean, tmp_path, clean.hosts())
    import os

    from benchcore.emulate import netns
    from benchcore.processes import procs
    listening = clean.sshds[3].pid
    victims = [p for p in netns.ns_pids(clean.host(3)) if p != listening and procs.proc_stat(p)
               and procs.proc_name(p) != "ip"]
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=60)
    err = (tmp_path / "long.err").read_text()
    assert proc.returncode not in (0, None)
    lines = errors(err)
    assert lines and clean.host(3) in lines[0], err
    print(err)
    recs = [r for r in read_records(out) if not r.get("event")]
    assert 1 <= len(recs) < 9 and all(r["wrong"] == 0 for r in recs)
    deadline = time.monotonic() + 10
    while clean.leftovers() and time.monotonic() < deadline:
        time.sleep(0.2)
    left = remote_dirs() - before   # the killed agent could not remove its temp dir; the others removed theirs
    assert len(left) == 1
    shutil.rmtree(left.pop())


def test_ctrl_c_stops_every_host(clean, tmp_path):
    proc, out = start_long(clean, tmp_path, clean.hosts())
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    assert [r for r in read_records(out) if not r.get("event")]
