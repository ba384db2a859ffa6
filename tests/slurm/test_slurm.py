"""commbench under a real Slurm (scripts/slurm-cluster, 2 namespace nodes): the cluster script, the launcher in
salloc and sbatch (Gloo through torchrun, MPI through mpirun), the sbatch template as shipped, two jobs sharing
the nodes, node lists, and a job ended by scancel or by its time limit."""
import json
import os
import signal
import subprocess
import threading
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
# 1M..32M x 1000 iterations: minutes on this machine (>= 4 unloaded), so the job's end comes mid-sweep
LONG = "--collective all_reduce -b 1M -e 32M -f 2 -n 1000 -w 1"


def records(path):
    """The complete lines of a record file (a run may be writing its next one)."""
    return [json.loads(line) for line in open(path) if line.endswith("\n")]


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
    assert slurm_cluster("status", "--dir", f"{cluster.dir}-none").returncode == 3  # stopped: nothing there
    theirs = cluster.work / "theirs"
    theirs.mkdir()
    (theirs / "data").write_text("not ours")
    refused = slurm_cluster("down", "--dir", theirs)
    assert refused.returncode == 1 and "holds no slurm-cluster state; not touching it" in refused.stderr
    assert (theirs / "data").read_text() == "not ours"
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


SPEC = """\
topology: localhost
checks:
  - name: all_reduce-2node
    kind: commbench
    collective: all_reduce
    nodes: 2
    nproc_per_node: 1
    min_bytes: 1M
    max_bytes: 4M
    step_factor: 4
    iters: 3
    warmup: 1
    thresholds:
      - wrong == 0
      - busbw >= {busbw} GB/s at 4M
"""
IO_CHECK = """\
  - name: checkpoint-io
    kind: iobench
    mounts: [{mount}]
    profiles: [shard-write]
    quick: true
    size: 16M
    ranks: 1
    thresholds:
      - shard-write MB/s >= 1
"""


def test_iobench_and_accept_templates_exit_codes(cluster, tmp_path, capsys):
    """iobench.sbatch: every node's records merged; accept.sbatch: 0 pass, 1 fail (a bound no link meets), 2 a
    spec that cannot run. The three accept jobs share the nodes at once."""
    mount = tmp_path / "mount"
    mount.mkdir()
    iob = cluster.sbatch("--exclusive=user", "--partition=debug", str(ROOT / "scripts/slurm/iobench.sbatch"),
                         env={"IOBENCH": str(BIN / "iobench"), "MOUNTS": str(mount),
                              "ARGS": "--quick --ranks 1 --size 16M --profile shard-write"})
    iob_end = cluster.wait_job(iob, timeout=120)[1]  # before the accept jobs: one iobench per mount at a time
    (cluster.work / "pass.yaml").write_text(SPEC.format(busbw=0.001) + IO_CHECK.format(mount=mount))
    (cluster.work / "fail.yaml").write_text(SPEC.format(busbw=1000))  # one iobench per mount at a time
    (cluster.work / "bad.yaml").write_text("checks: [{kind: nonsense}]\n")
    acc = {name: cluster.sbatch("--exclusive=user", *EDITS, str(ROOT / "scripts/slurm/accept.sbatch"),
                                cluster.work / f"{name}.yaml", env={"COMMBENCH": COMMBENCH})
           for name in ("pass", "fail", "bad")}
    ends = {"iobench": iob_end, **{name: cluster.wait_job(j, timeout=180)[1] for name, j in acc.items()}}
    logs = {name: (cluster.work / f"{'iobench' if name == 'iobench' else 'accept'}-{j}.log").read_text()
            for name, j in {"iobench": iob, **acc}.items()}
    assert ends == {"iobench": 0, "pass": 0, "fail": 1, "bad": 2}, logs
    merged = records(cluster.work / f"iobench-{iob}.jsonl")
    assert sorted(h for r in merged for h in r["hosts"]) == cluster.nodes, merged
    assert f"iobench: every node (2) measured {mount}" in logs["iobench"]
    for name in ("pass", "fail"):
        verdict = json.loads((cluster.work / f"accept-{acc[name]}" / "verdict.json").read_text())
        assert verdict
    with capsys.disabled():
        for name, log in logs.items():
            print(f"\n[{name} job log, exit {ends[name]}]\n" + "\n".join(log.splitlines()[-12:]))


