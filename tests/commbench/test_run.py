"""commbench run / ring end to end: real torchrun, real Gloo process groups."""
import io
import json
import os
import re
import socket
import subprocess
import sys

import pytest
import torch
from rich.console import Console

from benchcore.processes.route import route_to
from commbench.cases.collectives import COLLECTIVES
from commbench.launch.liveness import CHANNEL, STATUS_ENV
from commbench.launch.spec import LaunchSpec
from commbench.output.tables import print_collective_tables
from commbench.plan import Plan
from commbench.transports.torch_dist import drops
from tests.conftest import HOOKS_ON, assert_one_line_error, read_records, run_tool

RECORD_FIELDS = ["tool", "run_id", "collective", "strategy", "size_bytes", "count", "dtype", "op", "in_place",
                 "blocking", "chunk_bytes", "time_us", "time_us_min", "time_us_max", "algbw_gbps", "busbw_gbps",
                 "wrong", "world_size", "nodes", "backend", "launcher", "env", "topology", "link_peak_gbps",
                 "link_utilization", "predicted_time_us", "hosts", "versions", "timestamp"]
ALL = ",".join(COLLECTIVES)


def expected_rows(sizes):
    """(collective, size, in place) torch.distributed measures: every placement it offers."""
    return {(name, size, place == "in") for name, c in COLLECTIVES.items() for size in sizes for place in c.placements
            if not drops(name, {"in_place": place == "in"})}


