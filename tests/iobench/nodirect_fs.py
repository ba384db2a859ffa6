"""A real FUSE file system without direct-I/O support, for the O_DIRECT fallback test.

Usage: python nodirect_fs.py BACKING_DIR MOUNTPOINT   (runs in the foreground until unmounted)

A passthrough of BACKING_DIR (mfusepy over libfuse3) whose open() and create() answer EINVAL to
O_DIRECT, as file systems without direct I/O do (tmpfs did before Linux 6.6; some FUSE file
systems still do). The kernel hands the open flags, O_DIRECT included, to the daemon, so
open(O_DIRECT) on the mount really fails with EINVAL; buffered I/O works through the page cache.
"""
import errno
import os
import sys

from mfusepy import FUSE, FuseOSError, Operations


class NoDirectIO(Operations):
    use_ns = True

    def __init__(self, root):
        self.root = root

    def _path(self, path):
        return os.path.join(self.root, path.lstrip("/"))

    @staticmethod
    def _refuse_direct(flags):
        if flags & os.O_DIRECT:
            raise FuseOSError(errno.EINVAL)

    def getattr(self, path, fh=None):
        st = os.lstat(self._path(path))
        attrs = {k: getattr(st, k) for k in ("st_mode", "st_nlink", "st_uid", "st_gid", "st_size", "st_blocks")}
        attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)  # use_ns
        return attrs

    def readdir(self, path, fh):
        return [".", "..", *os.listdir(self._path(path))]

    def statfs(self, path):
        vfs = os.statvfs(self._path(path))
        return {k: getattr(vfs, k) for k in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                               "f_files", "f_ffree", "f_favail", "f_namemax")}

    def mkdir(self, path, mode):
        return os.mkdir(self._path(path), mode)

    def rmdir(self, path):
        return os.rmdir(self._path(path))

    def unlink(self, path):
        return os.unlink(self._path(path))

    def rename(self, old, new):
        return os.rename(self._path(old), self._path(new))

    def chmod(self, path, mode):
        return os.chmod(self._path(path), mode)

    def chown(self, path, uid, gid):
        return os.chown(self._path(path), uid, gid)

    def utimens(self, path, times=None):
        return os.utime(self._path(path), ns=times) if times else os.utime(self._path(path))

    def open(self, path, flags):
        self._refuse_direct(flags)
        return os.open(self._path(path), flags)

    def create(self, path, mode, flags):
        self._refuse_direct(flags)
        return os.open(self._path(path), flags | os.O_CREAT, mode)

    def read(self, path, size, offset, fh):
        return os.pread(fh, size, offset)

    def write(self, path, data, offset, fh):
        return os.pwrite(fh, data, offset)

    def truncate(self, path, length, fh=None):
        if fh is not None:
            return os.ftruncate(fh, length)
        return os.truncate(self._path(path), length)

    def fallocate(self, path, mode, offset, size, fh):
        if mode:
            raise FuseOSError(errno.EOPNOTSUPP)
        return os.posix_fallocate(fh, offset, size)

    def flush(self, path, fh):
        return 0

    def fsync(self, path, datasync, fh):
        return os.fdatasync(fh) if datasync else os.fsync(fh)

    def release(self, path, fh):
        return os.close(fh)


if __name__ == "__main__":
    FUSE(NoDirectIO(sys.argv[1]), sys.argv[2], foreground=True, fsname="nodirectfs")
