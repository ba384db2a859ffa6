"""commbench under a real Slurm (scripts/slurm-cluster, 4 namespace nodes; most jobs take 2): the cluster script,
the launcher in salloc and sbatch (Gloo through torchrun, MPI through mpirun), the sbatch templates as shipped, two
jobs sharing the nodes, node lists, a job ended by scancel, by its time limit or by a node Slurm lost (a dead slurmd,
a cut link), accept draining the nodes its checks name (a hung rank, a storage check, pairs' slow node on 4
nodes), and scripts/slurm/healthcheck as a HealthCheckProgram and as the documented Prolog: a node drained for its
own fault alone (never for shared storage or a check that could not run), and resumed once its check passes."""
import contextlib
import json
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from unittest import mock

import pytest

from benchcore.emulate import netns
from commbench.commands.accept import drain
from commbench.commands.accept.spec import load_spec
from commbench.launch.slurm import expand_nodelist
from tests.conftest import BIN, HOOKS_ON, ROOT
from tests.slurm.conftest import STEM, SUBNET, needs_slurm, slurm_cluster

pytestmark = [pytest.mark.slow, pytest.mark.root, needs_slurm]

COMMBENCH = str(BIN / "commbench")
HEALTHCHECK = str(ROOT / "scripts" / "slurm" / "healthcheck")
TEMPLATE = str(ROOT / "scripts" / "slurm" / "commbench.sbatch")
EDITS = ["--gpus-per-node=0", "--partition=debug"]  # the template's EDIT lines, set through sbatch options
SHORT = ["-b", "1M", "-e", "4M", "-f", "4", "-n", "3", "-w", "1", "--timeout", "30", "--rdzv-timeout", "30"]
# 1M..32M x 1000 iterations: minutes on this machine (>= 4 unloaded), so the job's end comes mid-sweep
LONG = "--collective all_reduce -b 1M -e 32M -f 2 -n 1000 -w 1"


def why(spec, check):
    """How commbench's drain reason for a check of a spec file starts: its name and its definition's digest. Read
    as the jobs read it, with the test hooks on (a check's env may name one; this process's environment has no
    switch, and the spec loader refuses a hook without it)."""
    with mock.patch.dict(os.environ, HOOKS_ON):
        return drain.prefix(next(c for c in load_spec(spec).checks if c.name == check))


def records(path):
    """The complete lines of a record file (a run may be writing its next one)."""
    return [json.loads(line) for line in open(path) if line.endswith("\n")]


def measured(path):
    return [r for r in records(path) if not r.get("event")]


def check_two_nodes(recs, cluster, backend):
    hosts = recs[0]["hosts"] if recs else []
    assert len(set(hosts)) == 2 and set(hosts) <= set(cluster.nodes), recs
    assert all(r["hosts"] == hosts and r["launcher"] == "slurm" and r["nodes"] == 2
               and r["wrong"] == 0 and r["backend"] == backend for r in recs), recs


def test_cluster_status_exec_and_blackhole(cluster, capsys):
    st = slurm_cluster("status", "--dir", cluster.dir)
    assert st.returncode == 0, st.stdout + st.stderr
    assert all(f"sinfo: {n} idle" in st.stdout for n in cluster.nodes), st.stdout
    route = subprocess.run(["ip", "route", "show", "exact", SUBNET], capture_output=True, text=True).stdout
    assert route.startswith("blackhole"), route  # a client run in the host namespace by mistake goes nowhere
    assert sorted(cluster.run("srun", "-N4", "hostname").stdout.split()) == cluster.nodes
    assert slurm_cluster("status", "--dir", f"{cluster.dir}-none").returncode == 3  # stopped: nothing there
    theirs = cluster.work / "theirs"
    theirs.mkdir()
    (theirs / "data").write_text("not ours")
    refused = slurm_cluster("down", "--dir", theirs)
    assert refused.returncode == 1 and "holds no slurm-cluster state; not touching it" in refused.stderr
    assert (theirs / "data").read_text() == "not ours"
    bad = slurm_cluster("exec", "--dir", cluster.dir, 5, "--", "true")
    assert bad.returncode == 1 and bad.stderr == "slurm-cluster: error: no node 5: the cluster has nodes 0..3\n"
    with capsys.disabled():
        print("\n[sinfo after up]\n" + cluster.run("sinfo").stdout)


