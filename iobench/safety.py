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
from pathlib import Path

from benchcore.errors import UserError
from benchcore.procs import signals_blocked
from benchcore.units import format_size

MARGIN_MIN = 64 << 20     # free space kept beyond what a run needs
MARGIN_FRACTION = 0.05
PROBE_BYTES = 4096
PREFIX = "iobench-"


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
        raise UserError(f"{path} has {format_size(free, approx=True)} free; this run needs "
                        f"{format_size(need, approx=True)} plus a {format_size(margin(need), approx=True)} margin "
                        f"(use a smaller --size)")


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
def sigterm_as_interrupt():
    """While active, SIGTERM raises Terminated in the main thread (then cleanup runs, exit 130)."""
    def handler(signum, frame):
        raise Terminated()
    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)