@pytest.mark.slow
def test_every_collective_correct_on_two_ranks(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = run_tool("commbench", "run", "--collective", ALL, "--nproc-per-node", 2, "-b", 8, "-e", "64K", "-f", 32,
                    "-n", 5, "-w", 1, "--out", out)
    assert proc.returncode == 0, proc.stderr
    recs = read_records(out)
    assert {(r["collective"], r["size_bytes"], r["in_place"]) for r in recs} == expected_rows([8, 256, 8192])
    for rec in recs:
        assert all(f in rec for f in RECORD_FIELDS), set(RECORD_FIELDS) - set(rec)
        assert rec["wrong"] == 0 and rec["world_size"] == 2 and rec["backend"] == "gloo"
        assert rec["blocking"] is True  # Gloo default: one collective at a time
        assert rec["time_us_min"] <= rec["time_us"] <= rec["time_us_max"]
        assert rec["busbw_gbps"] == pytest.approx(rec["algbw_gbps"] * COLLECTIVES[rec["collective"]].bus_factor(2))
        assert rec["algbw_gbps"] == pytest.approx(rec["size_bytes"] / rec["time_us"] / 1e3)
        assert not any(k.startswith("NCCL_DEBUG") for k in rec["env"])   # NCCL's evidence is an NCCL launch's only
        assert (rec.get("effective") or {}).get("transport") != "nccl"
    assert "Avg bus bandwidth" in proc.stdout and "all_to_all" in proc.stdout and "NCCL evidence" not in proc.stdout


@pytest.mark.slow
def test_three_ranks_catch_a_corrupted_result_and_stay_correct_elsewhere(tmp_path):
    """3 ranks, int32 min, async launches: every collective exact except the one the fault hook corrupts."""
    out = tmp_path / "r.jsonl"
    proc = run_tool("commbench", "run", "--collective", ALL, "--nproc-per-node", 3, "-b", 96, "-e", 6144, "-f", 64,
                    "-n", 3, "-w", 1, "--dtype", "int32", "--op", "min", "--no-blocking", "--out", out,
                    env={**HOOKS_ON, "COMMBENCH_TEST_CORRUPT": "reduce_scatter"})
    assert proc.returncode == 1
    assert "wrong elements" in proc.stderr and "Traceback" not in proc.stderr
    recs = read_records(out)
    assert {(r["collective"], r["size_bytes"], r["in_place"]) for r in recs} == expected_rows([96, 6144])
    for rec in recs:
        assert rec["world_size"] == 3 and rec["blocking"] is False and rec["dtype"] == "int32"
        assert rec["wrong"] == (1 if rec["collective"] == "reduce_scatter" else 0), rec
    assert "FAILED" in proc.stdout


@pytest.mark.slow
def test_a_test_hook_acts_only_where_the_tests_turn_hooks_on(tmp_path):
    """COMMBENCH_TEST_EXIT_RANK in the environment ends rank 1 only beside the tests' switch (it ended it always:
    a spec's env could stall or crash a rank)."""
    args = ["run", "--collective", "all_reduce", "--nproc-per-node", 2, "-b", "1K", "-e", "1K", "-n", 1, "-w", 0]
    hook = {"COMMBENCH_TEST_EXIT_RANK": "1"}
    plain = run_tool("commbench", *args, "--out", tmp_path / "plain.jsonl", env=hook)
    assert plain.returncode == 0 and read_records(tmp_path / "plain.jsonl")[0]["wrong"] == 0, plain.stderr
    hooked = run_tool("commbench", *args, "--out", tmp_path / "hooked.jsonl", env={**HOOKS_ON, **hook})
    assert hooked.returncode == 1 and re.search(r"exitcode +: 17", hooked.stderr), hooked.stderr


@pytest.mark.slow
def test_ring_two_emulated_nodes(tmp_path):
    out = tmp_path / "ring.jsonl"
    proc = run_tool("commbench", "ring", "--nodes", 2, "-b", "1K", "-e", "4M", "-f", 64, "-n", 5, "-w", 2,
                    "--out", out, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    printed = [json.loads(line) for line in proc.stdout.splitlines()]
    recs = read_records(out)
    assert printed == recs and [r["size_bytes"] for r in recs] == [1024, 65536, 4 << 20]
    for rec in recs:
        assert rec["collective"] == "all_reduce" and rec["strategy"] == "ring"
        assert rec["busbw_gbps"] > 0 and rec["wrong"] == 0
        assert rec["nodes"] == 2 and rec["world_size"] == 2 and rec["launcher"] == "local"
        assert rec["env"]["GLOO_SOCKET_IFNAME"] == "lo"  # the interface that routes to the rendezvous
        assert rec["emulated"] is True   # labels never overstate (issue 39): said in the record, on stderr, in titles
    assert proc.stderr.count("note: --nodes 2 without --rdzv-endpoint, a Slurm allocation or --hosts: both nodes are "
                             "emulated on this host") == 1, proc.stderr
    table = Console(file=io.StringIO(), width=100)
    print_collective_tables(recs, table)
    title = " ".join(table.file.getvalue().split())
    assert "all_reduce in-place (gloo, 2 ranks on 2 emulated nodes on one host," in title and "node(s)" not in title


def test_out_file_is_appended_never_overwritten(tmp_path):
    out = tmp_path / "r.jsonl"
    out.write_text('{"tool": "mine"}\n')
    proc = run_tool("commbench", "run", "-b", 8, "-e", 8, "--nproc-per-node", 1, "-n", 1, "-w", 0, "--out", out)
    assert proc.returncode == 0, proc.stderr
    lines = out.read_text().splitlines()
    assert lines[0] == '{"tool": "mine"}' and len(lines) == 2 and json.loads(lines[1])["world_size"] == 1


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_peer_that_never_arrives_ends_with_a_clear_error():
    proc = run_tool("commbench", "run", "--nodes", 2, "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
                    "--node-rank", 0, "--rdzv-timeout", 5, "-e", "1K", timeout=120)   # a hang: past the timeout
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "rendezvous at 127.0.0.1" in proc.stderr and "not all 2 nodes joined" in proc.stderr


@pytest.mark.parametrize("args, needle", [
    (["run", "-b", "1M", "-e", "1K"], "larger than --max-bytes"),
    (["run", "-b", "0"], "must be positive"),
    (["run", "-e", "-4K"], "must be positive"),
    (["run", "-b", "12Q"], "is not a size"),
    (["run", "--collective", "all_reduce,allgathr"], "unknown collective 'allgathr'"),   # allgather: all_gather
    (["run", "--dtype", "float8"], "unknown dtype"),
    (["run", "--op", "avg"], "-o/--op avg needs NCCL"),
    (["run", "-d", "f8e4m3"], "needs NCCL"),
    (["run", "-d", "int8", "--nproc-per-node", 200, "--launcher", "slurm", "--dry-run"],
     "cannot hold a sum over 200 ranks"),
    (["run", "-G", "5"], "NCCL on GPUs only"),
    (["run", "-N", "0"], "-N/--cycles must be at least 1"),
    (["run", "-r", "2"], "not a rank of 0..1"),
    (["run", "--collective", "all_reduce", "--place", "out"], "all_reduce has no out-of-place variant"),
    (["run", "--collective", "all_gather", "--nproc-per-node", "3", "-b", "8", "-e", "8", "--exact-sizes"],
     "multiple of 12 B"),
    (["run", "--collective", "reduce_scatter", "--nodes", "3", "-b", "16", "-e", "16", "--exact-sizes"],
     "multiple of 12 B"),
    (["run", "--collective", "all_gather", "--nproc-per-node", "3", "-b", "8", "-e", "8"],
     "all_gather on 3 ranks takes multiples of 12 B: every size of -b/-e is below that"),
    (["run", "--backend", "mpi", "--op", "avg"], "-o/--op avg needs NCCL: MPI has no average reduction"),
    (["run", "--node-rank", "1"], "--node-rank only applies"),
    (["run", "--launcher", "torchrun"], "needs --rdzv-endpoint"),
    (["run", "--rdzv-endpoint", "nohost", "--node-rank", "0"], "is not HOST:PORT"),
    (["run", "--out", "/dev/full"], "not a regular file"),
    (["run", "--out", "/"], "is a directory"),
    (["run", "-b", "1K", "-e", "2K", "-f", "1"], "--step-factor must be at least 2"),
])
def test_bad_input_is_one_line_before_any_launch(args, needle):
    assert_one_line_error(run_tool("commbench", *args, timeout=60), needle)


def test_dry_run_prints_the_torchrun_lines():
    proc = run_tool("commbench", "ring", "--nodes", 2, "--dry-run", "-e", "1K")
    heredoc, plan, end, *lines = proc.stdout.splitlines()
    assert proc.returncode == 0 and len(lines) == 2 and heredoc.endswith("<<'PLAN'") and end == "PLAN"
    assert all(ln.endswith(f"--plan-file {heredoc.split()[2]}") for ln in lines) and json.loads(plan)["configs"]
    assert all("benchcore.processes.torchrun --nnodes 2" in ln and "--rdzv-backend c10d" in ln for ln in lines)
    assert "is_host=1" in lines[0] and "is_host=0" in lines[1]


def test_interface_is_the_one_that_routes_to_the_endpoint():
    assert route_to("127.0.0.1") == ("lo", "127.0.0.1")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="NCCL path needs an NVIDIA GPU; CI has none")
def test_nccl_world_size_one(tmp_path):
    out = tmp_path / "g.jsonl"
    proc = run_tool("commbench", "run", "--collective", ALL, "-b", 8, "-e", "64M", "-f", 8, "--backend", "nccl",
                    "--nproc-per-node", 1, "--out", out)
    assert proc.returncode == 0, proc.stderr
    recs = read_records(out)
    assert recs and all(r["backend"] == "nccl" and r["wrong"] == 0 and r["blocking"] is False for r in recs)
    assert all("nccl" in r["versions"] for r in recs)
    # NCCL's own INFO lines, read by rank 0: the version it printed is the one torch reports
    assert all(r["effective"]["transport"] == "nccl" and r["effective"]["version"] == r["versions"]["nccl"]
               for r in recs)
    assert "# NCCL evidence       : NCCL " in proc.stdout


SLURM = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "gpu[07-08]", "SLURM_JOB_NUM_NODES": "2"}


