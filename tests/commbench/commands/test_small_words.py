"""Small things a new user tripped on (issue 39 item 9): --version on both tools (with the git revision), a
collective in the spelling `import` reads (allreduce, AllGather) taken by --collective as well, and a pairs check
that takes its node count from the Slurm allocation it runs in."""
import subprocess

import pytest

from benchcore.errors import UserError
from commbench.commands.accept.spec import load_spec
from tests.conftest import ROOT, assert_one_line_error, run_tool


@pytest.mark.parametrize("tool", ["commbench", "iobench"])
def test_version(tool):
    """The version and the git revision the tool runs from (records carry it as versions.suite)."""
    done = run_tool(tool, "--version", timeout=60)
    assert done.returncode == 0 and done.stdout.startswith(f"{tool} ") and done.stdout.split()[1][0].isdigit()
    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short=12", "HEAD"], capture_output=True,
                          text=True, check=True).stdout.strip()
    assert f"(git {head}" in done.stdout, done.stdout


def test_collective_in_the_spellings_import_reads():
    done = run_tool("commbench", "run", "--collective", "allreduce,AllGather,all_reduce", "-b", "1K", "-e", "1K",
                    "--dry-run", timeout=60)
    assert done.returncode == 0, done.stderr
    assert '"case":"all_reduce"' in done.stdout and '"case":"all_gather"' in done.stdout
    assert_one_line_error(run_tool("commbench", "run", "--collective", "allreduc", "-e", "1K", timeout=60),
                          "unknown collective 'allreduc'")


PAIRS_SPEC = "checks:\n  - name: links\n    kind: pairs\n    size: 1M\n    thresholds: [wrong == 0]\n"
ALLOCATION = {"SLURM_JOB_ID": "4242", "SLURM_JOB_NODELIST": "node[1-3]"}


@pytest.mark.parametrize("count", ["SLURM_JOB_NUM_NODES", "SLURM_NNODES"])
def test_a_pairs_check_in_a_slurm_allocation_takes_its_node_count(tmp_path, monkeypatch, count):
    """A pairs check without `nodes:` inside an allocation runs on the allocation's nodes (SLURM_JOB_NUM_NODES, or
    older Slurm's SLURM_NNODES), as the pairs command itself does; elsewhere it still needs them, and says so."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(PAIRS_SPEC)
    for name in ("SLURM_JOB_NUM_NODES", "SLURM_NNODES", "SLURM_SCRIPT_CONTEXT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in {**ALLOCATION, count: "3"}.items():
        monkeypatch.setenv(name, value)
    check = load_spec(spec).checks[0]
    assert check.nodes() == 3 and check.args()[:3] == ["pairs", "--size", "1M"] and "--nodes" in check.args()
    assert check.args()[check.args().index("--nodes") + 1] == "3"
    spec.write_text(PAIRS_SPEC + "    nodes: 2\n")              # the spec's own count stands
    assert load_spec(spec).checks[0].nodes() == 2
    monkeypatch.setenv("SLURM_SCRIPT_CONTEXT", "prolog_slurmd")   # a node's Prolog sees a job but no allocation
    spec.write_text(PAIRS_SPEC)
    with pytest.raises(UserError,
                       match="kind pairs needs nodes \\(or a Slurm allocation, whose node count it takes\\)"):
        load_spec(spec)
