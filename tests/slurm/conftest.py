"""A real 4-node Slurm cluster (scripts/slurm-cluster) for the module: its own namespace prefix, subnet and
directory, private to this test process, always taken down (daemons, namespaces, blackhole route, files), also
when a test fails; the clusters of killed test runs are removed first. Its Prolog (PrologFlags=Alloc) runs
scripts/slurm/healthcheck, as the script's header documents, while a test arms it (Cluster.arm_prolog); otherwise
it does nothing."""
import contextlib
import os
import re
import shlex
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from benchcore.emulate import netns
from benchcore.processes import procs
from tests.conftest import BIN, ROOT
from tests.storage_fixtures import cephfs_mount  # noqa: F401  (a shared file system for the health check)

SLURM_CLUSTER = ROOT / "scripts" / "slurm-cluster"
STEM = "slt"                 # namespaces slt<pid>-node*, directory /tmp/slt<pid>
SUBNET = "10.226.0.0/24"     # apart from netns tests (10.213) and other Slurm runs (10.214)
NODES = 4                    # most jobs take 2 (the templates' default); the pairs + drain job takes all 4
PROLOG = """#!/bin/sh
# the module's Prolog: nothing, or scripts/slurm/healthcheck while a test has written {armed}
[ -f {armed} ] || exit 0
set -a
. {armed}
exec {healthcheck} > "{work}/prolog-$SLURMD_NODENAME-$SLURM_JOB_ID.log" 2>&1
"""


def can_slurm():
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("ip", "tc", "unshare", "runuser")):
        return False
    return subprocess.run(["ip", "netns", "list"], capture_output=True, timeout=10).returncode == 0


needs_slurm = pytest.mark.skipif(not can_slurm(), reason="needs root with ip netns, unshare and runuser")


def slurm_cluster(*args, timeout=120):
    return subprocess.run([str(SLURM_CLUSTER), *map(str, args)], capture_output=True, text=True, timeout=timeout)


def reap():
    """Take down the clusters of test runs whose process is gone."""
    for d in Path("/tmp").glob(f"{STEM}[0-9]*"):
        pid = re.fullmatch(STEM + r"(\d+)", d.name)
        if pid and not Path(f"/proc/{pid.group(1)}").exists():
            slurm_cluster("down", "--dir", d)
            shutil.rmtree(d, ignore_errors=True)
    netns.reap(STEM)


class Cluster:
    """The nodes of a running cluster; clients run inside node 0 (or another), in a work directory."""

    def __init__(self, d, prefix, work):
        self.dir, self.prefix, self.work = d, prefix, work
        self.nodes = [netns.ns_name(prefix, i) for i in range(NODES)]
        self.conf = f"{d}/slurm.conf"
        self.armed = work / "prolog.env"

    @contextlib.contextmanager
    def arm_prolog(self, **env):
        """Within: every job's Prolog is scripts/slurm/healthcheck with env (SPEC, COMMBENCH, ...)."""
        self.armed.write_text("".join(f"{k}={shlex.quote(str(v))}\n" for k, v in env.items()))
        try:
            yield
        finally:
            self.armed.unlink()

    def argv(self, *cmd, node=0):
        return [str(SLURM_CLUSTER), "exec", "--dir", self.dir, str(node), "--", *map(str, cmd)]

    def run(self, *cmd, node=0, timeout=120, env=None):
        """A client (sbatch, salloc, srun, scontrol, sinfo) inside a node, in the work directory."""
        return subprocess.run(self.argv(*cmd, node=node), capture_output=True, text=True, timeout=timeout,
                              cwd=self.work, env={**os.environ, **(env or {})})

    def spawn(self, *cmd, node=0, env=None, log="spawn"):
        out = open(self.work / f"{log}.out", "w")
        return subprocess.Popen(self.argv(*cmd, node=node), stdout=out, stderr=subprocess.STDOUT, cwd=self.work,
                                env={**os.environ, **(env or {})}, start_new_session=True)

    def commbench(self):
        return str(BIN / "commbench")

    def sbatch(self, *args, env=None):
        """Submit (no --wait: scontrol is polled, faster than sbatch's back-off); the job id."""
        done = self.run("sbatch", "--parsable", *args, env=env)
        assert done.returncode == 0, done.stderr
        return int(done.stdout.strip().split(";")[0])

    def job(self, job_id):
        """{field: value} of `scontrol show job` (completed jobs stay listed for MinJobAge, 300 s)."""
        text = self.run("scontrol", "show", "job", "-o", job_id).stdout
        return dict(w.split("=", 1) for w in text.split() if "=" in w)

    def wait_job(self, job_id, timeout=120):
        """Wait for the job's end; (JobState, exit code of the batch script)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = self.job(job_id)
            if info.get("JobState") not in (None, "PENDING", "RUNNING", "COMPLETING", "CONFIGURING"):
                return info["JobState"], int(info["ExitCode"].split(":")[0])
            time.sleep(0.3)
        raise AssertionError(f"job {job_id} still running after {timeout} s")

    def processes(self, nodes=None):
        """Processes left in the nodes (default: all) other than Slurm's daemons."""
        left = []
        for ns in nodes or self.nodes:
            for pid in netns.ns_pids(ns):
                argv = " ".join(procs.proc_cmdline(pid) or [])
                if argv and not re.search(r"slurmctld|slurmd|slurmscriptd", argv):
                    left.append(f"{ns}: {pid} {argv[:100]}")
        return left

    def job_nodes(self, job_id):
        """The nodes a job ran on, in Slurm's order (its first is the batch host)."""
        return self.run("scontrol", "show", "hostnames", self.job(job_id)["NodeList"]).stdout.split()

    def resume(self):
        """Every drained node back in service (scontrol refuses RESUME for a node that is not drained)."""
        drained = [n for n, st in self.states().items() if st.startswith("drain") or st == "drng"]
        done = self.run("scontrol", "update", f"NodeName={','.join(drained)}", "State=RESUME") if drained else None
        assert done is None or done.returncode == 0, done.stderr

    def states(self):
        """{node: state} as sinfo says (idle, drain, down*...)."""
        return dict(line.split() for line in self.run("sinfo", "-h", "-N", "-o", "%N %t").stdout.splitlines())


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    reap()
    d = f"/tmp/{STEM}{os.getpid()}"
    prefix = f"{STEM}{os.getpid()}"
    try:
        work = tmp_path_factory.mktemp("slurm-work")
        prolog = work / "prolog"
        prolog.write_text(PROLOG.format(armed=work / "prolog.env", healthcheck=ROOT / "scripts/slurm/healthcheck",
                                        work=work))
        prolog.chmod(0o755)
        # 4 CPUs a node: the time-limit job runs beside the other tests' jobs (each takes one CPU a node)
        up = slurm_cluster("up", "--nodes", NODES, "--cpus", 4, "--dir", d, "--prefix", prefix, "--subnet", SUBNET,
                           "--prolog", prolog)
        assert up.returncode == 0, up.stderr
        yield Cluster(d, prefix, work)
    finally:
        down = slurm_cluster("down", "--dir", d)
        shutil.rmtree(d, ignore_errors=True)
        netns.down(prefix)
        assert down.returncode == 0, down.stderr