def test_slurm_dry_run_prints_srun_and_the_torchrun_line_of_each_node():
    """--nodes comes from the allocation; node 0 of it serves the rendezvous."""
    proc = run_tool("commbench", "ring", "--dry-run", "-e", "1K", env=SLURM)
    assert proc.returncode == 0, proc.stderr
    _, _, _, sbcast, srun, node0, node1, unstage = proc.stdout.splitlines()
    assert srun.startswith("srun --nodes 2 --ntasks-per-node 1") and '"endpoint":"gpu07:30742"' in srun
    there = sbcast.split()[3]   # every node's copy of the plan file, made by sbcast and removed after
    assert there.endswith("-4242.json") and f'"plan_file":"{there}"' in srun and unstage.endswith(f"rm -f {there}")
    for line, host in ((node0, 1), (node1, 0)):
        assert "benchcore.processes.torchrun --nnodes 2" in line and "--rdzv-endpoint gpu07:30742" in line
        assert f"is_host={host}" in line
    assert_one_line_error(run_tool("commbench", "ring", "--nodes", 3, "--dry-run", env=SLURM),
                          "this Slurm allocation has 2 nodes")


@pytest.mark.parametrize("context", [{"SLURM_SCRIPT_CONTEXT": "prolog_slurmd"}, {}])   # {}: a Slurm before 21.08
def test_in_a_slurm_prolog_commbench_runs_on_this_node_and_never_starts_srun(context):
    """A Prolog's environment as Slurm 22.05 gives it (the job's id, nodes and node count; SLURM_NODELIST, not
    SLURM_JOB_NODELIST) is no allocation to srun into: the srun it started timed out and the prolog drained the node."""
    prolog = {"SLURM_JOB_ID": "4242", "SLURM_NODELIST": "gpu[07-08]", "SLURM_JOB_NUM_NODES": "2",
              "SLURMD_NODENAME": "gpu07", **context}
    proc = run_tool("commbench", "ring", "--dry-run", "-e", "1K", env=prolog)
    assert proc.returncode == 0 and "srun" not in proc.stdout and "--nnodes 1" in proc.stdout, proc.stdout
    assert_one_line_error(run_tool("commbench", "ring", "--launcher", "slurm", "-e", "1K", env=prolog),
                          "--launcher slurm needs a Slurm allocation")