def test_a_cluster_under_a_private_parent_comes_up_and_down_leaves_nothing(cluster, tmp_path):
    """--dir $(mktemp -d)/s: munged, running as the munge user, could not reach its files under the private (0700)
    parent and `up` failed (issue 38 item 2); they live in /run/slurm-cluster-munge/PREFIX now, removed by down.
    A second cluster beside the module's, on a subnet of its own."""
    parent = tmp_path / "private"
    parent.mkdir(mode=0o700)
    d, prefix = parent / "s", f"{STEM}p{os.getpid()}"
    try:
        up = slurm_cluster("up", "--nodes", 2, "--cpus", 1, "--dir", d, "--prefix", prefix, "--subnet", "10.227.0.0/24")
        assert up.returncode == 0, up.stderr
        assert f"run clients with: slurm-cluster exec --dir {d} 0 -- sinfo" in up.stdout, up.stdout   # as printed
        assert stat.S_IMODE(os.stat(f"/run/slurm-cluster-munge/{prefix}").st_mode) == 0o711
    finally:
        down = slurm_cluster("down", "--dir", d)
    assert down.returncode == 0, down.stderr
    assert not d.exists() and not os.path.exists(f"/run/slurm-cluster-munge/{prefix}")
    assert not netns.existing(prefix)[0]


@pytest.mark.parametrize("nodelist", ["n[0-3]", "gpu[001-004,007],cpu1", "r[1-2]n[08-10]", "a,b[1-2]"])
def test_nodelist_parser_agrees_with_scontrol(cluster, nodelist):
    done = cluster.run("scontrol", "show", "hostnames", nodelist)
    assert done.returncode == 0 and expand_nodelist(nodelist) == done.stdout.split()


def test_ring_in_salloc_beside_the_template_and_sbatch_wait_mpi(cluster, capsys):
    """At once: `salloc -N2 commbench ring` (Gloo) and commbench.sbatch as shipped on the same two nodes (each job's
    rendezvous on the first node at its own port; the port's class of collision: test_nodelist.py), and an MPI ring
    through `sbatch --wait` on the other two."""
    gloo, mpi = cluster.work / "gloo.jsonl", cluster.work / "mpi.jsonl"
    pair, other = (f"--nodelist={','.join(cluster.nodes[i:i + 2])}" for i in (0, 2))
    wrap = " ".join([COMMBENCH, "ring", "--backend", "mpi", *SHORT, "--out", str(mpi)])
    sbatch = cluster.spawn("sbatch", "--wait", "-N2", other, "--output", cluster.work / "mpi.log", "--wrap", wrap,
                           log="mpi")
    env = {"COMMBENCH": COMMBENCH, "ARGS": "--collective all_reduce " + " ".join(SHORT[:10])}
    template = cluster.sbatch("--exclusive=user", pair, *EDITS, TEMPLATE, env=env)
    try:
        done = cluster.run("salloc", "-N2", "--exclusive=user", pair, COMMBENCH, "ring", *SHORT, "--out", gloo,
                           timeout=120)
        end = cluster.wait_job(template)
        assert sbatch.wait(timeout=180) == 0, ((cluster.work / "mpi.out").read_text(),
                                              (cluster.work / "mpi.log").read_text())
    finally:
        sbatch.kill()
    log = (cluster.work / f"commbench-{template}.log").read_text()
    assert done.returncode == 0 and end == ("COMPLETED", 0), (done.stderr, log)
    allocation = cluster.job(int(re.search(r"Granted job allocation (\d+)", done.stderr).group(1)))
    shipped = cluster.job(template)
    assert allocation["StartTime"] < shipped["EndTime"] and shipped["StartTime"] < allocation["EndTime"]  # at once
    assert allocation["NodeList"] == shipped["NodeList"]
    check_two_nodes(measured(gloo), cluster, "gloo")
    check_two_nodes(measured(cluster.work / f"commbench-{template}.jsonl"), cluster, "gloo")
    check_two_nodes(measured(mpi), cluster, "mpi")
    with capsys.disabled():
        print(f"\n[commbench.sbatch job {template} log]\n" + log)


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
    wait: 120
    thresholds:
      - shard-write MB/s >= {mbps}
"""
STALLED = """\
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


