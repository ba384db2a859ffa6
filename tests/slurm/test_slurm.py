"""commbench under a real Slurm (scripts/slurm-cluster, 2 namespace nodes): the cluster script, the launcher in
salloc and sbatch (Gloo through torchrun, MPI through mpirun), the sbatch template as shipped, two jobs sharing
the nodes, node lists, and a job ended by scancel or by its time limit."""
import json
import subprocess
import time

import pytest

from commbench.launch.slurm import expand_nodelist
from tests.conftest import BIN, ROOT
from tests.slurm.conftest import SUBNET, needs_slurm, slurm_cluster

pytestmark = [pytest.mark.slow, pytest.mark.root, needs_slurm]

COMMBENCH = str(BIN / "commbench")
TEMPLATE = str(ROOT / "scripts" / "slurm" / "commbench.sbatch")
EDITS = ["--gpus-per-node=0", "--partition=debug"]  # the template's EDIT lines, set through sbatch options
SHORT = ["-b", "1M", "-e", "4M", "-f", "4", "-n", "3", "-w", "1", "--timeout", "30", "--rdzv-timeout", "30"]
# 1M..64M x 100 iterations: minutes on this machine, so the job's end comes mid-sweep
LONG = "--collective all_reduce -b 1M -e 64M -f 2 -n 100 -w 1"


def records(path):
    return [json.loads(line) for line in open(path) if line.strip()]


def measured(path):
    return [r for r in records(path) if not r.get("event")]


def check_two_nodes(recs, cluster, backend):
    assert recs and all(r["hosts"] == cluster.nodes and r["launcher"] == "slurm" and r["nodes"] == 2
                        and r["wrong"] == 0 and r["backend"] == backend for r in recs), recs


def test_cluster_status_exec_and_blackhole(cluster, capsys):
    st = slurm_cluster("status", "--dir", cluster.dir)
    assert st.returncode == 0, st.stdout + st.stderr
    assert all(f"sinfo: {n} idle" in st.stdout for n in cluster.nodes), st.stdout
    route = subprocess.run(["ip", "route", "show", "exact", SUBNET], capture_output=True, text=True).stdout
    assert route.startswith("blackhole"), route  # a client run in the host namespace by mistake goes nowhere
    assert sorted(cluster.run("srun", "-N2", "hostname").stdout.split()) == cluster.nodes
    bad = slurm_cluster("exec", "--dir", cluster.dir, 5, "--", "true")
    assert bad.returncode == 1 and bad.stderr == "slurm-cluster: error: no node 5: the cluster has nodes 0..1\n"
    with capsys.disabled():
        print("\n[sinfo after up]\n" + cluster.run("sinfo").stdout)


@pytest.mark.parametrize("nodelist", ["n[0-3]", "gpu[001-004,007],cpu1", "r[1-2]n[08-10]", "a,b[1-2]"])
def test_nodelist_parser_agrees_with_scontrol(cluster, nodelist):
    done = cluster.run("scontrol", "show", "hostnames", nodelist)
    assert done.returncode == 0 and expand_nodelist(nodelist) == done.stdout.split()


def test_ring_in_salloc_gloo_and_sbatch_wait_mpi(cluster):
    gloo, mpi = cluster.work / "gloo.jsonl", cluster.work / "mpi.jsonl"
    done = cluster.run("salloc", "-N2", COMMBENCH, "ring", *SHORT, "--out", gloo, timeout=120)
    assert done.returncode == 0, done.stderr
    check_two_nodes(measured(gloo), cluster, "gloo")
    wrap = " ".join([COMMBENCH, "ring", "--backend", "mpi", *SHORT, "--out", str(mpi)])
    done = cluster.run("sbatch", "--wait", "-N2", "--output", cluster.work / "mpi.log", "--wrap", wrap, timeout=180)
    assert done.returncode == 0, (done.stderr, (cluster.work / "mpi.log").read_text())
    check_two_nodes(measured(mpi), cluster, "mpi")


def test_template_two_jobs_at_once_on_the_same_nodes(cluster, capsys):
    """Each job's rendezvous on node 0 at its own port (the port's class of collision: test_nodelist.py)."""
    env = {"COMMBENCH": COMMBENCH, "ARGS": "--collective all_reduce " + " ".join(SHORT[:10])}
    jobs = [cluster.sbatch("--exclusive=user", *EDITS, TEMPLATE, env=env) for _ in range(2)]
    ends = [cluster.wait_job(j) for j in jobs]
    infos = [cluster.job(j) for j in jobs]
    assert ends == [("COMPLETED", 0)] * 2, [(cluster.work / f"commbench-{j}.log").read_text() for j in jobs]
    assert infos[1]["StartTime"] < infos[0]["EndTime"]  # they ran at the same time
    for j in jobs:
        check_two_nodes(measured(cluster.work / f"commbench-{j}.jsonl"), cluster, "gloo")
    with capsys.disabled():
        print(f"\n[commbench.sbatch job {jobs[0]} log]\n" + (cluster.work / f"commbench-{jobs[0]}.log").read_text())


def test_time_limit_and_scancel_keep_records_exit_143(cluster, capsys):
    env = {"COMMBENCH": COMMBENCH, "ARGS": LONG}
    limited = cluster.sbatch("--time=1", "--exclusive=user", *EDITS, TEMPLATE, env=env)
    cancelled = cluster.sbatch("--exclusive=user", *EDITS, TEMPLATE, env=env)
    out = {j: cluster.work / f"commbench-{j}.jsonl" for j in (limited, cancelled)}
    deadline = time.monotonic() + 60
    while not (out[cancelled].exists() and measured(out[cancelled])) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert cluster.run("scancel", cancelled).returncode == 0
    before = 0
    while cluster.job(limited)["JobState"] == "RUNNING":  # the record count just before Slurm's SIGTERM
        before = len(measured(out[limited])) if out[limited].exists() else 0
        time.sleep(0.5)
    ends = {j: cluster.wait_job(j) for j in out}
    assert ends == {limited: ("TIMEOUT", 143), cancelled: ("CANCELLED", 143)}, ends
    for j in out:
        log = (cluster.work / f"commbench-{j}.log").read_text()
        recs = measured(out[j])
        assert 1 <= len(recs) < 7 and "#wrong" in log and "error: terminated by SIGTERM" in log, log
        check_two_nodes(recs, cluster, "gloo")
    assert len(measured(out[limited])) >= before >= 1
    deadline = time.monotonic() + 10
    while cluster.processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cluster.processes() == []
    with capsys.disabled():
        print(f"\n[time limit] records before SIGTERM {before}, after {len(measured(out[limited]))}; "
              f"log tail:\n" + "\n".join((cluster.work / f"commbench-{limited}.log").read_text().splitlines()[-4:]))