@pytest.mark.slow
def test_slurm_node_agent_becomes_torchrun_and_measures(tmp_path):
    """What srun runs on each node, run here as node 0 of a 1-node allocation (no Slurm on this machine)."""
    spec = LaunchSpec(nodes=1, nproc_per_node=2, launcher="slurm", rdzv_endpoint=None, node_rank=None,
                      backend="gloo", timeout=60, rdzv_timeout=30, dry_run=False, verbose=False)
    plan = Plan(run_id="agent-test", sizes=[4096], iters=2, warmup=1, backend="gloo", timeout=60, launcher="slurm",
                configs=[{"case": "all_reduce", "in_place": True, "dtype": "float32", "op": "sum", "root": None}])
    plan.write(tmp_path / "plan.json")
    agent = json.dumps({"spec": spec.__dict__, "run_id": plan.run_id, "plan_file": str(tmp_path / "plan.json"),
                        "endpoint": f"127.0.0.1:{free_port()}"})
    proc = subprocess.run([sys.executable, "-m", "commbench.launch.slurm", agent], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "SLURM_NODEID": "0", STATUS_ENV: str(tmp_path)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rec,) = read_records(tmp_path / CHANNEL)
    assert rec["launcher"] == "slurm" and rec["world_size"] == 2 and rec["wrong"] == 0
    assert rec["env"]["GLOO_SOCKET_IFNAME"] == "lo"


def test_the_ranks_default_is_what_the_help_says():
    """Without GPUs: 2 ranks on one node, 1 per node on several (the help said 'else 1')."""
    helped = " ".join(run_tool("commbench", "run", "--help").stdout.split())
    assert "without GPUs 2 on one node, 1 per node on several" in helped
    for nodes, ranks in ((1, 2), (2, 1)):
        proc = run_tool("commbench", "run", "-b", "1K", "-e", "1K", "--nodes", nodes, "--dry-run")
        assert proc.returncode == 0 and f"--nproc-per-node {ranks} " in proc.stdout, proc.stdout + proc.stderr
