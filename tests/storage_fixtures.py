"""Real storage for tests: a loop-device XFS and a single-node CephFS, one of each per session.

Use them from any test folder by importing the fixtures into that folder's conftest.py:

    from tests.storage_fixtures import cephfs_mount, loop_xfs_mount  # noqa: F401

`loop_xfs_mount` yields the mount path (XFS on /dev/loopN, direct I/O on);
`cephfs_mount` yields a `CephFS` (path, data_pool, conf, dir). Both are brought up by
scripts/loop-fs and scripts/cephfs-local and always torn down by their `down`, also when
`up` or a test fails; a leftover process or mount after `down` is a teardown error. Importing
them into several folders still gives one of each per session. Both
need root; they fail (not skip) without it, since CI runs as root with the packages
installed by scripts/setup.
"""
import json
import mmap
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from benchcore.emulate.loop_fs import loops_backed_by
from benchcore.emulate.skeleton import live_pids
from benchcore.processes import procs

ROOT = Path(__file__).resolve().parent.parent
LOOP_FS = ROOT / "scripts" / "loop-fs"
CEPHFS_LOCAL = ROOT / "scripts" / "cephfs-local"


def run_script(script, *args, timeout=120):
    """Run scripts/loop-fs or scripts/cephfs-local; procs.Completed (returncode, stdout, stderr)."""
    done = procs.run([script, *args], timeout)
    assert not done.timed_out, f"{script.name} {' '.join(map(str, args))} ran past {timeout} s"
    return done


def mount_entry(path):
    """(source, fs type) of the mount on top at path, or None (tests/iobench/conftest.py reads it)."""
    m = procs.mount_at(path)
    return (m.source, m.fs_type) if m else None


def _one_line(done):
    return f"exit {done.returncode}: {procs.one_line(done.stderr or done.stdout)}"


def _force_clean(d, conf=None):
    """Last resort after a failed `down`: kill our processes by PID, lazily unmount."""
    if conf:
        for pid in live_pids(str(conf)):
            procs.kill(pid)
    mnt = Path(d) / "mnt"
    while procs.mount_at(mnt):
        if procs.run(["umount", "-l", mnt], 60).returncode:
            break


def assert_loop_fs_gone(d, wait_s=60):
    """Nothing of a loop-fs set-up remains: no mount, no loop device on its image, no dir.

    A detached loop device can stay listed for a while when another mount namespace still
    held the mount; wait up to wait_s for the kernel to let it go."""
    d = Path(d)
    assert procs.mount_at(d / "mnt") is None, f"{d}/mnt still mounted"
    end = time.monotonic() + wait_s
    while loops_backed_by(d / "disk.img") and time.monotonic() < end:
        time.sleep(0.5)
    assert loops_backed_by(d / "disk.img") == [], "loop device still attached"
    assert not d.exists(), f"{d} left behind: {sorted(os.listdir(d))}"


def assert_cephfs_gone(d):
    """Nothing of a cephfs-local cluster remains: no process using its conf, no mount, no dir."""
    d = Path(d)
    assert live_pids(str(d / "ceph.conf")) == []
    assert procs.mount_at(d / "mnt") is None, f"{d}/mnt still mounted"
    assert not d.exists(), f"{d} left behind: {sorted(os.listdir(d))}"


@dataclass(frozen=True)
class CephFS:
    """A mounted CephFS of a running scripts/cephfs-local cluster."""
    path: Path        # the ceph-fuse mount point
    data_pool: str    # RADOS pool holding file data
    conf: Path        # ceph.conf for `ceph -c` / `rados -c`
    dir: Path         # the cluster's state directory (what --dir names)

    def ceph(self, *args, timeout=60):
        return procs.run(["ceph", "-c", self.conf, *args], timeout)

    def rados(self, *args, timeout=60):
        return procs.run(["rados", "-c", self.conf, *args], timeout)


# One of each per session even when several folders' conftest.py import these fixtures
# (pytest then holds one session fixture per folder): the first brings it up, the last
# to finish takes it down.
_shared = {}


def _shared_resource(kind, start, stop):
    """Yield start()'s value; stop() (the first user's) runs once, after the last user."""
    if kind not in _shared:
        _shared[kind] = {"users": 0, "stop": stop, "value": None}
        try:
            _shared[kind]["value"] = start()
        except BaseException:
            del _shared[kind]
            try:
                stop()  # `down` also cleans up after a failed `up`
            except Exception:
                pass    # report the failed `up`; stop() forced what `down` could not
            raise
    entry = _shared[kind]
    entry["users"] += 1
    try:
        yield entry["value"]
    finally:
        entry["users"] -= 1
        if entry["users"] == 0:
            del _shared[kind]
            entry["stop"]()


@pytest.fixture(scope="session")
def loop_xfs_mount(tmp_path_factory):
    """Path of a 4 GiB XFS on a loop device (--direct-io=on); torn down at session end."""
    d = tmp_path_factory.mktemp("loop-xfs") / "fs"

    def start():
        up = run_script(LOOP_FS, "up", "--fs", "xfs", "--size", "4G", "--dir", d)
        if up.returncode != 0:
            pytest.fail(f"loop-fs up failed: {_one_line(up)}", pytrace=False)
        return d / "mnt"

    def stop():
        down = run_script(LOOP_FS, "down", "--dir", d)
        if down.returncode != 0:
            _force_clean(d)
            raise AssertionError(f"loop-fs down failed: {_one_line(down)}")
        assert_loop_fs_gone(d)

    yield from _shared_resource("loop-xfs", start, stop)


@pytest.fixture(scope="session")
def cephfs_mount(tmp_path_factory):
    """A `CephFS` (path, data_pool, conf, dir) on a real single-node cluster; one per session."""
    d = tmp_path_factory.mktemp("cephfs") / "cluster"

    def start():
        # A daemon sometimes dies at start-up on this loaded 2-core VM before writing any log
        # (seen once in ~10 bring-ups, mds.a or ceph-fuse); one clean retry, said on stderr.
        for attempt in (1, 2):
            up = run_script(CEPHFS_LOCAL, "up", "--dir", d, "--timeout", 240, timeout=300)
            if up.returncode == 0:
                break
            if attempt == 2:
                pytest.fail(f"cephfs-local up failed twice: {_one_line(up)}", pytrace=False)
            print(f"cephfs-local up failed, retrying once: {_one_line(up)}", file=sys.stderr)
            run_script(CEPHFS_LOCAL, "down", "--dir", d, timeout=120)
        st = json.loads(run_script(CEPHFS_LOCAL, "status", "--json", "--dir", d).stdout)
        return CephFS(path=Path(st["mount"]), data_pool=st["data_pool"], conf=Path(st["conf"]),
                      dir=Path(st["dir"]))

    def stop():
        down = run_script(CEPHFS_LOCAL, "down", "--dir", d, timeout=120)
        if down.returncode != 0:
            _force_clean(d, d / "ceph.conf")
            raise AssertionError(f"cephfs-local down failed: {_one_line(down)}")
        assert_cephfs_gone(d)

    yield from _shared_resource("cephfs", start, stop)


def assert_direct_read_back(path, data):
    """Read path with O_DIRECT into an aligned buffer, check it equals data, remove the file."""
    back = mmap.mmap(-1, len(data))
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        assert os.readv(fd, [back]) == len(data)
    finally:
        os.close(fd)
    assert back[:] == data
    path.unlink()
