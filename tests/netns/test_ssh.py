"""The ssh launcher on 4 network-namespace nodes, each running a real sshd (tests/netns/sshd.py), links shaped to
RATE: 2 and 4 hosts, a host that refuses ssh, a host lost mid-run, Ctrl-C; pairs and accept over the same host
list. The launcher runs inside node 0 (the host namespace has no route to the nodes), as a login node that is
also the first host. Every launch ends with no process of it left on any node and no plan left in a temp dir.
"""
import glob
import json
import os
import re
import shutil
import signal
import tempfile
import time

import pytest

from benchcore.emulate import netns
from benchcore.emulate.netns import parse_rate
from benchcore.processes import procs
from tests.commbench.launch.test_ssh import launch_processes
from tests.conftest import BIN, HOOKS_ON, read_records
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


def test_four_hosts_from_a_hostfile(clean, tmp_path):
    """4 hosts from --hostfile (2 hosts: the accept check below): records from every host, the interface each
    chose, busbw near the shaped rate."""
    out = tmp_path / "four.jsonl"
    hostfile = tmp_path / "hosts"
    hostfile.write_text("# the module's nodes\n" + "".join(f"{h} slots=1\n" for h in clean.hosts()))
    proc = clean.spawn(0, [BIN / "commbench", "run", "--collective", "all_reduce", "-b", "1M", "-e", "16M", "-f", 16,
                           *QUICK, "--hostfile", hostfile, "--ssh-command", clean.ssh_command, "--out", out],
                       out=open(tmp_path / "four.out", "w"), err=open(tmp_path / "four.err", "w"))
    links, clients = {}, {}   # N14: what this machine holds per host while the run goes (RSS, KiB)
    while proc.poll() is None:
        for pid, (argv, rss) in launch_processes(str(clean.keys)).items():
            if argv[0] == b"ssh":
                clients[pid] = max(clients.get(pid, 0), rss)
            elif b"link" in argv:
                links[pid] = max(links.get(pid, 0), rss)
        time.sleep(0.1)
    assert proc.returncode == 0, (tmp_path / "four.err").read_text()
    print((tmp_path / "four.out").read_text())
    print(f"link processes: {len(links)} ({sum(links.values()) / 1024:.1f} MB); ssh clients: {len(clients)}, "
          f"{max(clients.values()) / 1024:.1f} MB RSS at most each")
    assert len(links) == 1 and len(clients) == 4
    recs = read_records(out)
    assert [r["size_bytes"] for r in recs] == [1 << 20, 16 << 20]
    for rec in recs:
        assert rec["launcher"] == "ssh" and rec["nodes"] == 4 and rec["world_size"] == 4 and rec["wrong"] == 0
        assert rec["hosts"] == clean.hosts() and rec["env"]["GLOO_SOCKET_IFNAME"] == "eth0"
    rate = parse_rate(RATE) / 8e9
    assert 0.3 * rate < recs[-1]["busbw_gbps"] < 1.05 * rate, (recs[-1]["busbw_gbps"], rate)


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
    assert done.returncode == 1   # a failed run (143 would say it was terminated)
    lines = errors(done.stderr)
    assert len(lines) == 1 and clean.host(2) in lines[0] and "refuses ssh" in lines[0], done.stderr
    assert "Permission denied" in lines[0]
    assert took < 25, took   # the other hosts' agents were stopped, not left waiting for the rendezvous


def test_one_host_under_two_spellings_gets_no_second_agent(clean):
    """Issue 46 N15: case, a trailing dot and a user@ are one host to DNS and sshd: refused in one line, before any
    ssh starts."""
    for hosts in ([clean.host(0), clean.host(0).upper()], [clean.host(1), f"{clean.host(1)}."],
                  [clean.host(0), clean.host(1), f"root@{clean.host(1)}"]):
        done = commbench(clean, "run", "--collective", "all_reduce", "-b", "1K", "-e", "1K", *QUICK, hosts=hosts)
        assert done.returncode == 2 and errors(done.stderr) == [
            f"error: --hosts names {hosts[-2]} and {hosts[-1]}, one host (one agent per host)"], done.stderr


