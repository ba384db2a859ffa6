"""Shared test helpers: run the real console scripts in subprocesses."""
import fcntl
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from benchcore import records, schema

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent


def read_records(path, **kw):
    """The records a tool wrote, each checked against benchcore.schema: exactly its tool's DESIGN
    fields plus documented extensions (events: the event fields plus theirs)."""
    found = records.read_records(path, **kw)
    for rec in found:
        assert not schema.problems(rec), (schema.problems(rec), rec)
    return found


def run_tool(tool, *args, timeout=300, env=None, cwd=None, memory_limit=None):
    """Run `commbench`/`iobench` from this venv; returns CompletedProcess (text).

    memory_limit (bytes of address space) caps the tool and its children, so that a runaway fails
    the test instead of taking the machine down."""
    full_env = {**os.environ, **(env or {})}
    limit = (lambda: resource.setrlimit(resource.RLIMIT_AS, (memory_limit, memory_limit))) if memory_limit else None
    return subprocess.run([str(BIN / tool), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=full_env, cwd=cwd, preexec_fn=limit)


def assert_one_line_error(proc, needle):
    """Bad input: non-zero exit, one 'error:' line naming the problem, no traceback."""
    assert proc.returncode != 0, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), proc.stderr
    assert needle in lines[0], lines[0]


@pytest.fixture(scope="module", autouse=True)
def one_host_mount_module_at_a_time(request):
    """iobench lets one run at a time measure a file system: under scripts/test's two workers, a host_mount module
    (its module fixtures included) waits on a file lock for the other worker's to end, so neither meets iobench's."""
    if not request.node.get_closest_marker("host_mount") or not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    with open(Path(tempfile.gettempdir()) / "commbench-tests-host-mount.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture
def tool():
    return run_tool
