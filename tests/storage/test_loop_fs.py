"""scripts/loop-fs: a real XFS/ext4 on a loop device with direct I/O, and its clean-up."""
import errno
import json
import mmap
import os
from pathlib import Path

import pytest

from benchcore.processes.procs import mount_at, run
from tests.storage_fixtures import LOOP_FS, assert_direct_read_back, assert_loop_fs_gone, loops_backed_by, run_script

pytestmark = [pytest.mark.root, pytest.mark.slow]


def test_mount_is_real_xfs_on_a_loop_device_with_direct_io(loop_xfs_mount):
    m = mount_at(loop_xfs_mount)
    src = m.source
    assert m.fs_type == "xfs" and src.startswith("/dev/loop"), m
    loop = Path("/sys/block") / Path(src).name / "loop"
    assert (loop / "dio").read_text().strip() == "1"  # losetup --direct-io=on took effect
    assert (loop / "backing_file").read_text().strip() == str(loop_xfs_mount.parent / "disk.img")
    # the kernel, not the mount table, says XFS
    stat = run(["stat", "-f", "-c", "%T", loop_xfs_mount], 30)
    assert stat.returncode == 0 and stat.stdout.strip() == "xfs"


def test_o_direct_write_and_read_back(loop_xfs_mount):
    path = loop_xfs_mount / "odirect.bin"
    data = os.urandom(1 << 20)
    buf = mmap.mmap(-1, len(data))  # page-aligned, as O_DIRECT requires
    buf[:] = data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    try:
        assert os.write(fd, buf) == len(data)
        os.fsync(fd)
        # XFS enforces O_DIRECT alignment: a 1000-byte write is refused, proving the flag is live
        with pytest.raises(OSError) as e:
            os.write(fd, buf[:1000])
        assert e.value.errno == errno.EINVAL
    finally:
        os.close(fd)
    assert_direct_read_back(path, data)


def test_second_up_reports_the_running_fs_and_refuses_a_different_one(loop_xfs_mount):
    d = loop_xfs_mount.parent
    before = mount_at(loop_xfs_mount)
    again = run_script(LOOP_FS, "up", "--dir", d)
    assert again.returncode == 0, again.stderr
    assert "already up: xfs (4G)" in again.stdout
    assert mount_at(loop_xfs_mount) == before and len(loops_backed_by(d / "disk.img")) == 1
    other = run_script(LOOP_FS, "up", "--fs", "ext4", "--dir", d)
    assert other.returncode == 1 and other.stderr.count("\n") == 1, other.stderr
    assert "already holds xfs" in other.stderr
    st = run_script(LOOP_FS, "status", "--dir", d)
    assert st.returncode == 0 and "running" in st.stdout and before.source in st.stdout


def test_ext4_up_then_down_after_a_half_torn_state(tmp_path):
    """ext4 comes up; someone unmounts it by hand (partial state); down still cleans all."""
    d = tmp_path / "e4"
    try:
        up = run_script(LOOP_FS, "up", "--fs", "ext4", "--size", "512M", "--dir", d)
        assert up.returncode == 0, up.stderr
        m = mount_at(d / "mnt")
        src = m.source
        assert m.fs_type == "ext4" and loops_backed_by(d / "disk.img") == [src]
        assert run(["umount", d / "mnt"], 60).returncode == 0
        st = run_script(LOOP_FS, "status", "--json", "--dir", d)
        assert st.returncode == 1 and json.loads(st.stdout)["state"] == "partial"
        down = run_script(LOOP_FS, "down", "--dir", d)
        assert down.returncode == 0, down.stderr
        assert f"detached {src}" in down.stdout
        assert_loop_fs_gone(d)
        assert run_script(LOOP_FS, "status", "--dir", d).returncode == 3
        again = run_script(LOOP_FS, "down", "--dir", d)  # idempotent
        assert again.returncode == 0 and "nothing to do" in again.stdout
    finally:
        run_script(LOOP_FS, "down", "--dir", d)


def test_refusals_are_one_line_and_touch_nothing(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("user data")
    for args, needle in ((["--dir", mine], "not empty"),
                         (["--size", "10x", "--dir", tmp_path / "a"], "--size '10x' is not a size"),
                         (["--size", "100M", "--dir", tmp_path / "b"], "too small for xfs")):
        p = run_script(LOOP_FS, "up", *args)
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("loop-fs: error:") and needle in lines[0]
    down = run_script(LOOP_FS, "down", "--dir", mine)
    assert down.returncode == 1 and "holds no loop-fs state" in down.stderr
    assert (mine / "keep.txt").read_text() == "user data"
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_help_shows_examples():
    p = run_script(LOOP_FS, "--help")
    assert p.returncode == 0 and "examples:" in p.stdout and "--direct-io=on" in p.stdout
