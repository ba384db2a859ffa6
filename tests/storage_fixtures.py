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
import sys
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LOOP_FS = ROOT / "scripts" / "loop-fs"
CEPHFS_LOCAL = ROOT / "scripts" / "cephfs-local"


def run_script(script, *args, timeout=120):
    """Run scripts/loop-fs or scripts/cephfs-local; CompletedProcess with text output."""
    return subprocess.run([str(script), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


def mount_entry(path):
    """(source, fstype, options) of the mount at path in /proc/mounts, or None."""
    found = None
    for line in Path("/proc/mounts").read_text().splitlines():
        src, mnt, fstype, opts = line.split()[:4]
        if mnt.encode().decode("unicode_escape") == str(path):
            found = (src, fstype, opts)
    return found


def live_procs_mentioning(text):
    """{pid: cmdline} of running (non-zombie) processes whose command line contains text."""
    found = {}
    for p in Path("/proc").iterdir():
        if not p.name.isdigit() or int(p.name) == os.getpid():
            continue
        try:
            cmd = (p / "cmdline").read_bytes().decode(errors="replace").replace("\0", " ")
            state = (p / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if text in cmd and state != "Z":
            found[int(p.name)] = cmd.strip()
    return found


def loops_backed_by(image):
    """/dev/loopN whose backing file is image (also when it was deleted)."""
    devs = []
    for b in Path("/sys/block").glob("loop*/loop/backing_file"):
        backing = b.read_text().strip()
        if backing in (str(image), f"{image} (deleted)"):
            devs.append(f"/dev/{b.parent.parent.name}")
    return sorted(devs)


def _one_line(proc):
    lines = [ln for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
    return lines[-1] if lines else f"exit {proc.returncode}"


def _force_clean(d, conf=None):
    """Last resort after a failed `down`: kill our processes by PID, lazily unmount."""
    if conf:
        for pid in live_procs_mentioning(str(conf)):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    mnt = Path(d) / "mnt"
    while mount_entry(mnt):
        if subprocess.run(["umount", "-l", str(mnt)], capture_output=True).returncode:
            break


def assert_loop_fs_gone(d, wait_s=60):
    """Nothing of a loop-fs set-up remains: no mount, no loop device on its image, no dir.

    A detached loop device can stay listed for a while when another mount namespace still
    held the mount; wait up to wait_s for the kernel to let it go."""
    d = Path(d)
    assert mount_entry(d / "mnt") is None, f"{d}/mnt still mounted"
    end = time.monotonic() + wait_s
    while loops_backed_by(d / "disk.img") and time.monotonic() < end:
        time.sleep(0.5)
    assert loops_backed_by(d / "disk.img") == [], "loop device still attached"
    assert not d.exists(), f"{d} left behind: {sorted(os.listdir(d))}"


def assert_cephfs_gone(d):
    """Nothing of a cephfs-local cluster remains: no process using its conf, no mount, no dir."""
    d = Path(d)
    assert live_procs_mentioning(str(d / "ceph.conf")) == {}
    assert mount_entry(d / "mnt") is None, f"{d}/mnt still mounted"
    assert not d.exists(), f"{d} left behind: {sorted(os.listdir(d))}"


@dataclass(frozen=True)
class CephFS:
    """A mounted CephFS of a running scripts/cephfs-local cluster."""
    path: Path        # the ceph-fuse mount point
    data_pool: str    # RADOS pool holding file data
    conf: Path        # ceph.conf for `ceph -c` / `rados -c`
    dir: Path         # the cluster's state directory (what --dir names)

    def ceph(self, *args, timeout=60):
        return subprocess.run(["ceph", "-c", str(self.conf), *map(str, args)],
                              capture_output=True, text=True, timeout=timeout)

    def rados(self, *args, timeout=60):
        return subprocess.run(["rados", "-c", str(self.conf), *map(str, args)],
                              capture_output=True, text=True, timeout=timeout)


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