def test_iobench_and_accept_templates_exit_codes_and_drain(cluster, tmp_path, capsys):
    """iobench.sbatch: every node's records merged; accept.sbatch: 0 pass, 2 a spec that cannot run, 1 fail, the
    failing job with ON_FAIL=drain: a bound no link meets (a collective's miss names no node), a check whose rank 1
    stops before its third operation (a test hook; rank 0's watchdog names it) and a bound no disk meets. The job
    drains rank 1's node and the node whose storage missed, each with its check as the reason, and no other. The
    three accept jobs share the nodes at once."""
    mounts = [tmp_path / "mount", tmp_path / "mount-fail"]   # one file system: one iobench at a time (wait: 120)
    for mount in mounts:
        mount.mkdir()
    iob = cluster.sbatch("--exclusive=user", "--partition=debug", str(ROOT / "scripts/slurm/iobench.sbatch"),
                         env={"IOBENCH": str(BIN / "iobench"), "MOUNTS": str(mounts[0]),
                              "ARGS": "--quick --ranks 1 --size 16M --profile shard-write"})
    iob_end = cluster.wait_job(iob, timeout=120)[1]  # before the accept jobs: one iobench per mount at a time
    (cluster.work / "pass.yaml").write_text(SPEC.format(busbw=0.001) + IO_CHECK.format(mount=mounts[0], mbps=1))
    (cluster.work / "fail.yaml").write_text(SPEC.format(busbw=1000) + STALLED +
                                            IO_CHECK.format(mount=mounts[1], mbps=10 ** 7))
    (cluster.work / "bad.yaml").write_text("checks: [{kind: nonsense}]\n")
    acc = {name: cluster.sbatch("--exclusive=user", *EDITS, str(ROOT / "scripts/slurm/accept.sbatch"),
                                cluster.work / f"{name}.yaml",
                                env={"COMMBENCH": COMMBENCH, "ON_FAIL": "drain" if name == "fail" else "report",
                                     **HOOKS_ON})
           for name in ("pass", "fail", "bad")}
    try:
        ends = {"iobench": iob_end, **{name: cluster.wait_job(j, timeout=180)[1] for name, j in acc.items()}}
        reasons = cluster.run("sinfo", "-R", "-h", "-o", "%N|%E").stdout
        batch, rank1 = cluster.job_nodes(acc["fail"])   # accept's storage check ran on the batch node
    finally:
        cluster.resume()
    logs = {name: (cluster.work / f"{'iobench' if name == 'iobench' else 'accept'}-{j}.log").read_text()
            for name, j in {"iobench": iob, **acc}.items()}
    assert ends == {"iobench": 0, "pass": 0, "fail": 1, "bad": 2}, \
        "".join(f"\n[{name} job log, exit {ends[name]}]\n{log[-3000:]}" for name, log in logs.items())
    merged = records(cluster.work / f"iobench-{iob}.jsonl")
    assert sorted(h for r in merged for h in r["hosts"]) == cluster.job_nodes(iob), merged
    assert f"iobench: every node (2) measured {mounts[0]}" in logs["iobench"]
    verdicts = {name: json.loads((cluster.work / f"accept-{acc[name]}" / "verdict.json").read_text())
                for name in ("pass", "fail")}
    assert verdicts["pass"]["drained"] == []
    assert [(d["node"], d["check"], d["drained"]) for d in verdicts["fail"]["drained"]] == \
        [(rank1, "stalled-rank", True), (batch, "checkpoint-io", True)], verdicts["fail"]
    drained = dict(line.split("|", 1) for line in reasons.splitlines())
    assert sorted(drained) == sorted([batch, rank1]), reasons
    fail = cluster.work / "fail.yaml"
    assert drained[rank1].startswith(why(fail, "stalled-rank") + "rank 1 never entered the operation"), reasons
    assert drained[batch].startswith(why(fail, "checkpoint-io") + "iobench: measured bw_mbps "), reasons
    assert f"accept: drained {rank1}: " in logs["fail"] and f"accept: drained {batch}: " in logs["fail"]
    with capsys.disabled():
        for name, log in logs.items():
            print(f"\n[{name} job log, exit {ends[name]}]\n" + "\n".join(log.splitlines()[-12:]))
        print(f"[sinfo -R after the failing job]\n{reasons}")


PAIRS = """\
checks:
  - name: links
    kind: pairs
    nodes: 4
    size: 1M
    rounds: 3
    iters: 6               # 3 left a healthy link at 0.67 of the others once on this busy VM (a false link)
    warmup: 1
    timeout: 240
    thresholds:
      - wrong == 0
"""
RATE = 400_000_000   # bit/s on every node's link during the pairs test; the slow node gets a third


