"""Data safety: refusals before fio starts, cleanup on Ctrl-C / SIGTERM / fio failure, --keep."""
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import BIN, assert_one_line_error, read_records
from tests.iobench.conftest import assert_failed_run, leftovers, plant_sentinels, snapshot

LONG = ["--profile", "small-random-write", "--runtime", "60", "--size", "8M"]


def test_missing_path(tool, tmp_path):
    assert_one_line_error(tool("iobench", "ckpt", tmp_path / "nope", "--quick"), "does not exist")


def test_file_instead_of_directory(tool, tmp_path):
    (tmp_path / "f").write_text("mine")
    assert_one_line_error(tool("iobench", "ckpt", tmp_path / "f", "--quick"), "is not a directory")
    assert (tmp_path / "f").read_text() == "mine"


@pytest.mark.root
def test_block_device(tool, loop_xfs):
    _, device = loop_xfs
    assert_one_line_error(tool("iobench", "ckpt", device, "--quick"), "is a block device")


@pytest.mark.root
def test_read_only_mount(tool, tmpfs, tmp_path):
    ro = tmpfs("ro", ro=True)
    out = tmp_path / "r.jsonl"
    assert_one_line_error(tool("iobench", "ckpt", ro, "--quick", "--out", out), "read-only mount")
    (rec,) = read_records(out)
    assert rec["event"] == "refused" and "read-only" in rec["reason"] and rec["mount"] == str(ro)


@pytest.mark.root
def test_too_small_mount(tool, tmpfs):
    small = tmpfs("small", size="16M")
    proc = tool("iobench", "ckpt", small, "--profile", "shard-write", "--size", "64M")
    assert_one_line_error(proc, "free; this run needs 64M plus a 64M margin")
    assert os.listdir(small) == []


@pytest.mark.root
def test_one_bad_path_refuses_the_whole_run_before_fio(tool, tmpfs, tmp_path):
    ro = tmpfs("ro", ro=True)
    proc = tool("iobench", "ckpt", tmp_path, ro, "--quick")
    assert_one_line_error(proc, "read-only mount")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("out,needle", [("/dev/full", "is not a regular file"), ("DIR", "is a directory")])
def test_out_that_is_not_a_file_is_refused_before_fio(tool, tmp_path, out, needle):
    out = tmp_path if out == "DIR" else out
    assert_one_line_error(tool("iobench", "ckpt", tmp_path, "--quick", "--out", out), needle)
    assert leftovers(tmp_path) == []


def test_fio_missing(tool, tmp_path):
    proc = tool("iobench", "ckpt", tmp_path, "--quick", env={"PATH": "/nonexistent"})
    assert_one_line_error(proc, "fio not found on PATH: install it (Debian/Ubuntu: apt-get install fio")
    assert leftovers(tmp_path) == []


def test_fio_timeout_is_an_error_and_cleans_up(tool, tmp_path):
    data = plant_sentinels(tmp_path)
    before = snapshot(tmp_path)
    out = tmp_path.parent / f"{tmp_path.name}-r.jsonl"
    proc = tool("iobench", "ckpt", data, *LONG, "--timeout", "2", "--out", out)
    assert_failed_run(proc, "did not finish within 2 s")
    assert proc.stderr.strip().splitlines()[-1].startswith("error: small-random-write on")
    assert leftovers(data) == [] and snapshot(tmp_path) == before
    assert read_records(out)[-1]["event"] == "failed"


def start(args):
    """iobench in its own process group, as a shell starts a foreground job."""
    return subprocess.Popen([str(BIN / "iobench"), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def wait_for_fio(data, timeout=60):
    """Until fio has laid out its file in iobench's directory (fio is writing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if list(Path(data).glob("iobench-2*/small-random-write.0.0")):
            return
        time.sleep(0.05)
    pytest.fail("fio never started")


def fio_children(pid):
    """fio processes whose parent is pid."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if comm == "fio" and int(fields[1]) == pid:
            found.append(int(entry))
    return found


def fio_processes_in(directory):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "fio" in cmdline and str(directory) in cmdline:
            found.append(pid)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupt_mid_run_removes_everything(tmp_path, how):
    """Ctrl-C reaches iobench and fio (the whole process group); SIGTERM only iobench, which stops fio."""
    data = plant_sentinels(tmp_path)
    before = snapshot(tmp_path)
    proc = start(["ckpt", data, *LONG])
    wait_for_fio(data)
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 130 and "aborted" in stderr and "Traceback" not in stderr, stderr
    assert leftovers(data) == [] and snapshot(tmp_path) == before
    assert fio_processes_in(data) == []


@pytest.mark.slow
def test_killed_fio_is_an_error_and_cleans_up(tmp_path):
    data = plant_sentinels(tmp_path)
    before = snapshot(tmp_path)
    proc = start(["ckpt", data, *LONG])
    wait_for_fio(data)
    (fio,) = fio_children(proc.pid)
    os.kill(fio, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "fio was killed by signal 9" in stderr.strip().splitlines()[-1], stderr
    assert leftovers(data) == [] and snapshot(tmp_path) == before
    assert fio_processes_in(data) == []


@pytest.mark.slow
def test_keep_leaves_the_run_directory(tool, tmp_path):
    proc = tool("iobench", "ckpt", tmp_path, "--profile", "metadata", "--quick", "--size", "1M", "--keep")
    assert proc.returncode == 0, proc.stderr
    (kept,) = leftovers(tmp_path)
    assert f"kept {tmp_path / kept}" in proc.stderr
    assert (tmp_path / kept / "metadata.fio").exists() and len(list((tmp_path / kept).glob("metadata.0.*"))) == 16


def test_symlinked_path_is_resolved_and_reported(tool, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    proc = tool("iobench", "ckpt", tmp_path / "link", "--profile", "metadata", "--quick", "--size", "1M",
                "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert f'"mount": "{tmp_path / "real"}"' in proc.stdout
    assert os.listdir(tmp_path / "real") == [] and (tmp_path / "link").is_symlink()
