"""Shared test helpers: run the real console scripts in subprocesses."""
import contextlib
import fcntl
import os
import resource
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import commbench.cases.registry  # noqa: F401  (its cases document their record fields in the schema)
from benchcore.results import records, schema
from commbench.transports.envvars import TEST_SWITCH

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
HOOKS_ON = {TEST_SWITCH: "1"}   # the environment in which commbench's test hooks act (commbench/cases/faults.py)


def read_records(path, **kw):
    """The records a tool wrote, each checked against benchcore.results.schema: exactly its tool's DESIGN
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


@contextlib.contextmanager
def host_mount_lock():
    """iobench lets one run at a time measure a file system: under scripts/test's two workers, whatever runs iobench
    on a host file system holds this file lock, so that it never meets the other worker's iobench."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        yield
        return
    with open(Path(tempfile.gettempdir()) / "commbench-tests-host-mount.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


@pytest.fixture(autouse=True)
def one_host_mount_test_at_a_time(request):
    """Each host_mount test under host_mount_lock (module fixtures that run iobench take it themselves)."""
    if request.node.get_closest_marker("host_mount"):
        with host_mount_lock():
            yield
    else:
        yield


@pytest.fixture
def tool():
    return run_tool