def test_iobench_template_writes_one_model_checkpoint_from_two_nodes(cluster, cephfs_mount, capsys):
    """iobench.sbatch with MODEL: both nodes' ranks write and read one llama3-8b checkpoint (1/5000 scale) on the real
    CephFS, rendezvous on the first node; node 0's records name both hosts."""
    out_dir = cephfs_mount.path / f"slurm-model-{os.getpid()}"
    out_dir.mkdir()
    job = cluster.sbatch("--exclusive=user", "--partition=debug", str(ROOT / "scripts/slurm/iobench.sbatch"),
                         env={"IOBENCH": str(BIN / "iobench"), "MOUNTS": str(out_dir), "OUTDIR": str(out_dir),
                              "MODEL": "llama3-8b", "SCALE": "0.0002",
                              "ARGS_MODEL": "--ranks 1 --writes 1 --reads 1"})
    end = cluster.wait_job(job, timeout=180)
    log = (cluster.work / f"iobench-{job}.log").read_text()
    assert end[1] == 0, log
    recs = records(out_dir / f"iobench-{job}.jsonl")
    assert [r["rw"] for r in recs] == ["write", "read"] and all(r["numjobs"] == 2 for r in recs), recs
    assert sorted(recs[0]["per_host_mbps"]) == cluster.job_nodes(job) and recs[0]["served_by"] == "storage"
    assert "iobench: llama3-8b on 2 nodes" in log
    with capsys.disabled():
        print(f"\n[iobench.sbatch MODEL job {job} log]\n" + "\n".join(log.splitlines()[-8:]))


def shape_node(cluster, node, bits):
    """Both directions of one node's link: its eth0 (upload) and its switch port (download); None: unshaped."""
    netns.shape(cluster.nodes[node], netns.IFNAME, bits)
    netns.shape(netns.switch_name(cluster.prefix), f"port{node}", bits)


