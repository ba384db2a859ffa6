"""Two real nodes on this machine: network namespaces joined by a tbf-shaped veth pair.

The `pair` fixture builds one cluster per module under a prefix private to this test
process and always removes it (namespaces, processes inside, hosts files), also when a test
fails or is interrupted.
"""
import os
import shutil
import subprocess
import time

import pytest

from benchcore.emulate import netns
from benchcore.processes import procs
from commbench.launch.liveness import WORKER_NAME
from tests.conftest import BIN, ROOT, read_records

NETNS_CLUSTER = ROOT / "scripts" / "netns-cluster"
RATE = "1gbit"


def can_netns():
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("ip", "tc", "unshare")):
        return False
    return subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=10).returncode == 0


needs_netns = pytest.mark.skipif(not can_netns(), reason="needs root with ip netns, tc and unshare")


def cluster(*args, timeout=60):
    return subprocess.run([str(NETNS_CLUSTER), *map(str, args)], capture_output=True, text=True, timeout=timeout)


class Pair:
    """The two nodes of a cluster; commbench runs started in them; faults injected into them."""

    def __init__(self, prefix, logdir):
        self.prefix = prefix
        self.logdir = logdir
        self.procs = []

    def ns(self, node):
        return netns.ns_name(self.prefix, node)

    def host(self, node):
        return self.ns(node)

    def addr(self, node):
        return netns.node_addr(node)

    def commbench(self, node, *args, program="commbench"):
        """Start `commbench ARGS` (or another of the suite's programs) on node through scripts/netns-cluster exec."""
        argv = [str(NETNS_CLUSTER), "exec", "--prefix", self.prefix, str(node), "--", str(BIN / program),
                *map(str, args)]
        n = len(self.procs)
        out, err = self.logdir / f"{n}.out", self.logdir / f"{n}.err"
        with open(out, "w") as fo, open(err, "w") as fe:  # files, not pipes: nothing blocks while we wait
            proc = procs.spawn(argv, stdout=fo, stderr=fe)
        proc.out, proc.err = out, err
        self.procs.append(proc)
        return proc

    def ring(self, node, port, *args):
        return self.commbench(node, "ring", "--nodes", 2, "--rdzv-endpoint", f"{self.addr(0)}:{port}",
                              "--node-rank", node, *args)

    def worker_pid(self, node, timeout=60):
        """The commbench worker process in node (forked by the agent, it has the agent's argv, not its name)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for pid in netns.ns_pids(self.ns(node)):
                if procs.proc_name(pid) == WORKER_NAME:
                    return pid
            time.sleep(0.1)
        raise AssertionError(f"no worker in {self.ns(node)} after {timeout} s")

    def set_link(self, node, state):
        subprocess.run(["ip", "-n", self.ns(node), "link", "set", netns.IFNAME, state], check=True, timeout=10)

    def finish(self):
        """End whatever a test left running, and restore the links."""
        for proc in self.procs:
            procs.stop(proc, grace=0)
        self.procs.clear()
        netns.end_processes([self.ns(0), self.ns(1)], grace=2)
        netns.up(2, RATE, self.prefix)


def wait_records(path, n, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(read_records(path)) >= n:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {n} records in {path} after {timeout} s")


def errors(proc_stderr):
    return [ln for ln in proc_stderr.splitlines() if ln.startswith("error:")]


def wait_all(procs, since, timeout):
    """Wait for every process; [(returncode, stderr, seconds from `since` to its end)]."""
    ends = {}
    while len(ends) < len(procs) and time.monotonic() - since < timeout:
        for i, p in enumerate(procs):
            if i not in ends and p.poll() is not None:
                ends[i] = time.monotonic() - since
        time.sleep(0.05)
    if len(ends) < len(procs):
        raise AssertionError(f"still running {timeout} s after the fault")
    return [(p.returncode, p.err.read_text(), ends[i]) for i, p in enumerate(procs)]


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    netns.reap("cbt")  # clusters of test runs that were killed
    prefix = f"cbt{os.getpid()}"
    try:
        netns.up(2, RATE, prefix)
        p = Pair(prefix, tmp_path_factory.mktemp("netns-logs"))
        yield p
        p.finish()
    finally:
        netns.down(prefix)


@pytest.fixture
def fresh(pair):
    """The module's pair, cleaned up after the test (processes ended, links up and shaped)."""
    try:
        yield pair
    finally:
        pair.finish()