STALLED = """\
checks:
  - name: stalled-rank
    kind: commbench
    collective: all_reduce
    nodes: 2
    nproc_per_node: 1
    min_bytes: 1M
    max_bytes: 1M
    iters: 20
    warmup: 1
    hang_timeout: 5
    env: {COMMBENCH_TEST_STALL: "1:3"}
    thresholds:
      - wrong == 0
"""


def test_accept_on_fail_drain_drains_the_node_the_check_names_and_no_other(cluster, tmp_path, capsys):
    """accept.sbatch with ON_FAIL=drain: rank 1 stops before its third operation (a test hook), rank 0's watchdog
    names it; the job exits 1, Slurm shows node 1 drained with the check as the reason, node 0 untouched. (A pairs
    check names its bad nodes the same way: tests/netns/test_pairs.py judges that verdict through accept.)"""
    (cluster.work / "stalled.yaml").write_text(STALLED)
    try:
        job = cluster.sbatch("--exclusive=user", *EDITS, str(ROOT / "scripts/slurm/accept.sbatch"),
                             cluster.work / "stalled.yaml", env={"COMMBENCH": COMMBENCH, "ON_FAIL": "drain"})
        state, code = cluster.wait_job(job, timeout=180)
        log = (cluster.work / f"accept-{job}.log").read_text()
        reasons = cluster.run("sinfo", "-R", "-h", "-o", "%N|%E").stdout
        assert code == 1, log
        verdict = json.loads((cluster.work / f"accept-{job}" / "verdict.json").read_text())
        assert [(d["node"], d["drained"]) for d in verdict["drained"]] == [(cluster.nodes[1], True)], verdict
        drained = dict(line.split("|", 1) for line in reasons.splitlines())
        assert list(drained) == [cluster.nodes[1]], reasons
        assert drained[cluster.nodes[1]].startswith("commbench accept: stalled-rank: "), reasons
        assert f"accept: drained {cluster.nodes[1]}: " in log, log
    finally:
        resume = cluster.run("scontrol", "update", f"NodeName={cluster.nodes[1]}", "State=RESUME")
    assert resume.returncode == 0, resume.stderr
    with capsys.disabled():
        print(f"\n[accept --on-fail drain job, exit {code}]\n" + "\n".join(log.splitlines()[-6:]) +
              f"\n[sinfo -R]\n{reasons}")


def test_healthcheck_drains_its_own_node_when_its_check_fails(cluster, tmp_path, capsys):
    """scripts/slurm/healthcheck run on node 1 as slurmd runs a HealthCheckProgram (SLURMD_NODENAME set): with the
    shipped spec it passes and drains nobody; with a bound no node meets it drains node 1 alone, the check's
    measurement as the reason."""
    failing = tmp_path / "health-fail.yaml"
    shipped = (ROOT / "acceptance/healthcheck.yaml").read_text()
    # an absolute bound: this CPU node's loopback has no ceiling, so a 'x link peak' bound is n/a here (skipped)
    failing.write_text(shipped.replace("0.5 x link peak", "1000 GB/s"))
    env = {"COMMBENCH": COMMBENCH, "SLURMD_NODENAME": cluster.nodes[1], "PYTHON": str(BIN / "python")}
    try:
        ok = cluster.run(str(ROOT / "scripts/slurm/healthcheck"), node=1, env=env, timeout=120)
        assert ok.returncode == 0 and cluster.run("sinfo", "-R", "-h").stdout == "", ok.stdout + ok.stderr
        bad = cluster.run(str(ROOT / "scripts/slurm/healthcheck"), node=1, env={**env, "SPEC": str(failing)},
                          timeout=120)
        reasons = cluster.run("sinfo", "-R", "-h", "-o", "%N|%E").stdout
    finally:
        cluster.run("scontrol", "update", f"NodeName={cluster.nodes[1]}", "State=RESUME")
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert reasons.startswith(f"{cluster.nodes[1]}|commbench healthcheck: node-all_reduce: measured busbw_gbps "), \
        reasons
    assert len(reasons.splitlines()) == 1, reasons
    with capsys.disabled():
        print(f"\n[healthcheck on {cluster.nodes[1]}, a bound no node meets]\n{bad.stdout.strip()}\n"
              f"[sinfo -R]\n{reasons}")


