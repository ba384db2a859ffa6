"""Real mounts for iobench tests: XFS on a loop device, tmpfs, a FUSE file system without O_DIRECT.

The loop-device XFS is the session's shared one (scripts/loop-fs through tests/storage_fixtures.py);
the fixtures here unmount what they mount in a finally block, so a failing test leaves nothing mounted.
"""
import hashlib
import importlib
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.storage_fixtures import loop_xfs_mount, mount_entry  # noqa: F401

HERE = Path(__file__).resolve().parent


def sh(*cmd, timeout=60):
    return subprocess.run(list(map(str, cmd)), check=True, capture_output=True, text=True, timeout=timeout)


def unmount(path):
    """umount, falling back to a lazy unmount so teardown never hangs on a busy mount."""
    if mount_entry(path):
        if subprocess.run(["umount", str(path)], capture_output=True, timeout=60).returncode != 0:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=60)


@pytest.fixture(autouse=True)
def _root_only(request):
    if request.node.get_closest_marker("root") and os.geteuid() != 0:
        pytest.skip("needs root (loop devices, mounts)")


@pytest.fixture(scope="session")
def loop_xfs(loop_xfs_mount):
    """(mount point, /dev/loopN): the session's XFS on a loop device (tests/storage_fixtures.py)."""
    return loop_xfs_mount, mount_entry(loop_xfs_mount)[0]


@pytest.fixture
def tmpfs(tmp_path):
    """Factory: mount a tmpfs of a given size (optionally read-only) under tmp_path."""
    mounts = []

    def make(name, size="64M", ro=False):
        mnt = tmp_path / name
        mnt.mkdir()
        sh("mount", "-t", "tmpfs", "-o", f"size={size}" + (",ro" if ro else ""), "tmpfs", mnt)
        mounts.append(mnt)
        return mnt
    try:
        yield make
    finally:
        for mnt in mounts:
            unmount(mnt)


@pytest.fixture
def nodirect_fuse(tmp_path):
    """A real FUSE mount (tests/iobench/nodirect_fs.py) whose open(O_DIRECT) fails with EINVAL."""
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")
    try:
        importlib.import_module("mfusepy")  # scripts/setup --test installs it and libfuse3
    except (ImportError, OSError) as exc:
        pytest.skip(f"FUSE bindings unavailable: {exc}")
    backing, mnt = tmp_path / "backing", tmp_path / "fuse"
    backing.mkdir()
    mnt.mkdir()
    proc = subprocess.Popen([sys.executable, str(HERE / "nodirect_fs.py"), str(backing), str(mnt)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 20
        while not mount_entry(mnt):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"FUSE file system did not mount: {proc.stdout.read() if proc.poll() is not None else ''}")
            time.sleep(0.05)
        yield mnt
    finally:
        unmount(mnt)
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def snapshot(root):
    """{relative path: (kind, sha256 or link target, mtime_ns, mode)} of everything under root."""
    state = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = path.lstat()
            if path.is_symlink():
                state[str(path.relative_to(root))] = ("link", os.readlink(path), st.st_mtime_ns, st.st_mode)
            elif path.is_file():
                digest = hashlib.sha256(path.read_bytes()).hexdigest()
                state[str(path.relative_to(root))] = ("file", digest, st.st_mtime_ns, st.st_mode)
            else:
                state[str(path.relative_to(root))] = ("dir", None, None, st.st_mode)
    return state


def plant_sentinels(root):
    """Files a user owns, beside and inside PATH, and a symlink from PATH out to another of them."""
    data, outside = root / "data", root / "outside"
    (data / "sub").mkdir(parents=True)
    outside.mkdir()
    (root / "beside.bin").write_bytes(os.urandom(4096))
    (data / "inside.bin").write_bytes(os.urandom(65536))
    (data / "sub" / "model.pt").write_bytes(os.urandom(8192))
    (outside / "precious.bin").write_bytes(os.urandom(4096))
    (data / "escape").symlink_to(outside)
    (data / "iobench-not-mine").mkdir()  # looks like ours; must survive
    return data


def leftovers(path):
    return sorted(p.name for p in Path(path).glob("iobench-2*"))


def assert_failed_run(proc, needle):
    """A run that failed after it started: progress lines, then one 'error:' line, exit 2, no traceback."""
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and needle in last, proc.stderr