def test_pairs_on_four_nodes_drains_the_slow_node_and_at_full_rate_nobody(cluster, capsys):
    """The issue's acceptance: every link shaped to RATE, node 3's to a third of it; `sbatch -N4 accept.sbatch`
    with a pairs check and ON_FAIL=drain exits 1 and drains node 3 alone, pairs' verdict as the reason; the
    other three stay idle. Node 3 back at RATE: the same job passes and drains nobody."""
    (cluster.work / "pairs.yaml").write_text(PAIRS)
    ends, reasons, states = {}, {}, {}
    try:
        for i in range(len(cluster.nodes)):
            shape_node(cluster, i, RATE // 3 if i == 3 else RATE)
        for name in ("slow", "even"):
            if name == "even":
                cluster.resume()
                shape_node(cluster, 3, RATE)
            job = cluster.sbatch("-N4", "--exclusive=user", *EDITS, str(ROOT / "scripts/slurm/accept.sbatch"),
                                 cluster.work / "pairs.yaml", env={"COMMBENCH": COMMBENCH, "ON_FAIL": "drain"})
            ends[name] = cluster.wait_job(job, timeout=180)[1], (cluster.work / f"accept-{job}.log").read_text()
            reasons[name] = cluster.run("sinfo", "-R", "-h", "-o", "%N|%E").stdout
            states[name] = cluster.states()
    finally:
        for i in range(len(cluster.nodes)):
            shape_node(cluster, i, None)
        cluster.resume()
    (slow, slow_log), (even, even_log) = ends["slow"], ends["even"]
    assert slow == 1, slow_log
    assert reasons["slow"] == f"{cluster.nodes[3]}|{why(cluster.work / 'pairs.yaml', 'links')}pairs: bad node(s): " \
        f"{cluster.nodes[3]} " \
        "(sendrecv busbw below 0.7 of the median link, against known-good nodes in the confirm pass)\n", slow_log
    # who is drained: the others are idle, or mix/comp while the module's time-limit job (nodes 0-1, a minute, then
    # Slurm's kill) still runs or completes beside this one
    drained = {name: {n for n, st in states[name].items() if st.startswith(("drain", "drng"))} for name in states}
    assert drained["slow"] == {cluster.nodes[3]} and "down" not in str(states), states
    assert even == 0 and reasons["even"] == "" and drained["even"] == set(), (even_log, states)
    with capsys.disabled():
        print(f"\n[sbatch -N4 accept.sbatch, node 3 at a third: exit {slow}]\n{slow_log.strip()}\n"
              f"[sinfo -R]\n{reasons['slow']}[every link alike: exit {even}]\n{even_log.strip()}")


SHARED_IO = """\
checks:
  - name: shared-io
    kind: iobench
    mounts: [{mount}]
    profiles: [shard-write]
    quick: true
    size: 16M
    ranks: 1
    wait: 120
    thresholds:
      - shard-write MB/s >= 10000000
"""
STOPPED = """\
checks:
  - name: node-all_reduce
    kind: commbench
    collective: all_reduce
    min_bytes: 1M
    max_bytes: 1M
    timeout: 12
    env: {COMMBENCH_TEST_SLOW: "all_reduce:120"}
    thresholds:
      - wrong == 0
"""


def stop(runs):
    """End what spawn started (a process group each), if it is still there."""
    for proc in runs:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def test_healthcheck_drains_its_own_node_for_its_own_fault_alone(cluster, tmp_path, cephfs_mount, capsys):
    """scripts/slurm/healthcheck run as slurmd runs a HealthCheckProgram (SLURMD_NODENAME set). At once: the shipped
    spec on node 1 passes and drains nobody; a bound no node meets drains node 1 alone, the check's measurement as
    the reason; a storage check on CephFS (shared storage) below its bound on node 2 drains nobody (it drained the
    node). Then a check stopped at its timeout (it could not run) drains nobody on node 3 (exit 2; it drained the
    node), and with ON_ERROR=drain drains node 0, saying it could not run."""
    failing, shared, stopped = tmp_path / "health-fail.yaml", tmp_path / "shared.yaml", tmp_path / "stopped.yaml"
    shipped = (ROOT / "acceptance/healthcheck.yaml").read_text()
    # an absolute bound: this CPU node's loopback has no ceiling, so a 'x link peak' bound is n/a here (skipped);
    # judged at 16M, the spec's second size (256M is half of the shipped run's time)
    failing.write_text(shipped.replace("0.5 x link peak at 256M", "1000 GB/s at 16M").replace("max_bytes: 256M",
                                                                                             "max_bytes: 16M"))
    shared.write_text(SHARED_IO.format(mount=cephfs_mount.path))
    stopped.write_text(STOPPED)
    env = {"COMMBENCH": COMMBENCH, "PYTHON": str(BIN / "python"), "REPORTS": str(tmp_path / "reports")}

    def health(node, log, **extra):
        return cluster.spawn(HEALTHCHECK, node=node, env={**env, "SLURMD_NODENAME": cluster.nodes[node], **extra},
                             log=log)
    runs = []
    try:
        runs += [health(1, "health-ok"), health(1, "health-bad", SPEC=failing), health(2, "health-shared", SPEC=shared)]
        codes = [p.wait(timeout=150) for p in runs]
        reasons = cluster.run("sinfo", "-R", "-h", "-o", "%N|%E").stdout
        runs += [health(i, f"health-stopped-{i}", SPEC=stopped, **HOOKS_ON, **extra)
                 for i, extra in ((3, {}), (0, {"ON_ERROR": "drain"}))]
        codes += [p.wait(timeout=120) for p in runs[3:]]
        after = cluster.run("sinfo", "-R", "-h", "-o", "%N|%E").stdout
    finally:
        stop(runs)
        cluster.resume()
    out = {log: (cluster.work / f"health-{log}.out").read_text()
           for log in ("ok", "bad", "shared", "stopped-3", "stopped-0")}
    assert codes == [0, 1, 0, 2, 1], (codes, out)
    assert "accept: drained" not in out["ok"], out["ok"]   # drains nobody
    assert reasons.startswith(f"{cluster.nodes[1]}|{why(failing, 'node-all_reduce')}measured busbw_gbps "), \
        reasons
    assert len(reasons.splitlines()) == 1, reasons
    assert "accept: shared-io: shared storage below its bound: not a node fault, nobody drained" in out["shared"]
    assert "accept: node-all_reduce: could not run: still running after " in out["stopped-3"]
    assert "nobody drained (--on-error drain drains the node it ran on)" in out["stopped-3"]
    drained = dict(line.split("|", 1) for line in after.splitlines())
    assert sorted(drained) == [cluster.nodes[0], cluster.nodes[1]], after
    assert drained[cluster.nodes[0]].startswith(why(stopped, "node-all_reduce") + "could not run: still running "
                                                "after "), after
    with capsys.disabled():
        print(f"\n[healthcheck on {cluster.nodes[1]}, a bound no node meets]\n{out['bad'].strip()}\n"
              f"[on {cluster.nodes[2]}, CephFS below its bound]\n{out['shared'].strip()}\n"
              f"[on {cluster.nodes[3]}, a check stopped at its timeout]\n{out['stopped-3'].strip()}\n"
              f"[on {cluster.nodes[0]}, the same with ON_ERROR=drain]\n{out['stopped-0'].strip()}\n"
              f"[sinfo -R]\n{after}")


def test_healthcheck_as_the_documented_prolog_drains_a_stalled_node_alone_and_resume_puts_it_back(cluster, tmp_path,
                                                                                                    capsys):
    """The module's Prolog (PrologFlags=Alloc) armed as scripts/slurm/healthcheck documents: a job on nodes 2-3
    completes, each node having passed its check on itself, and no node drains (the check's srun timed out inside
    the prolog and drained every node that got a job). Armed with a check whose rank 1 stops (the test hook), a job
    on node 2 drains node 2, the hang as the reason, and Slurm requeues the job. Then the same check (the stall is
    the Prolog's environment, not the spec's: the check's definition and so its digest are the same) passing on node 2
    with ON_PASS=resume puts node 2 back; on node 3, drained by someone else, it leaves the node drained."""
    shipped = (ROOT / "acceptance/healthcheck.yaml").read_text()
    passing = tmp_path / "pass.yaml"
    passing.write_text(shipped.replace("max_bytes: 256M", "max_bytes: 16M").replace("at 256M", "at 16M")
                       .replace("hang_timeout: 30", "hang_timeout: 10"))
    n2, n3 = cluster.nodes[2:]
    env = {"COMMBENCH": COMMBENCH, "PYTHON": str(BIN / "python"), "REPORTS": str(tmp_path / "reports")}
    held, runs = None, []
    try:
        with cluster.arm_prolog(**env, SPEC=passing):
            job = cluster.sbatch("-N2", f"--nodelist={n2},{n3}", *EDITS, "--wrap", "hostname")
            ended = cluster.wait_job(job, timeout=150)
            clean = cluster.run("sinfo", "-R", "-h", "-o", "%N|%E").stdout
        with cluster.arm_prolog(**env, **HOOKS_ON, COMMBENCH_TEST_STALL="1:3", SPEC=passing):
            held = cluster.sbatch("-N1", f"--nodelist={n2}", *EDITS, "--wrap", "hostname")
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and not (cluster.states()[n2] == "drain" and
                                                       cluster.job(held).get("JobState") == "PENDING"):
                time.sleep(0.5)
            requeued = cluster.job(held).get("Reason")
            reasons = cluster.run("sinfo", "-R", "-h", "-o", "%N|%E").stdout
        cluster.run("scancel", held)
        assert cluster.run("scontrol", "update", f"NodeName={n3}", "State=DRAIN",
                           "Reason=maintenance: PSU swap").returncode == 0
        runs = [cluster.spawn(HEALTHCHECK, node=i, env={**env, "SLURMD_NODENAME": n, "SPEC": passing,
                                                        "ON_PASS": "resume"}, log=f"resume-{i}")
                for i, n in ((2, n2), (3, n3))]
        codes = [p.wait(timeout=120) for p in runs]
        after, states = cluster.run("sinfo", "-R", "-h", "-o", "%N|%E").stdout, cluster.states()
    finally:
        if held:
            cluster.run("scancel", held)
        stop(runs)
        cluster.resume()
    logs = {p.name: p.read_text() for p in cluster.work.glob("prolog-*.log")}
    assert ended == ("COMPLETED", 0) and clean == "", (ended, clean, logs)
    assert requeued == "launch_failed_requeued_held", (requeued, logs.get(f"prolog-{n2}-{held}.log"), reasons)
    assert reasons == f"{n2}|{why(passing, 'node-all_reduce')}rank 1 never entered the operation the others " \
        "waited in (hang)\n", (reasons, logs)
    resumed = [(cluster.work / f"resume-{i}.out").read_text() for i in (2, 3)]
    assert codes == [0, 0], resumed
    assert f"accept: resumed {n2} (node-all_reduce passed; it was drained: {why(passing, 'node-all_reduce')}" \
        "rank 1 never entered" in resumed[0]
    assert f"accept: did not resume {n3}: left drained: not drained by commbench for a check that passed here as " \
        "this spec defines it (passed: " in resumed[1] and "(maintenance: PSU swap)" in resumed[1]
    assert sum(n2 in ln for ln in resumed[0].splitlines() if "resume" in ln) == 1, resumed[0]   # one line a node
    assert after == f"{n3}|maintenance: PSU swap\n" and states[n2] in ("idle", "mix"), (after, states)
    with capsys.disabled():
        print(f"\n[Prolog on {n2}, rank 1 stalled: the job {requeued}]\n{logs[f'prolog-{n2}-{held}.log'].strip()}\n"
              f"[sinfo -R]\n{reasons}[ON_PASS=resume on {n2}]\n{resumed[0].strip()}\n"
              f"[ON_PASS=resume on {n3}]\n{resumed[1].strip()}")


FUSE_IO = """\
checks:
  - name: io
    kind: iobench
    mounts: [{mount}]
    profiles: [shard-write]
    quick: true
    runtime: 1
    size: 4M
    ranks: 1
    wait: 60
    thresholds:
      - shard-write MB/s >= {mbps}
"""


@contextlib.contextmanager
def mounted(target, *argv):
    """A real mount at target (argv: the command that mounts it there: bindfs, mount -t tmpfs), unmounted after."""
    target.mkdir()
    subprocess.run([*map(str, argv), str(target)], check=True, timeout=30)
    try:
        yield target
    finally:
        if subprocess.run(["umount", str(target)], timeout=30).returncode:
            subprocess.run(["umount", "-l", str(target)], timeout=30)


@pytest.mark.skipif(not shutil.which("bindfs"), reason="needs bindfs (scripts/setup installs it)")
def test_object_storage_drains_nobody_and_a_looser_check_of_the_same_name_resumes_nobody(cluster, tmp_path, capsys):
    """In nodes' own scripts (SLURMD_NODENAME), at once, the same storage check below its bound: on a FUSE mount of an
    object store's type (bindfs -o subtype=mountpoint-s3: fuse.mountpoint-s3, as a bucket mounts) it drains nobody
    on node 1 (it drained the node); on a FUSE mount no table knows (plain bindfs: fuse, of unknown locality) nobody
    on node 2; on node 3's own tmpfs it drains node 3, the check's digest in the reason. Then on node 3 a looser check
    of the same name passes with --on-pass resume and leaves the node drained (it resumed it). The check that drained
    a node resuming it: the Prolog test below."""
    (tmp_path / "bucket").mkdir()
    (tmp_path / "src").mkdir()
    n1, n2, n3 = cluster.nodes[1:]
    runs, out = [], {}

    def accept(i, spec, log, *options):
        return cluster.spawn(COMMBENCH, "accept", "--spec", spec, "--out", tmp_path / f"out-{log}", *options, node=i,
                             env={"SLURMD_NODENAME": cluster.nodes[i]}, log=log)
    try:
        with mounted(tmp_path / "s3", "bindfs", "-o", "subtype=mountpoint-s3", tmp_path / "bucket") as s3, \
                mounted(tmp_path / "fuse", "bindfs", tmp_path / "src") as fuse, \
                mounted(tmp_path / "local", "mount", "-t", "tmpfs", "-o", "size=128m", "tmpfs") as local:
            for name, mount, mbps in (("s3", s3, 10 ** 8), ("fuse", fuse, 10 ** 8), ("strict", local, 10 ** 8),
                                      ("looser", local, 1)):
                (tmp_path / f"{name}.yaml").write_text(FUSE_IO.format(mount=mount, mbps=mbps))
            runs = [accept(i, tmp_path / f"{name}.yaml", name, "--on-fail", "drain")
                    for i, name in ((1, "s3"), (2, "fuse"), (3, "strict"))]
            codes = [p.wait(timeout=120) for p in runs]
            reasons = cluster.run("sinfo", "-R", "-h", "-o", "%N|%E").stdout
            runs.append(accept(3, tmp_path / "looser.yaml", "looser", "--on-pass", "resume"))
            codes.append(runs[-1].wait(timeout=120))
            states = cluster.states()
    finally:
        stop(runs)
        cluster.resume()
        out = {log: (cluster.work / f"{log}.out").read_text() for log in ("s3", "fuse", "strict", "looser")
               if (cluster.work / f"{log}.out").exists()}
    assert codes == [1, 1, 1, 0], f"{codes}\n" + "\n".join(f"[{k}]\n{v}" for k, v in out.items())
    assert "accept: io: shared storage below its bound: not a node fault, nobody drained" in out["s3"], out["s3"]
    assert "accept: io: storage of unknown locality (fuse) below its bound: commbench drains a node only for storage " \
           "known to be its own; nobody drained" in out["fuse"], out["fuse"]
    statuses = [json.loads((tmp_path / f"out-{log}" / "verdict.json").read_text())["checks"][0]["status"]
                for log in ("s3", "fuse", "strict")]
    assert statuses == ["shared", "unknown", "fail"], statuses
    strict = why(tmp_path / "strict.yaml", "io")
    assert reasons.startswith(f"{n3}|{strict}iobench: measured bw_mbps ") and len(reasons.splitlines()) == 1, \
        (reasons, out["strict"])
    assert f"accept: did not resume {n3}: left drained: not drained by commbench for a check that passed here as " \
           f"this spec defines it (passed: {why(tmp_path / 'looser.yaml', 'io').strip(': ')}) ({strict}" \
           in out["looser"], out["looser"]
    assert states[n3] == "drain" and states[n1] != "drain" and states[n2] != "drain", states
    with capsys.disabled():
        print(f"\n[node 1: fuse.mountpoint-s3 below its bound]\n{out['s3'].strip()}\n"
              f"[node 2: fuse (bindfs) below its bound]\n{out['fuse'].strip()}\n[sinfo -R]\n{reasons}"
              f"[node 3: a looser check of the same name, --on-pass resume]\n{out['looser'].strip()}")


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


def test_time_limit_scancel_a_dead_slurmd_and_a_cut_link_keep_records_exit_143(cluster, limited, capsys):
    """Slurm's SIGTERM (time limit; scancel): the records kept, the table and one error line, exit 143. At the same
    time, once their first record is on disk, a job loses node 2 (its slurmd killed) and another node 3 (its link
    cut): Slurm marks each node down (SlurmdTimeout 10 s) and ends its job, which the template does not requeue;
    commbench keeps the records and names the node as Slurm does. With node 3's link back, no process is left on
    any node. Last in the module: node 2 stays down."""
    job, out, seen, thread = limited
    nodes = cluster.nodes
    jobs = {name: cluster.sbatch("--exclusive=user", f"--nodelist={nodes[a]},{nodes[b]}", *EDITS, TEMPLATE,
                                 env={"COMMBENCH": COMMBENCH, "ARGS": LONG})
            for name, (a, b) in {"cancelled": (0, 1), "dead": (0, 2), "cut": (1, 3)}.items()}
    cancelled, dead, cut = jobs.values()
    outs = {j: cluster.work / f"commbench-{j}.jsonl" for j in (job, *jobs.values())}
    deadline = time.monotonic() + 90
    while not all(outs[j].exists() and measured(outs[j]) for j in jobs.values()) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert cluster.run("scancel", cancelled).returncode == 0
    with open(f"{cluster.dir}/run/slurmd-{nodes[2]}.pid") as f:
        os.kill(int(f.read()), signal.SIGKILL)
    try:
        subprocess.run(["ip", "-n", nodes[3], "link", "set", netns.IFNAME, "down"], check=True, timeout=10)
        cut_at = time.monotonic()
        ends = {cut: cluster.wait_job(cut, timeout=60)}   # Slurm's end, not a requeue (31-32 s measured here)
        cut_s = time.monotonic() - cut_at
        ends.update({j: cluster.wait_job(j, timeout=150) for j in outs})
    finally:
        subprocess.run(["ip", "-n", nodes[3], "link", "set", netns.IFNAME, "up"], check=True, timeout=10)
        restored = time.monotonic()
    thread.join(timeout=10)
    logs = {j: (cluster.work / f"commbench-{j}.log").read_text() for j in outs}
    assert ends == {job: ("TIMEOUT", 143), cancelled: ("CANCELLED", 143), dead: ("NODE_FAIL", 143),
                    cut: ("NODE_FAIL", 143)}, (ends, cluster.job(job).get("ExitCode"), logs[job][-3000:])
    for j in (job, cancelled):
        assert 1 <= len(measured(outs[j])) < 7 and "#wrong" in logs[j] and "error: terminated by SIGTERM" in logs[j], \
            logs[j]
    for j in outs:
        check_two_nodes(measured(outs[j]), cluster, "gloo")
    assert len(measured(out)) >= seen["before"] >= 1
    for j, node in ((dead, nodes[2]), (cut, nodes[3])):
        lost = [ln for ln in logs[j].splitlines() if ln.startswith("error: Slurm node")]
        assert lost == [f"error: Slurm node {node} is down* (Not responding)"], logs[j]
    deadline = restored + 30   # a cut node's processes end once its link is back, at their sockets' next retransmission
    while cluster.processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cluster.processes() == []
    gone_s = time.monotonic() - restored
    staged = [p for j in outs for run in {r["run_id"] for r in measured(outs[j])}
              if (p := Path(tempfile.gettempdir(), f"commbench-plan-{run}-{j}.json")).exists()]
    assert staged == []   # the plan file sbcast put on the nodes goes with the job
    with capsys.disabled():
        print(f"\n[time limit] records before SIGTERM {seen['before']}, after {len(measured(out))}; log tail:\n"
              + "\n".join(logs[job].splitlines()[-4:]) + f"\n[slurmd of {nodes[2]} killed] log tail:\n"
              + "\n".join(logs[dead].splitlines()[-2:]) + f"\n[link of {nodes[3]} cut: the job ended {cut_s:.1f} s "
              f"later; no process left {gone_s:.1f} s after the link was back] log tail:\n"
              + "\n".join(logs[cut].splitlines()[-2:]))
