"""benchcore.files, the one way both tools write a file, attacked as another user would on a fleet node
(fs.protected_symlinks is 0 here, as in many containers): links planted by `nobody` in a world-writable
directory never make root write through them, and iobench's per-mount lock lives where nobody can plant one.

Needs root (files owned by another user, a process run as nobody); cheap, so it runs two at a time."""
import os
import pwd
import re
import shutil
import subprocess
import tempfile
import types
from pathlib import Path

import pytest

from benchcore.errors import UserError
from benchcore.files import (check_append, held_path, hold_private, make_held, make_parents, open_append, output_dir,
                              private_dir, remove_held, replace_output, replace_text, write_new, write_new_text)
from benchcore.results.records import RecordWriter, output_file
from iobench.safety import LOCK_BASE, MountLock
from tests.conftest import ROOT, assert_one_line_error, run_tool

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="plants files as another user: needs root")
NOBODY = pwd.getpwnam("nobody")


@pytest.fixture
def shared():
    """A world-writable sticky directory like /tmp, and a root-owned 0600 victim outside it (under /tmp: pytest's
    own tmp directories are closed to nobody)."""
    base = Path(tempfile.mkdtemp(prefix="commbench-files-", dir="/tmp"))
    base.chmod(0o755)
    d = base / "shared"
    d.mkdir()
    d.chmod(0o1777)
    victim = base / "victim"
    victim.write_text("root's secret\n")
    victim.chmod(0o600)
    yield types.SimpleNamespace(dir=d, victim=victim)
    shutil.rmtree(base)


def as_nobody(*argv):
    """Run argv as nobody (a planted file is then nobody's, as in a real attack)."""
    return subprocess.run(["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups",
                           *map(str, argv)], capture_output=True, text=True, timeout=30, check=True)


@as_root
def test_a_new_file_never_replaces_or_follows_what_another_user_planted(shared):
    link = shared.dir / "plot.png"
    as_nobody("ln", "-s", shared.victim, link)
    with pytest.raises(UserError, match="plot.png exists; refusing to replace"):
        write_new_text(link, "x", "--plot")
    dangling = shared.dir / "report.md"
    as_nobody("ln", "-s", shared.dir / "not-yet", dangling)
    with pytest.raises(UserError, match="exists"):
        write_new_text(dangling, "x", "--out")
    assert shared.victim.read_text() == "root's secret\n" and not (shared.dir / "not-yet").exists()


@as_root
def test_a_new_file_is_whole_or_absent(tmp_path):
    path = tmp_path / "r.csv"
    assert write_new(path, lambda f: f.write(b"a,b\n"), "--out", binary=True) == str(path)
    assert path.read_bytes() == b"a,b\n" and oct(path.stat().st_mode & 0o777) == oct(0o644 & ~_umask())

    def broken(f):
        f.write("half")
        raise OSError(28, "No space left on device")
    with pytest.raises(OSError):
        write_new(tmp_path / "s.csv", broken, "--out")
    assert not (tmp_path / "s.csv").exists()


def _umask():
    mask = os.umask(0)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("plant, why", [
    (lambda d, v: as_nobody("ln", "-s", v, d / "rec.jsonl"), "is a symbolic link"),
    (lambda d, v: as_nobody("touch", d / "rec.jsonl"), "is owned by another user"),
])
@as_root
def test_records_are_never_appended_through_a_planted_file(shared, plant, why):
    plant(shared.dir, shared.victim)
    out = str(shared.dir / "rec.jsonl")
    with pytest.raises(UserError, match=why):
        output_file(out)          # refused before anything runs
    with pytest.raises(UserError, match=why):
        RecordWriter(out)         # and again where the file is opened, should it appear in between
    assert shared.victim.read_text() == "root's secret\n"


@as_root
def test_a_hard_link_to_another_file_is_not_appended_to(tmp_path):
    mine = tmp_path / "mine.jsonl"
    mine.write_text("")
    os.link(mine, tmp_path / "alias.jsonl")
    for check in (check_append, lambda p, w: open_append(p, w)):
        with pytest.raises(UserError, match="another hard link"):
            check(tmp_path / "alias.jsonl", "--out")


