"""Where iobench may write, and the private directory it writes in.

iobench writes only inside a fresh `iobench-<run_id>` directory that it creates under PATH and
removes at the end (also on Ctrl-C, SIGTERM and fio failure) unless --keep. Nothing else under
PATH is opened for writing, followed through a symlink, or removed.
"""
import contextlib
import errno
import mmap
import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path

from benchcore.errors import UserError

MARGIN_MIN = 64 << 20     # free space kept beyond what a run needs
MARGIN_FRACTION = 0.05
PROBE_BYTES = 4096
PREFIX = "iobench-"
KILL_GRACE_S = 10


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
    vfs = os.statvfs(path)
    if vfs.f_flag & os.ST_RDONLY or mount.read_only:
        raise UserError(f"{path} is on a read-only mount ({mount.mount_point}, {mount.fs_type})")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UserError(f"{path} is not writable")
    free = vfs.f_bavail * vfs.f_frsize
    if free < need + margin(need):
        raise UserError(f"{path} has {format_size_h(free)} free; this run needs {format_size_h(need)} "
                        f"plus a {format_size_h(margin(need))} margin (use a smaller --size)")


def format_size_h(n):
    """Approximate binary size for messages: 1.5G, 300M, 12K."""
    for suffix, unit in (("T", 1 << 40), ("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= unit:
            return f"{n / unit:.1f}".rstrip("0").rstrip(".") + suffix
    return str(n)


class ScratchDir:
    """iobench-<run_id> under a checked PATH: created fresh (never reused), removed on exit unless keep."""

    def __init__(self, parent, run_id, keep=False):
        self.path = Path(parent) / f"{PREFIX}{run_id}"
        self.keep = keep
        self._ident = None

    def __enter__(self):
        try:
            os.mkdir(self.path, 0o700)  # fails if anything of that name exists; a symlink is not followed
        except OSError as exc:
            raise UserError(f"cannot create {self.path}: {exc.strerror}") from None
        st = os.lstat(self.path)
        self._ident = (st.st_dev, st.st_ino)
        return self

    def __exit__(self, *exc):
        if not self.keep:
            self.remove()

    def remove(self):
        """Remove the directory, only if it is still the one created (same inode, not a symlink)."""
        with signals_blocked():
            self._remove()

    def _remove(self):
        try:
            st = os.lstat(self.path)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode) or (st.st_dev, st.st_ino) != self._ident:
            return
        # rmtree works through directory file descriptors on Linux and unlinks symlinks
        # without following them (shutil.rmtree.avoids_symlink_attacks).
        shutil.rmtree(self.path)


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


class Terminated(KeyboardInterrupt):
    """SIGTERM, handled like Ctrl-C so every cleanup runs."""


@contextlib.contextmanager
def signals_blocked():
    """Hold Ctrl-C and SIGTERM until the block ends, so cleanup is never cut short."""
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


@contextlib.contextmanager
def sigterm_as_interrupt():
    """While active, SIGTERM raises Terminated in the main thread (then cleanup runs, exit 130)."""
    def handler(signum, frame):
        raise Terminated()
    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def one_line(text, limit=600):
    """A child's stderr squeezed onto one line for an error message."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    joined = " | ".join(lines) or "(nothing on stderr)"
    return joined if len(joined) <= limit else joined[:limit] + " ..."


def group_alive(pgid):
    """Whether any process (zombies aside) is left in process group pgid."""
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def _wait_group(proc, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None and not group_alive(proc.pid):
            return True
        time.sleep(0.05)
    return False


def _signal_group(pgid, sig):
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, sig)


def stop_process(proc):
    """Stop a child and every process it started (its own process group), then reap it.

    fio forks one process per job: all of them must be gone before their directory is removed.
    """
    with signals_blocked():
        _signal_group(proc.pid, signal.SIGTERM)
        if not _wait_group(proc, KILL_GRACE_S):
            _signal_group(proc.pid, signal.SIGKILL)
            _wait_group(proc, KILL_GRACE_S)
        proc.wait()


def run_child(cmd, timeout, what, cwd=None, env=None):
    """(returncode, stdout, stderr) of an argument-list command; UserError on timeout.

    The child runs in a process group of its own. When it exits and leaves processes behind
    (torchrun's workers when torchrun was killed), and on Ctrl-C, SIGTERM or timeout, that whole
    group is stopped first, so the caller's directory is never removed under a running writer.
    """
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            errors="replace", cwd=cwd, env=env, start_new_session=True)
    try:
        stdout, stderr, finished = _collect(proc, time.monotonic() + timeout)
    except BaseException:
        stop_process(proc)
        raise
    if group_alive(proc.pid):
        stop_process(proc)
    if not finished:
        raise UserError(f"{what} did not finish within {timeout} s and was stopped; stderr: {one_line(stderr)}")
    return proc.returncode, stdout, stderr


def _collect(proc, deadline):
    """Read the child's output until it exits or the deadline passes: (stdout, stderr, finished)."""
    while True:
        try:
            stdout, stderr = proc.communicate(timeout=max(0.01, min(1.0, deadline - time.monotonic())))
            return stdout, stderr, True
        except subprocess.TimeoutExpired:
            exited = proc.poll() is not None  # then what it left behind holds the pipes open
            if exited or time.monotonic() >= deadline:
                stop_process(proc)
                stdout, stderr = proc.communicate()
                return stdout, stderr, exited
