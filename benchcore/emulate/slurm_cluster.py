"""A real Slurm cluster on one machine: Debian's slurmctld and one slurmd per network-namespace node
(benchcore/emulate/netns.py builds the nodes), authenticated by a munged of its own.

Standard library only (scripts/slurm-cluster runs it without the virtualenv). As root:

  up --nodes N [--rate R]     namespaces PREFIX-node0..N-1 on --subnet (blackholed in the host namespace while
                              up); munged on /run/slurm-cluster-munge/PREFIX/socket (the munge user reaches it under
                              any --dir); slurmctld in node 0; `slurmd -N PREFIX-nodeI` in each node under its own
                              host name; DIR/slurm.conf (no cgroups, no accounting,
                              proctrack/linuxproc, task/none, one partition; --prolog PATH: Prolog=PATH with
                              PrologFlags=Alloc). Returns once sinfo shows N idle.
  down                        stops the daemons by PID, removes the namespaces and what up wrote in DIR.
  status                      exit 0 running, 1 partial, 3 stopped.
  exec NODE -- CMD...         CMD inside node NODE with SLURM_CONF set: the only place to run sinfo, srun,
                              sbatch, salloc, scontrol (the host namespace has no route to the nodes).

Slurm and munge are installed with apt-get when missing, with no packaged daemon started.
"""
import argparse
import contextlib
import os
import shlex
import shutil
import signal
import time

from benchcore.emulate import netns
from benchcore.emulate.skeleton import Cli, DirFixture, Fail, alive, live_pids
from benchcore.files import trusted_dir, write_new, write_new_text
from benchcore.processes import procs

PROG = "slurm-cluster"
DEFAULT_DIR = os.environ.get("SLURM_CLUSTER_DIR", "/tmp/slurm-cluster")
DEFAULT_PREFIX = "sl"
DEFAULT_SUBNET = "10.214.0.0/24"
PARTITION = "debug"
APT = ("slurmctld", "slurmd", "slurm-client", "munge")
PACKAGES = {"slurmctld": "slurmctld", "slurmd": "slurmd", "sinfo": "slurm-client", "munged": "munge",
            "mungekey": "munge", "ip": "iproute2", "unshare": "util-linux", "runuser": "util-linux"}
POLICY_RC = "/usr/sbin/policy-rc.d"
UP_TIMEOUT = 30  # seconds for every node to read idle (measured: ~1 s)
# munged runs as the munge user, which cannot enter a --dir under a private (0700) parent: its key, socket, pid and
# log live in MUNGE_BASE/PREFIX instead (root's, 0711: munge may pass, nobody may list or write)
MUNGE_BASE = "/run/slurm-cluster-munge"
EPILOG = f"""\
examples:
  {PROG} up --nodes 2 --rate 1gbit
  {PROG} exec 0 -- sinfo
  {PROG} exec 0 -- sbatch --wait -N2 --wrap 'srun hostname'
  {PROG} status                       # exit 0 running, 1 partial, 3 stopped
  {PROG} down
The default DIR can be set with SLURM_CLUSTER_DIR.
"""

