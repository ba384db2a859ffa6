"""Small things a new user tripped on (issue 39 item 9): --version on both tools, and a collective in the spelling
`import` reads (allreduce, AllGather) taken by --collective as well."""
import subprocess

import pytest

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