@pytest.fixture(scope="module", autouse=True)
def limited(cluster):
    """The time-limit job, submitted before the first test: its minute runs beside the other tests' jobs. A thread
    keeps the record count seen while it ran: the count just before Slurm's SIGTERM."""
    job = cluster.sbatch("--time=1", "--exclusive=user", *EDITS, TEMPLATE, env={"COMMBENCH": COMMBENCH, "ARGS": LONG})
    out, seen = cluster.work / f"commbench-{job}.jsonl", {"before": 0}

    def sample():
        while cluster.job(job).get("JobState") in ("PENDING", "RUNNING", "CONFIGURING"):
            seen["before"] = len(measured(out)) if out.exists() else 0
            time.sleep(0.5)
    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    yield job, out, seen, thread


def test_time_limit_and_scancel_keep_records_exit_143(cluster, limited, capsys):
    """Slurm's SIGTERM (time limit; scancel): the records kept, the table and one error line, exit 143, and no
    process left on any node."""
    job, out, seen, thread = limited
    cancelled = cluster.sbatch("--exclusive=user", *EDITS, TEMPLATE, env={"COMMBENCH": COMMBENCH, "ARGS": LONG})
    outs = {job: out, cancelled: cluster.work / f"commbench-{cancelled}.jsonl"}
    deadline = time.monotonic() + 60
    while not (outs[cancelled].exists() and measured(outs[cancelled])) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert cluster.run("scancel", cancelled).returncode == 0
    ends = {j: cluster.wait_job(j, timeout=150) for j in outs}
    thread.join(timeout=10)
    assert ends == {job: ("TIMEOUT", 143), cancelled: ("CANCELLED", 143)}, (
        ends, cluster.job(job).get("ExitCode"), (cluster.work / f"commbench-{job}.log").read_text()[-3000:])
    for j, path in outs.items():
        log = (cluster.work / f"commbench-{j}.log").read_text()
        assert 1 <= len(measured(path)) < 7 and "#wrong" in log and "error: terminated by SIGTERM" in log, log
        check_two_nodes(measured(path), cluster, "gloo")
    assert len(measured(out)) >= seen["before"] >= 1
    deadline = time.monotonic() + 10
    while cluster.processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cluster.processes() == []
    with capsys.disabled():
        print(f"\n[time limit] records before SIGTERM {seen['before']}, after {len(measured(out))}; log tail:\n"
              + "\n".join((cluster.work / f"commbench-{job}.log").read_text().splitlines()[-4:]))


def test_dead_slurmd_mid_run_names_the_node(cluster):
    """Node 1's slurmd killed once the first record is on disk: Slurm marks the node down (SlurmdTimeout 10 s) and
    ends the job; commbench keeps the records and names the node as Slurm does. Last: the node stays down."""
    job = cluster.sbatch("--no-requeue", "--exclusive=user", *EDITS, TEMPLATE,
                         env={"COMMBENCH": COMMBENCH, "ARGS": LONG})
    out = cluster.work / f"commbench-{job}.jsonl"
    deadline = time.monotonic() + 60
    while not (out.exists() and measured(out)) and time.monotonic() < deadline:
        time.sleep(0.3)
    with open(f"{cluster.dir}/run/slurmd-{cluster.nodes[1]}.pid") as f:
        os.kill(int(f.read()), signal.SIGKILL)
    state, code = cluster.wait_job(job, timeout=90)
    log = (cluster.work / f"commbench-{job}.log").read_text()
    assert (state, code) == ("NODE_FAIL", 143), log
    assert f"error: Slurm node {cluster.nodes[1]} is down* (Not responding)" in log, log
    assert measured(out) and all(r["wrong"] == 0 for r in measured(out))
