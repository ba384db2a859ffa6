"""Plans that grow without bound (issue 23): the plan reaches the workers as a file whatever its size, its
construction is linear in nodes, and a world the launcher cannot start is refused in one line."""
import json
import subprocess
import sys

import pytest

from commbench.launch import execute
from commbench.launch.spec import LaunchSpec
from commbench.plan import Plan
from tests.conftest import assert_one_line_error, read_records, run_tool

CLI_MEMORY = 1 << 30
ARG_MAX_STRLEN = 128 << 10   # Linux refuses a longer argv token (E2BIG: "Argument list too long")


@pytest.mark.slow
def test_a_plan_over_128_kib_goes_through_a_real_launch(tmp_path):
    """Its command line alone (an option given 8,000 times) makes the plan larger than one argv token may be."""
    out = tmp_path / "r.jsonl"
    proc = run_tool("commbench", "run", "--nproc-per-node", 2, "-b", 8, "-e", 8, "-n", 1, "-w", 0,
                    *["--datatype", "float32"] * 8000, "--out", out, cwd=tmp_path, timeout=180)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (rec,) = read_records(out)
    assert len(rec["command"]) > ARG_MAX_STRLEN and rec["wrong"] == 0 and rec["world_size"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]   # the plan file went with the launch


def test_pairs_at_10000_nodes_dry_run_is_seconds_and_a_few_lines():
    proc = run_tool("commbench", "pairs", "--nodes", 10000, "--launcher", "slurm", "--backend", "nccl", "--dry-run",
                    timeout=60, memory_limit=CLI_MEMORY)   # seconds; a plan that grows with the nodes: minutes
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) <= 10 and lines[-2].startswith("# nodes 2..9999")
    plan = json.loads(lines[1])
    rounds = [c for c in plan["configs"] if "partner" in c]   # 4 random rounds x 2 operations, then the confirm pass
    assert len(rounds) == 2 * 4 and all(len(c["partner"]) == 10000 for c in rounds)
    assert [c["confirm"] for c in plan["configs"] if "partner" not in c] == list(range(4))


@pytest.mark.parametrize("args, needle", [
    (["run", "--nodes", 10000, "--nproc-per-node", 8], "is 90000 torch processes"),
    (["pairs", "--nodes", 10000], "is 20000 torch processes"),
    (["run", "--backend", "mpi", "--nproc-per-node", 100000], "(--launcher mpirun) is 100000 torch processes"),
    (["run", "--backend", "gloo", "--nodes", 3000, "--nproc-per-node", 1, "--launcher", "slurm"],
     "3000 Gloo ranks take about 6 min"),
    (["pairs", "--nodes", 10000, "--rounds", 26, "--launcher", "slurm", "--backend", "nccl"],
     "at most --rounds 25 here"),
])
def test_a_world_the_launcher_cannot_start_is_one_line_at_once(args, needle):
    assert_one_line_error(run_tool("commbench", *args, "--dry-run", timeout=20, memory_limit=CLI_MEMORY), needle)


def test_slurm_copies_the_plan_to_every_node_and_removes_it_after(monkeypatch):
    """The real launch's command lines (no Slurm here: what srun and sbcast would run is checked, not run)."""
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    spec = LaunchSpec(nodes=3, nproc_per_node=1, launcher="slurm", rdzv_endpoint=None, node_rank=None,
                      backend="nccl", timeout=60, rdzv_timeout=30, dry_run=False, verbose=False)
    plan = Plan(run_id="r1", sizes=[8], configs=[])
    (sbcast,), [(srun, _)], (unstage,) = execute.steps(spec, plan, "/tmp/launch/plan.json")
    there = sbcast[3]
    assert sbcast == ["sbcast", "--force", "/tmp/launch/plan.json", there]
    assert there.endswith("commbench-plan-r1-77.json")
    assert srun[:4] == ["srun", "--nodes", "3", "--ntasks-per-node"] and json.loads(srun[-1])["plan_file"] == there
    assert unstage == ["srun", "--nodes", "3", "--ntasks-per-node", "1", "rm", "-f", there]


def test_a_worker_without_its_plan_file_says_so_in_one_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "commbench.worker", "--plan-file", tmp_path / "gone.json"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    (line,) = proc.stderr.splitlines()
    assert line.startswith("commbench-worker: rank ? on ") and "cannot read the plan file" in line
    assert line.endswith("gone.json: No such file or directory")


@pytest.mark.slow
def test_mpirun_across_hosts_reads_the_plan_from_the_working_directory_and_removes_it(tmp_path):
    """Hosts named (here: this one) mean ranks that cannot read this machine's temp dir: the plan file goes in the
    working directory, which an MPI job's hosts share, and is gone after the run."""
    out = tmp_path / "r.jsonl"
    proc = run_tool("commbench", "run", "--backend", "mpi", "--nproc-per-node", 2, "-b", 8, "-e", 8, "-n", 1,
                    "-w", 0, "--out", out, cwd=tmp_path, timeout=120,
                    env={"COMMBENCH_MPIRUN_ARGS": "--host localhost:2"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "note: mpirun across hosts: the plan file goes in this directory" in proc.stderr
    assert sorted((r["in_place"], r["wrong"]) for r in read_records(out)) == [(False, 0), (True, 0)]  # MPI: both places
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.jsonl"]


@pytest.mark.slow
def test_dry_run_writes_nothing_and_its_lines_run(tmp_path):
    """The plan file is a here-document in the printed lines: the dry run writes nothing, a shell running its
    lines (one mpirun here) writes the plan file and measures."""
    proc = run_tool("commbench", "run", "--backend", "mpi", "--nproc-per-node", 2, "-b", 8, "-e", 8, "-n", 1, "-w", 0,
                    "--dry-run", cwd=tmp_path, timeout=60)
    assert proc.returncode == 0 and not list(tmp_path.iterdir()), proc.stderr
    ran = subprocess.run(["bash", "-c", proc.stdout], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert ran.returncode == 0, ran.stderr[-2000:]
    (written,) = tmp_path.iterdir()
    assert written.name.startswith("commbench-plan-") and json.loads(written.read_text())["sizes"] == [8]