CONF = """\
# written by {prog} up: a minimal cluster on network-namespace nodes (no cgroups, no accounting)
ClusterName=commbench
SlurmctldHost={head}({head_addr})
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={munge}/socket
MailProg=/bin/true
StateSaveLocation={dir}/ctld
SlurmctldPidFile={dir}/run/slurmctld.pid
SlurmctldLogFile={dir}/log/slurmctld.log
SlurmdSpoolDir={dir}/spool/%n
SlurmdPidFile={dir}/run/slurmd-%n.pid
SlurmdLogFile={dir}/log/slurmd-%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
ReturnToService=2
KillWait=5
SlurmdTimeout=10
{prolog}{nodes}
PartitionName={partition} Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""
# Inside `ip netns exec` /sys is remounted without the cgroup mounts: slurmd dies initialising its cgroup plugin
# unless it is told v1 (22.05 has no `disabled`); nothing uses it with proctrack/linuxproc and task/none.
CGROUP_CONF = "CgroupPlugin=cgroup/v1\n"


class SlurmCluster(DirFixture):
    OWNED = ("slurm.conf", "cgroup.conf", "ctld", "spool", "log", "run")
    ROOT_FOR = "ip netns, munged, slurmctld, slurmd"

    def __init__(self, d):
        super().__init__(PROG, PACKAGES, d)
        self.conf = self.path("slurm.conf")
        st = self.state or {}
        self.prefix, self.subnet, self.nodes = st.get("prefix"), st.get("subnet"), st.get("nodes", 0)
        self.munge = st.get("munge_dir")

    def node(self, i):
        return netns.ns_name(self.prefix, i)

    def exec_argv(self, i, cmd):
        """argv running cmd in node i under its host name, with this cluster's slurm.conf."""
        return netns.exec_argv(i, ["env", f"SLURM_CONF={self.conf}", *cmd], self.prefix)

    # -- status ---------------------------------------------------------------------------------
    def daemons(self):
        """[(name, pid or None, alive)] for munged, slurmctld and each slurmd, from their pid files."""
        files = [("munged", os.path.join(self.munge or self.dir, "munged.pid")), ("slurmctld", "run/slurmctld.pid")]
        files += [(f"slurmd {self.node(i)}", f"run/slurmd-{self.node(i)}.pid") for i in range(self.nodes)]
        out = []
        for name, rel in files:
            try:
                with open(self.path(rel)) as f:
                    pid = int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pid = None
            ours = (self.munge if name == "munged" else self.dir) + "/"
            out.append((name, pid, pid is not None and alive(pid) and ours in " ".join(procs.proc_cmdline(pid) or [])))
        return out

    def summary(self):
        daemons = self.daemons() if self.state else []
        have = netns.existing(self.prefix)[0] if self.prefix else []
        running = bool(daemons) and all(up for _, _, up in daemons) and len(have) == self.nodes
        anything = bool(self.state) or bool(have) or bool(live_pids(self.dir + "/"))
        return {"dir": self.dir, "conf": self.conf, "prefix": self.prefix, "subnet": self.subnet,
                "nodes": self.nodes, "state": "running" if running else ("partial" if anything else "stopped"),
                "namespaces": have, "daemons": [{"name": n, "pid": p, "alive": a} for n, p, a in daemons]}

    def sinfo(self):
        """sinfo -N lines ("NODE STATE"), asked inside node 0."""
        done = self.run(self.exec_argv(0, ["sinfo", "-h", "-N", "-o", "%N %t"]), timeout=20, check=False)
        return done.stdout.splitlines() if done.returncode == 0 else [f"sinfo failed: {procs.one_line(done.stderr)}"]

    def report(self):
        s = self.summary()
        if s["state"] == "running":
            s["sinfo"] = self.sinfo()
        return s

    def describe(self, s):
        lines = [f"{d['name']}: pid {d['pid'] or '-'} {'running' if d['alive'] else 'not running'}"
                 for d in s["daemons"]]
        return [f": {s['nodes']} nodes {self.prefix}-node0..{s['nodes'] - 1} on {s['subnet']}, conf {self.conf}",
                *lines, *(f"sinfo: {ln}" for ln in s.get("sinfo", []))]

    # -- up -------------------------------------------------------------------------------------
    def install(self):
        """apt-get install Slurm and munge when a program is missing; no packaged daemon starts (policy-rc.d)."""
        if all(shutil.which(p) for p in ("slurmctld", "slurmd", "sinfo", "munged", "mungekey")):
            return
        self.log(f"installing {' '.join(APT)} (apt-get, no recommends; their services are not started)")
        policy = not os.path.exists(POLICY_RC)
        if policy:
            write_new(POLICY_RC, lambda f: f.write("#!/bin/sh\n# written by slurm-cluster for one apt-get install: "
                                                   "start no service\nexit 101\n"), "policy-rc.d", mode=0o755)
        try:
            apt = ["env", "DEBIAN_FRONTEND=noninteractive", "apt-get", "install", "-y", "-q", "--no-install-recommends"]
            if self.run(apt + list(APT), timeout=600, check=False).returncode != 0:
                self.run(["apt-get", "update", "-q"], timeout=600)
                self.run(apt + list(APT), timeout=600)
        finally:
            if policy:
                os.unlink(POLICY_RC)

    def up(self, args):
        t0 = time.monotonic()
        if args.nodes < 2 or args.cpus < 1:
            raise Fail(f"--nodes must be at least 2 and --cpus at least 1, got {args.nodes} and {args.cpus}")
        s = self.running()
        if s:
            if s["nodes"] != args.nodes or (args.prefix, args.subnet) != (self.prefix, self.subnet):
                raise Fail(f"{self.dir} already runs {s['nodes']} nodes {self.prefix}-node* on {self.subnet}; "
                           f"run '{PROG} down --dir {self.dir}' first")
            self.log(f"already up: {s['nodes']} nodes {self.prefix}-node0..{s['nodes'] - 1}, conf {self.conf}")
            return
        if netns.existing(args.prefix)[0]:
            raise Fail(f"namespaces {args.prefix}-node* exist and are not this cluster's: choose another --prefix")
        self.need("ip", "unshare", "runuser")
        self.install()
        self.prefix, self.subnet, self.nodes = args.prefix, args.subnet, args.nodes
        self.munge = os.path.join(MUNGE_BASE, self.prefix)
        self.claim(prefix=self.prefix, subnet=self.subnet, nodes=self.nodes, rate=args.rate, cpus=args.cpus,
                   prolog=args.prolog and os.path.abspath(args.prolog), munge_dir=self.munge)
        netns.up(self.nodes, args.rate, self.prefix, self.subnet)
        self.start_munged()
        self.write_conf()
        self.run(self.exec_argv(0, ["slurmctld", "-f", self.conf]), timeout=30)
        for i in range(self.nodes):
            self.run(self.exec_argv(i, ["slurmd", "-N", self.node(i), "-f", self.conf]), timeout=30)
        self.wait_idle()
        self.log(f"up in {time.monotonic() - t0:.1f} s: {self.nodes} nodes {self.prefix}-node0..{self.nodes - 1} "
                 f"idle on {self.subnet} (partition {PARTITION}, conf {self.conf}); "
                 f"run clients with: {PROG} exec{dir_arg(self.dir)} 0 -- sinfo")

    def start_munged(self):
        """A munged of this cluster's own (key, socket, pid, log in MUNGE_BASE/PREFIX), run as the munge user."""
        os.makedirs(MUNGE_BASE, mode=0o711, exist_ok=True)
        trusted_dir(MUNGE_BASE, "munge's base directory")
        d = self.munge
        try:
            os.mkdir(d)
        except FileExistsError:
            raise Fail(f"{d} exists: another cluster with --prefix {self.prefix} runs munged there") from None
        os.chmod(d, 0o711)  # munged wants the socket's directory executable by all, writable by none but it
        self.run(["mungekey", "-c", "-k", f"{d}/munge.key"])
        shutil.chown(d, "munge", "munge")
        shutil.chown(f"{d}/munge.key", "munge", "munge")
        self.run(["runuser", "-u", "munge", "--", "munged", f"--socket={d}/socket", f"--key-file={d}/munge.key",
                  f"--pid-file={d}/munged.pid", f"--log-file={d}/munged.log", f"--seed-file={d}/munged.seed"])

    def write_conf(self):
        nodes = "\n".join(f"NodeName={self.node(i)} NodeAddr={netns.node_addr(i, self.subnet)} "
                          f"CPUs={self.state['cpus']} State=UNKNOWN" for i in range(self.nodes))
        for sub in ("ctld", "log", "run", *(f"spool/{self.node(i)}" for i in range(self.nodes))):
            os.makedirs(self.path(sub), exist_ok=True)  # slurmd does not create its spool directory
        prolog = f"Prolog={self.state['prolog']}\nPrologFlags=Alloc\n" if self.state.get("prolog") else ""
        write_new_text(self.conf, CONF.format(prog=PROG, dir=self.dir, munge=self.munge, head=self.node(0),
                                              prolog=prolog, nodes=nodes,
                                              head_addr=netns.node_addr(0, self.subnet), partition=PARTITION), "conf")
        write_new_text(self.path("cgroup.conf"), CGROUP_CONF, "conf")

    def wait_idle(self):
        deadline = time.monotonic() + UP_TIMEOUT
        while True:
            lines = self.sinfo()
            idle = [ln for ln in lines if ln.split()[-1:] == ["idle"]]
            if len(idle) == self.nodes:
                return
            if time.monotonic() > deadline:
                raise Fail(f"{len(idle)} of {self.nodes} nodes idle after {UP_TIMEOUT} s ({'; '.join(lines)}); "
                           f"{self.log_tail()}")
            time.sleep(0.2)

    def log_tail(self):
        """The last error lines of the daemons' logs, for the one line a failed `up` prints."""
        said = []
        for name in sorted(os.listdir(self.path("log"))) + [os.path.join(self.munge, "munged.log")]:
            try:
                with open(self.path("log", name), errors="replace") as f:
                    lines = [ln.strip() for ln in f.readlines()[-40:] if "error" in ln.lower()]
            except OSError:
                continue
            if lines:
                said.append(f"{os.path.basename(name)}: {lines[-1]}")
        return "; ".join(said) or "no error in the daemons' logs"

    # -- down -----------------------------------------------------------------------------------
    def teardown(self):
        """SIGTERM by PID the daemons up started (pid files, and whatever runs with a path in DIR), SIGKILL after
        KillWait's 5 s; then the namespaces (ending the jobs' processes inside) and their blackhole route."""
        said = []
        pids = {pid for _, pid, up in self.daemons() if up} | set(live_pids(self.dir + "/"))
        pids |= set(live_pids(self.munge + "/")) if self.munge else set()
        for pid in pids:
            procs.kill(pid, signal.SIGTERM)
        end = time.monotonic() + 5
        while time.monotonic() < end and any(alive(p) for p in pids):
            time.sleep(0.05)
        for pid in pids:
            procs.kill(pid, signal.SIGKILL)
        if pids:
            said.append(f"stopped {len(pids)} daemons")
        if self.munge and os.path.isdir(self.munge) and not os.path.islink(self.munge):
            shutil.rmtree(self.munge)   # recorded in the state file before up made it
            said.append(f"removed {self.munge}")
            with contextlib.suppress(OSError):   # the base too, when no other cluster's munged is there
                os.rmdir(MUNGE_BASE)
        if self.prefix and netns.existing(self.prefix)[0]:
            _, ended = netns.down(self.prefix)
            said.append(f"removed {self.nodes} nodes {self.prefix}-node*" + (f" ({ended} processes ended)"
                                                                             if ended else ""))
        return said