def test_a_hang_is_diagnosed_as_with_the_other_launchers(clean, tmp_path):
    """Rank 1 stops (alive) before timed operation 3: rank 0's watchdog names it, exit 4, nothing left behind."""
    done = clean.run(0, ["env", *(f"{k}={v}" for k, v in HOOKS_ON.items()), "COMMBENCH_TEST_STALL=1:3",
                         BIN / "commbench", "run", "--collective", "all_reduce", "-b", "1M", "-e", "1M", "-n", 10,
                         "-w", 1, "--timeout", 20, "--hang-timeout", 6, "--rdzv-timeout", 30, "--hosts",
                         ",".join(clean.hosts(2)), "--ssh-command", clean.ssh_command, "--out", tmp_path / "h.jsonl"])
    assert done.returncode == 4, done.stderr
    lines = errors(done.stderr)
    assert lines[0].startswith("error: hang: no progress for 6 s"), done.stderr
    assert f"error: rank 1 on {clean.host(1)}: never entered operation 3" in done.stderr
    assert [r["event"] for r in read_records(tmp_path / "h.jsonl") if r.get("event")] == ["hang"]


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
    """Node 1's session (its ssh server process, node agent, torchrun, rank) killed after the first record of a
    2-host run (fewer agents starting on this machine's 2 cores: a quicker test)."""
    before = remote_dirs()
    proc, out = start_long(clean, tmp_path, clean.hosts(2))
    listening = clean.sshds[1].pid
    victims = [p for p in netns.ns_pids(clean.host(1)) if p != listening and procs.proc_stat(p)
               and procs.proc_name(p) != "ip"]
    for pid in victims:
        os.kill(pid, signal.SIGKILL)
    proc.wait(timeout=60)
    err = (tmp_path / "long.err").read_text()
    assert proc.returncode == 1, (proc.returncode, err)
    lines = errors(err)
    assert lines and clean.host(1) in lines[0], err
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
    """Ctrl-C once the progress names a step the hosts' ranks reached (their status comes back over ssh)."""
    proc, out = start_long(clean, tmp_path, clean.hosts(3))
    deadline = time.monotonic() + 30
    while not re.search(r"\[\d+/\d+\] all_reduce \d+M", (tmp_path / "long.err").read_text()):
        assert time.monotonic() < deadline and proc.poll() is None, (tmp_path / "long.err").read_text()
        time.sleep(0.2)
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    assert proc.returncode != 0
    assert [r for r in read_records(out) if not r.get("event")]


# a spec's env outside NCCL_/GLOO_/TORCH_ (issue 46 N13): the catalogue's, and one only allow_unknown_env lets in,
# whose value a shell would split and run
SPEC_ENV = {"UCX_TLS": "tcp", "CUDA_DEVICE_MAX_CONNECTIONS": "1", "SITE_NOTE": "a b'c\"; $(id) `id`"}


def test_pairs_and_accept_take_the_host_list_and_write_the_history(clean, tmp_path):
    """pairs over 4 hosts, then an accept whose 2-node check starts over ssh on the first 2 (at least half the
    shaped rate) with a spec's env that each host's ranks saw as given, both appending to one history."""
    hist = tmp_path / "health.jsonl"
    done = commbench(clean, "pairs", "--size", "1M", "--rounds", 1, "-n", 2, "-w", 1, "--timeout", 30,
                     "--rdzv-timeout", 30, "--history", hist, "--out", tmp_path / "pairs.jsonl")
    assert done.returncode == 0, done.stderr
    verdict = [r for r in read_records(tmp_path / "pairs.jsonl") if r.get("event") == "verdict"][-1]
    assert verdict["passed"] is True and verdict["bad_nodes"] == [] and verdict["bad_links"] == []
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"history: {hist}\nchecks:\n  - name: ar\n    kind: commbench\n    collective: all_reduce\n"
                    "    nodes: 2\n    min_bytes: 4M\n    max_bytes: 4M\n    iters: 3\n    allow_unknown_env: true\n"
                    f"    env: {json.dumps(SPEC_ENV)}\n    thresholds:\n"
                    "      - wrong == 0\n"
                    f"      - busbw >= {0.5 * parse_rate(RATE) / 8e9:.4f} GB/s\n")   # half the shaped rate
    done = clean.run(0, [BIN / "commbench", "accept", "--spec", spec, "--out", tmp_path / "acc", "--hosts",
                         ",".join(clean.hosts()), "--ssh-command", clean.ssh_command])
    assert done.returncode == 0, done.stdout + done.stderr
    recs = [r for r in read_records(tmp_path / "acc" / "results.jsonl") if not r.get("event")]
    assert recs and all(r["launcher"] == "ssh" and r["hosts"] == clean.hosts(2) for r in recs)
    for rec in recs:   # N13: what both hosts' ranks saw (one env: every rank's was the same), the spec's as given
        assert {k: rec["env"].get(k) for k in SPEC_ENV} == SPEC_ENV, rec["env"]
    entries = [json.loads(ln) for ln in hist.read_text().splitlines()]
    assert [(e["source"], e["node"], e["result"]) for e in entries] == \
        [("pairs", h, "pass") for h in clean.hosts()] + [("accept", h, "pass") for h in clean.hosts(2)]
    shown = clean.run(0, [BIN / "commbench", "health", hist], env={**os.environ, "COLUMNS": "200"})
    print(shown.stdout)
    assert shown.returncode == 0 and all(h in shown.stdout for h in clean.hosts())
