"""judge takes --collective as import does, and the user's --ranks/--nodes over a log that shows only part of its
rank list. The log is the real 2-node A3 Mega all_reduce log of tests/fixtures/gpu_logs with its device list cut
to the first node's 8 ranks (as an excerpt pasted into an issue shows it)."""
from pathlib import Path

from tests.conftest import run_tool

GPU_LOGS = Path(__file__).parents[2] / "fixtures" / "gpu_logs"


def test_user_ranks_and_nodes_over_a_partial_rank_list(tmp_path):
    lines = (GPU_LOGS / "h100-2node-gcp-a3mega.md").read_text().splitlines(keepends=True)
    cut = tmp_path / "all_reduce.md"
    cut.write_text("".join(ln for ln in lines if not ("#  Rank " in ln and "ztan-mig-gq73" in ln)))
    seen = run_tool("commbench", "judge", cut, "--topology", "gcp-a3-mega", "--format", "json")
    given = run_tool("commbench", "judge", cut, "--topology", "gcp-a3-mega", "--ranks", 16, "--nodes", 2,
                     "--format", "json")
    assert '"ranks": 8, "nodes": 1' in seen.stdout             # what the cut list shows
    assert '"ranks": 16, "nodes": 2' in given.stdout and '"ranks": 8' not in given.stdout


def test_collective_option_like_import(tmp_path):
    rows = tmp_path / "rows.log"                               # no banner, no *_perf line, a file name naming none
    rows.write_text((GPU_LOGS / "h100-1node-aws-p5-batch-all_reduce.log").read_text())
    refused = run_tool("commbench", "judge", rows, "--topology", "dgx-h100", "--ranks", 8, "--nodes", 1)
    assert refused.returncode == 2 and "no collective named" in refused.stderr
    named = run_tool("commbench", "judge", rows, "--topology", "dgx-h100", "--ranks", 8, "--nodes", 1,
                     "--collective", "allreduce")
    assert named.returncode == 0 and "all_reduce 16G (8 ranks on 1 node): nvls" in named.stdout, named.stdout
    bad = run_tool("commbench", "judge", rows, "--topology", "dgx-h100", "--collective", "allreduse")
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "not a collective" in bad.stderr