def dir_arg(d):
    """' --dir D' where D is not the default one (the hint `up` prints must work as printed), else ''."""
    return "" if os.path.realpath(d) == os.path.realpath(DEFAULT_DIR) else f" --dir {shlex.quote(d)}"


def command(args):
    cluster = SlurmCluster(args.dir)
    if args.cmd != "exec":
        return cluster.command(args)
    cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd:
        raise Fail("exec needs a command: exec NODE -- CMD...")
    if not cluster.state:
        raise Fail(f"no cluster in {cluster.dir} (run: {PROG} up)")
    if not 0 <= args.node < cluster.nodes:
        raise Fail(f"no node {args.node}: the cluster has nodes 0..{cluster.nodes - 1}")
    if cluster.node(args.node) not in netns.existing(cluster.prefix)[0]:  # a dead daemon is no reason to refuse
        raise Fail(f"node {args.node} ({cluster.node(args.node)}) is gone; run '{PROG} down --dir {cluster.dir}'")
    argv = cluster.exec_argv(args.node, cmd)
    os.execvp(argv[0], argv)


def main(argv=None):
    cli = Cli(PROG, __doc__, EPILOG, "--dir", default=DEFAULT_DIR,
              help="holds slurm.conf, munge, spool, logs (default %(default)s)")
    p_up = cli.command("up", "start the cluster; returns once every node is idle")
    p_up.add_argument("--nodes", type=int, default=2)
    p_up.add_argument("--rate", default=None, help="tbf rate of every node's link, e.g. 1gbit")
    p_up.add_argument("--cpus", type=int, default=os.cpu_count(),
                      help="CPUs each node offers (default this machine's %(default)s; more lets jobs share nodes)")
    p_up.add_argument("--prefix", default=DEFAULT_PREFIX, type=netns.prefix_arg, help="namespace name prefix (default %(default)s)")
    p_up.add_argument("--subnet", default=DEFAULT_SUBNET, help="the nodes' private subnet (default %(default)s)")
    p_up.add_argument("--prolog", metavar="PATH", help="a program every node runs before each job (Prolog=PATH, "
                      "PrologFlags=Alloc: at allocation, before the first step)")
    cli.command("down", "stop the daemons, remove the nodes and what up wrote")
    cli.status_command()
    p_exec = cli.command("exec", "run a command on a node: exec NODE -- CMD...")
    p_exec.add_argument("node", type=int)
    p_exec.add_argument("command", nargs=argparse.REMAINDER)
    return cli.main(argv, command)
