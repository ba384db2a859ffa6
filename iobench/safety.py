"""Where iobench may write, and the private directory it writes in.

iobench writes only inside a fresh `iobench-<run_id>` directory that it creates under PATH and
removes at the end (also on Ctrl-C, SIGTERM and fio failure) unless --keep. Nothing else under
PATH is opened for writing, followed through a symlink, or removed.

PATH may be another user's, who can rename that directory (same parent) and put a link to their own in its place.
So it is held by a descriptor from the moment it is made, and every tool (fio, torchrun's ranks, the result read
back) reaches it as /proc/<pid>/fd/<n> (benchcore.files.held_path): the directory made, private (0700) and the
caller's, wherever it was renamed to; nothing is ever walked by its path under PATH again.
"""
import contextlib
import errno
import fcntl
import json
import mmap
import os
import signal
import stat
import tempfile
import time
from pathlib import Path

from benchcore.errors import UserError, name, shown
from benchcore.files import HOLD, held_path, make_held, private_dir, remove_held, write_new_text
from benchcore.processes.procs import proc_cmdline, proc_stat, signals_blocked
from benchcore.results.records import hostname
from benchcore.units import format_size
from iobench.mounts import PSEUDO_FS

MARGIN_MIN = 64 << 20     # free space kept beyond what a run needs
MARGIN_FRACTION = 0.05
PROBE_BYTES = 4096
PREFIX = "iobench-"
MARKER = ".iobench-run"   # written first into every directory iobench makes: who made it
LOCK_BASE = "/run/iobench"   # root's per-mount locks: a directory of root's alone (never world-writable /run/lock)


def margin(need):
    return max(MARGIN_MIN, int(need * MARGIN_FRACTION))


def check_target(path, need, mount):
    """Refuse (UserError) anything but a writable directory on a mount with room for need + margin."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UserError(f"{path} does not exist") from None
    except OSError as exc:
        raise UserError(f"{path}: {exc.strerror}") from None
    if stat.S_ISBLK(st.st_mode):
        raise UserError(f"{path} is a block device; iobench only writes into a directory on a mounted "
                        f"file system, never to a device")
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{path} is not a directory")
    if mount.fs_type in PSEUDO_FS:
        raise UserError(f"{path} is on {mount.fs_type} ({mount.mount_point}), a pseudo file system with no "
                        f"storage behind it; give a directory on a real file system")
    if need is None:  # --dry-run: prints, writes nothing, so needs no room
        return
    vfs = os.statvfs(path)
    if vfs.f_flag & os.ST_RDONLY or mount.read_only:
        raise UserError(f"{path} is on a read-only mount ({mount.mount_point}, {mount.fs_type})")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UserError(f"{path} is not writable")
    free = vfs.f_bavail * vfs.f_frsize
    if free < need + margin(need):
        raise UserError(f"{path} has {format_size(free, approx=True)} free; this run needs "
                        f"{format_size(need, approx=True)} plus a {format_size(margin(need), approx=True)} margin "
                        f"(use a smaller --size; model-ckpt: a smaller --scale or fewer --writes)")


class ScratchDir:
    """iobench-<run_id> under a checked PATH: created fresh (never reused), held for the whole run (`path`: its
    held_path; `shown`: where it was made, for messages), removed on exit unless keep."""

    def __init__(self, parent, run_id, keep=False):
        self.shown = Path(parent) / f"{PREFIX}{run_id}"
        self.keep = keep
        self.run_id = run_id
        self.path = self._parent = self._fd = None

    def __enter__(self):
        self._parent, self._fd = make_held(self.shown, "scratch directory")
        self.path = Path(held_path(self._fd))
        marker = {"run_id": self.run_id, "pid": os.getpid(), "host": hostname(), "started": time.time()}
        write_new_text(self.path / MARKER, json.dumps(marker) + "\n", "marker")
        return self

    def __exit__(self, *exc):
        if self.keep:
            os.close(self._fd)
            os.close(self._parent)
        else:
            self.remove()

    def inode(self):
        return os.fstat(self._fd).st_ino

    def remove(self):
        """Remove the directory through its descriptor (one renamed away stays, empty); nothing else."""
        with signals_blocked():
            remove_held(self._parent, self.shown.name, self._fd)


def probe_direct(directory):
    """(True, '') when the file system accepts an O_DIRECT write and read; else (False, why)."""
    probe = os.path.join(directory, "odirect-probe")
    buf = mmap.mmap(-1, PROBE_BYTES)  # page-aligned, as O_DIRECT needs
    buf.write(b"\xa5" * PROBE_BYTES)
    flags = os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_NOFOLLOW | os.O_DIRECT
    try:
        fd = os.open(probe, flags, 0o600)
    except OSError as exc:
        if exc.errno in (errno.EINVAL, errno.EOPNOTSUPP):
            return False, f"open(O_DIRECT): {errno.errorcode[exc.errno]}"
        raise UserError(f"cannot create a file in {directory}: {exc.strerror}") from None
    try:
        os.pwrite(fd, buf, 0)
        os.preadv(fd, [buf], 0)
        return True, ""
    except OSError as exc:
        return False, f"O_DIRECT write/read: {errno.errorcode.get(exc.errno, exc.errno)}"
    finally:
        os.close(fd)
        os.unlink(probe)
        buf.close()


@contextlib.contextmanager
def sigterm_as_interrupt():
    """While active, SIGTERM ends iobench with exit 143 (benchcore.errors): cleanup runs on the way."""
    def handler(signum, frame):
        raise SystemExit(128 + signum)
    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


MARKER_BYTES = 4096


def read_marker(directory):
    """The marker of a directory iobench made (dict), or None (then iobench did not make it): only a directory of the
    caller's that nobody else may enter (as iobench makes them; another user's, with a marker planted, is not ours),
    not a link, its marker a regular file read through the directory's descriptor, at most MARKER_BYTES."""
    try:
        fd = os.open(directory, HOLD)
    except OSError:
        return None
    try:
        return _marker_of(fd)
    finally:
        os.close(fd)


