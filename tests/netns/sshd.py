"""Namespace nodes that each run a real sshd (Debian's openssh-server), for the ssh launcher's tests.

One cluster per module: N network namespaces with tbf-shaped links (benchcore/emulate/netns.py), in each an sshd
started with its own config (`-f`, `-D`, as root) that listens only on that node's address, with a host key of its
own and the module's user key as the only authorized key; all keys are generated into a private temp dir. The
client side is an ssh command template (--ssh-command) naming that key and a known_hosts file with every node's
host key (StrictHostKeyChecking=yes: a node answering with another key is refused). Everything started is stopped
and every namespace removed, also when a test fails.
"""
import os
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from benchcore.emulate import netns
from benchcore.processes import procs

SSHD = "/usr/sbin/sshd"
PRIVSEP = Path("/run/sshd")   # sshd's compiled-in privilege separation directory (Debian makes it at boot)

needs_sshd = pytest.mark.skipif(not (Path(SSHD).exists() and shutil.which("ssh") and shutil.which("ssh-keygen")),
                                reason="needs openssh-server and openssh-client (scripts/setup installs them)")


def keygen(path):
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "commbench-test", "-f", str(path)],
                   check=True, timeout=30)
    return Path(f"{path}.pub").read_text().strip()


class SshNodes:
    """The module's nodes: names, the --ssh-command that reaches them, and their sshds."""

    def __init__(self, prefix, nodes, keys):
        self.prefix, self.count, self.keys = prefix, nodes, keys
        self.sshds = {}

    def host(self, i):
        return netns.ns_name(self.prefix, i)

    def hosts(self, n=None):
        return [self.host(i) for i in range(n or self.count)]

    @property
    def ssh_command(self):
        return shlex.join(["ssh", "-F", "none", "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", "-o",
                           "ServerAliveInterval=2", "-o", "ServerAliveCountMax=3", "-o", "StrictHostKeyChecking=yes",
                           "-o", f"UserKnownHostsFile={self.keys / 'known_hosts'}", "-o", "IdentitiesOnly=yes",
                           "-i", str(self.keys / "user"), "-l", "root"]) + " {host}"

    def authorized(self, i):
        return self.keys / f"authorized_keys{i}"

    def start(self, i):
        """Node i's sshd, listening on its address only; waits until it accepts connections."""
        conf = self.keys / f"sshd{i}.conf"
        conf.write_text("\n".join([
            f"ListenAddress {netns.node_addr(i)}", "Port 22", f"HostKey {self.keys / f'host{i}'}",
            f"PidFile {self.keys / f'sshd{i}.pid'}", "PermitRootLogin prohibit-password",
            f"AuthorizedKeysFile {self.authorized(i)}", "StrictModes no",   # the key dir is under /tmp (1777)
            "PasswordAuthentication no", "KbdInteractiveAuthentication no", "UsePAM no", "X11Forwarding no",
            "AllowTcpForwarding no", "PrintMotd no", "LogLevel ERROR", ""]))
        log = open(self.keys / f"sshd{i}.log", "ab")
        self.sshds[i] = procs.spawn(netns.exec_argv(i, [SSHD, "-D", "-e", "-f", str(conf)], self.prefix),
                                    stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 20
        while True:
            probe = subprocess.run(["ip", "netns", "exec", self.host(i), "ssh", *shlex.split(self.ssh_command)[1:-1],
                                    self.host(i), "true"], capture_output=True, text=True, timeout=20)
            if probe.returncode == 0:
                return
            if self.sshds[i].poll() is not None or time.monotonic() > deadline:
                raise AssertionError(f"sshd on {self.host(i)} did not start: "
                                     f"{(self.keys / f'sshd{i}.log').read_text()[-500:]} {probe.stderr}")
            time.sleep(0.2)

    def stop(self):
        for proc in self.sshds.values():
            procs.stop(proc, grace=2)
        self.sshds.clear()

    def run(self, node, args, timeout=180, **kw):
        """`ARGS` (an argv) on node `node`, to its end: the launcher runs inside a node (the host namespace has no
        route to the nodes' subnet)."""
        return subprocess.run(netns.exec_argv(node, [str(a) for a in args], self.prefix), capture_output=True,
                              text=True, timeout=timeout, **kw)

    def spawn(self, node, args, out, err):
        return procs.spawn(netns.exec_argv(node, [str(a) for a in args], self.prefix), stdout=out, stderr=err)

    def leftovers(self):
        """Processes of a launch still inside a node: node agents, torchrun, workers (sshd itself aside)."""
        left = []
        for i in range(self.count):
            for pid in netns.ns_pids(self.host(i)):
                argv = procs.proc_cmdline(pid) or []
                if any("commbench" in a or "torchrun" in a for a in argv):
                    left.append(f"{self.host(i)}: {pid} {' '.join(argv)[:120]}")
        return left


def ssh_nodes(tmp_path_factory, nodes, rate, stem):
    """Generator for a module fixture: the cluster up, keys made, every sshd started; all of it removed after."""
    netns.reap(stem)
    prefix = f"{stem}{os.getpid()}"
    keys = tmp_path_factory.mktemp("ssh-keys")
    os.chmod(keys, 0o700)
    made_privsep = not PRIVSEP.exists()
    if made_privsep:
        PRIVSEP.mkdir(mode=0o755)
    cluster = SshNodes(prefix, nodes, keys)
    try:
        netns.up(nodes, rate, prefix)
        user = keygen(keys / "user")
        known = []
        for i in range(nodes):
            known.append(f"{cluster.host(i)},{netns.node_addr(i)} {keygen(keys / f'host{i}')}")
            cluster.authorized(i).write_text(user + "\n")
        (keys / "known_hosts").write_text("\n".join(known) + "\n")
        for i in range(nodes):
            cluster.start(i)
        yield cluster
    finally:
        cluster.stop()
        netns.down(prefix)
        if made_privsep:
            shutil.rmtree(PRIVSEP, ignore_errors=True)