@as_root
def test_appending_to_own_file_starts_on_a_fresh_line(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_text('{"a": 1}')           # a torn last line
    with RecordWriter(str(path)) as w:
        w.write({"b": 2})
    assert path.read_text() == '{"a": 1}\n{"b": 2}\n'


@as_root
def test_output_directories_are_made_or_the_callers_alone(shared):
    assert output_dir(shared.dir / "new" / "report", "--out") is True
    assert output_dir(shared.dir / "new" / "report", "--out") is False     # ours, again
    as_nobody("mkdir", shared.dir / "theirs")
    with pytest.raises(UserError, match="owned by another user"):
        output_dir(shared.dir / "theirs", "--out")
    with pytest.raises(UserError, match="writable by other users"):
        output_dir(shared.dir, "--out")
    as_nobody("ln", "-s", shared.victim.parent, shared.dir / "link")
    with pytest.raises(UserError, match="symbolic link"):
        output_dir(shared.dir / "link", "--out")


@as_root
def test_a_link_another_user_planted_above_an_output_is_never_followed(shared):
    """N4: nobody links D/nightly -> a root-owned directory in a world-writable D; every output below it (--out and
    --history's append, a new file, a replaced file, an output directory, the parents made for one) is refused in one
    line and the other directory is left as it was."""
    victim_dir = shared.victim.parent / "victimdir"
    victim_dir.mkdir()
    (victim_dir / "results.jsonl").write_text('{"precious": 1}\n')
    as_nobody("ln", "-s", victim_dir, shared.dir / "nightly")
    out = shared.dir / "nightly" / "results.jsonl"
    done = run_tool("commbench", "import", ROOT / "tests/fixtures/foreign/nccl-tests-2.9-broadcast.log", "--out", out)
    assert_one_line_error(done, "nightly is a symbolic link owned by another user (uid 65534); refusing to follow it")
    for write in (lambda: check_append(out, "--out"), lambda: open_append(out, "--history"),
                  lambda: write_new_text(shared.dir / "nightly" / "new.md", "x", "--plot"),
                  lambda: replace_output(shared.dir / "nightly" / "m.prom", "x", "--metrics"),
                  lambda: output_dir(shared.dir / "nightly" / "report", "--out"),
                  lambda: make_parents(shared.dir / "nightly" / "sub" / "r.jsonl", "--out"),
                  lambda: replace_text(shared.dir / "nightly" / "state", "x")):
        with pytest.raises(UserError, match="nightly is a symbolic link"):
            write()
    assert sorted(p.name for p in victim_dir.iterdir()) == ["results.jsonl"]
    assert (victim_dir / "results.jsonl").read_text() == '{"precious": 1}\n'


@as_root
def test_links_nobody_else_could_have_made_are_followed(shared, tmp_path):
    """Normal use: a directory root made in the shared one, and root's own links (in root's directory, and in the
    sticky world-writable one: there nobody else can rename or replace it) lead where they say."""
    (shared.dir / "x").mkdir()
    with open_append(shared.dir / "x" / "out.jsonl", "--out") as f:
        f.write("1\n")
    real = tmp_path / "real"
    real.mkdir()
    (tmp_path / "mine").symlink_to(real)                    # like /var/run -> /run
    (shared.dir / "root-link").symlink_to(real)             # root's link in the sticky directory
    for path in (tmp_path / "mine" / "a.jsonl", shared.dir / "root-link" / "b.jsonl"):
        with open_append(path, "--out") as f:
            f.write("2\n")
    assert sorted(p.name for p in real.iterdir()) == ["a.jsonl", "b.jsonl"]
    shared.dir.chmod(0o777)                                 # not sticky: another user could replace root's link
    with pytest.raises(UserError, match="root-link is a symbolic link in a directory another user can write"):
        check_append(shared.dir / "root-link" / "c.jsonl", "--out")
    shared.dir.chmod(0o1777)


@as_root
def test_a_held_directory_is_the_one_made_whatever_its_parents_owner_renames(shared):
    """A private directory made in nobody's directory, which nobody renames and replaces with a link to their own: its
    held path still leads to the one made (a file written there lands in it), another process reaches it too, and
    its removal empties it and leaves nobody's link and directory alone; hold_private (another node's way in) refuses
    the link, and a directory of the right kind but another inode."""
    d, evil = shared.dir / "alice", shared.dir / "evil"
    as_nobody("mkdir", d, evil)
    parent, fd = make_held(d / "iobench-x", "scratch directory")
    inode = os.fstat(fd).st_ino
    as_nobody("mv", d / "iobench-x", d / "hidden")
    as_nobody("ln", "-s", evil, d / "iobench-x")
    write_new_text(Path(held_path(fd)) / "job.fio", "[x]\n", "job file")
    assert (d / "hidden" / "job.fio").read_text() == "[x]\n" and list(evil.iterdir()) == []
    assert subprocess.run(["cat", f"{held_path(fd)}/job.fio"], capture_output=True, text=True).stdout == "[x]\n"
    with pytest.raises(UserError, match="is a symbolic link"):
        hold_private(d / "iobench-x", "node 0's scratch directory", inode)
    os.close(hold_private(d / "hidden", "node 0's scratch directory", inode))
    os.mkdir(d / "other", 0o700)
    with pytest.raises(UserError, match="is another directory"):
        hold_private(d / "other", "node 0's scratch directory", inode)
    remove_held(parent, "iobench-x", fd)
    assert list((d / "hidden").iterdir()) == [] and (d / "iobench-x").is_symlink() and evil.is_dir()
    with pytest.raises(UserError, match="owned by another user"):
        hold_private(evil, "node 0's scratch directory")


@as_root
def test_a_private_directory_is_closed_to_everyone_else(tmp_path):
    assert private_dir(tmp_path / "p", "state") == str(tmp_path / "p")
    assert (tmp_path / "p").stat().st_mode & 0o777 == 0o700
    (tmp_path / "open").mkdir(mode=0o755)
    with pytest.raises(UserError, match="open to other users"):
        private_dir(tmp_path / "open", "state")


@as_root
def test_the_mount_lock_is_where_nobody_can_plant_a_link(shared):
    mount = types.SimpleNamespace(dev="259:77", mount_point="/mnt/x")
    old = "/run/lock/iobench-mount-259_77.lock"     # where the lock was, world-writable
    if os.path.isdir("/run/lock"):
        as_nobody("ln", "-sf", shared.victim, old)
    try:
        with MountLock(mount, "run-1"):
            assert os.stat(LOCK_BASE).st_mode & 0o777 == 0o700 and os.stat(LOCK_BASE).st_uid == 0
            with pytest.raises(subprocess.CalledProcessError):
                as_nobody("ln", "-s", shared.victim, f"{LOCK_BASE}/mount-259_77.lock.x")
        assert shared.victim.read_text() == "root's secret\n"
    finally:
        if os.path.islink(old):
            os.unlink(old)
        if os.path.exists(f"{LOCK_BASE}/mount-259_77.lock"):
            os.unlink(f"{LOCK_BASE}/mount-259_77.lock")


@as_root
def test_the_lock_holder_text_reaches_the_terminal_printable_and_short(tmp_path):
    mount = types.SimpleNamespace(dev="259:78", mount_point="/mnt/y")
    path = f"{LOCK_BASE}/mount-259_78.lock"
    try:
        with MountLock(mount, "run-1") as held:
            os.pwrite(held._file.fileno(), b"\x1b]0;owned\x07pid 1 " + b"y" * 500, 0)
            with pytest.raises(UserError) as refused:
                with MountLock(mount, "run-2"):
                    pass
        text = str(refused.value)
        assert "\x1b" not in text and "\x07" not in text and "y" * 101 not in text and "another iobench" in text
    finally:
        if os.path.exists(path):
            os.unlink(path)


WRITES = re.compile(r"\bopen\([^)\n]*[\"'][wa]b?\+?[\"']|\.write_text\b|\.write_bytes\b|savefig\((?!f\b)|"
                    r"ElementTree\([^)\n]*\)\.write\((?!f\b)|"
                    r"\.to_(csv|parquet)\((?!f\b|sys\.stdout)|os\.open\([^)\n]*O_CREAT(?![^)\n]*O_(EXCL|NOFOLLOW))")


def test_every_file_is_written_the_one_way():
    """No module of the three packages writes a file but through benchcore.files (or a file object it opened);
    runs without root."""
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for package in ("benchcore", "commbench", "iobench") for path in sorted((ROOT / package).rglob("*.py"))
             if path != ROOT / "benchcore" / "files.py"
             for n, line in enumerate(path.read_text().splitlines(), 1) if WRITES.search(line)]
    assert not found, "\n".join(found)