def _marker_of(fd):
    """read_marker of the directory open at fd."""
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o077:
            return None
        mfd = os.open(MARKER, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=fd)
        with os.fdopen(mfd, "rb") as f:
            if not stat.S_ISREG(os.fstat(mfd).st_mode):
                return None
            text = f.read(MARKER_BYTES + 1)
        marker = json.loads(text) if len(text) <= MARKER_BYTES else None
        return marker if isinstance(marker, dict) and "run_id" in marker else None
    except (OSError, ValueError, RecursionError):
        return None


def owner_alive(marker):
    """Whether the run that made a directory may still be running (another host: assume it is)."""
    if marker.get("host") != hostname():
        return True
    pid = marker.get("pid")
    st = proc_stat(pid) if isinstance(pid, int) else None
    return bool(st and st.state != "Z" and any("iobench" in a for a in proc_cmdline(pid) or []))


def du(path):
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            with contextlib.suppress(OSError):
                total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


def run_dirs(path):
    """Directories iobench made at path: path itself when it has the marker, else its iobench-* children that do."""
    if read_marker(path):
        return [Path(path)]
    try:
        children = sorted(Path(path).glob(PREFIX + "*"))
    except OSError:
        return []
    return [c for c in children if read_marker(c)]


def stale_dirs(path):
    """[(directory, marker, bytes)] under path that a run no longer alive left behind."""
    return [(d, m, du(d)) for d in run_dirs(path) if not owner_alive(m := read_marker(d))]


def clean(paths):
    """`iobench clean`: remove the directories iobench made at paths; refuse (nothing removed) when a
    path is not a directory or a run there is alive. Returns ([(directory, bytes)] removed, [paths that held
    none])."""
    found, empty = [], []
    for path in paths:
        real = os.path.realpath(path)
        if not os.path.isdir(real):
            raise UserError(f"{path}: not a directory; nothing removed")
        dirs = run_dirs(real)
        if not dirs:
            empty.append(path)
        for d in dirs:
            marker = read_marker(d)
            if owner_alive(marker):
                raise UserError(f"{name(d)} belongs to run {shown(marker['run_id'], 80)} (pid "
                                f"{shown(marker.get('pid'), 20)}, host {shown(marker.get('host'), 80)}), which may "
                                "still be running; nothing removed")
        found += dirs
    removed = []
    with signals_blocked():
        for d in dict.fromkeys(found):
            size = du(d)
            parent = os.open(d.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
            try:
                fd = os.open(d.name, HOLD, dir_fd=parent)
            except OSError:
                os.close(parent)
                continue      # gone or replaced since it was judged ours
            if not _marker_of(fd):
                os.close(fd)
                os.close(parent)
                continue
            remove_held(parent, d.name, fd)    # through its descriptor: what was judged ours, nothing put there since
            removed.append((d, size))
    return removed, empty


class MountLock:
    """A per-mount lock (flock on a file outside the mount, one per device) held for a whole run.

    Busy: with concurrent=True go on (the records say concurrent); else wait up to `wait` seconds,
    saying once whom for, then refuse naming the run that holds it (pid, run id)."""

    def __init__(self, mount, run_id, concurrent=False, wait=0, say=None):
        self.mount, self.run_id, self.concurrent, self.wait, self.say = mount, run_id, concurrent, wait, say
        self.busy = False
        self._file = None

    def _path(self):
        """The lock file in the caller's private lock directory: root's in /run/iobench (0700), another user's
        in $XDG_RUNTIME_DIR/iobench or TMPDIR/iobench-UID (0700, theirs): no other user can plant a link there."""
        if os.geteuid() == 0:
            base = LOCK_BASE
        elif os.environ.get("XDG_RUNTIME_DIR"):
            base = os.path.join(os.environ["XDG_RUNTIME_DIR"], "iobench")
        else:
            base = os.path.join(tempfile.gettempdir(), f"iobench-{os.geteuid()}")
        private_dir(base, "the lock directory")
        return os.path.join(base, f"mount-{self.mount.dev.replace(':', '_').replace('/', '_')}.lock")

    def _holder(self):
        """Who holds the lock, as its holder wrote it: printable characters only, at most 100."""
        text = os.pread(self._file.fileno(), 100, 0).decode("ascii", "replace")
        return "".join(c for c in text.strip() if c.isprintable())[:100] or "unknown run"

    def __enter__(self):
        path = self._path()
        try:
            self._file = os.fdopen(os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600), "r+")
        except OSError as exc:
            raise UserError(f"lock {path}: {exc.strerror}") from None
        deadline = time.monotonic() + self.wait
        said = False
        while True:
            try:
                fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = self._holder()
            if self.concurrent:
                self._file.close()
                self._file = None
                self.busy = True
                return self
            if time.monotonic() >= deadline:
                self._file.close()
                self._file = None
                raise UserError(f"{self.mount.mount_point} is being measured by another iobench ({holder}); "
                                f"wait for it (--wait SECONDS), or pass --concurrent to run anyway (records say "
                                f"concurrent)")
            if not said and self.say:
                self.say(f"iobench: waiting up to {self.wait} s for {self.mount.mount_point}: another iobench "
                         f"({holder}) is measuring it")
                said = True
            time.sleep(0.2)
        self._file.seek(0)
        self._file.truncate()
        self._file.write(f"pid {os.getpid()}, run {self.run_id}\n")
        self._file.flush()
        return self

    def __exit__(self, *exc):
        if self._file:
            self._file.close()  # closing releases the flock
