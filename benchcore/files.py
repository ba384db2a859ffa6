"""One way to write a file, for every output of both tools: records (--out), plots, reports, verdicts, JUnit,
calibrated topologies, kept fio JSON, locks and fixture state.

The tools run as root on fleet nodes, often beside directories other users can write. So a symlink or a hard
link planted there must never turn a write against the system:

- a new file is created with O_CREAT|O_EXCL|O_NOFOLLOW: nothing that exists is replaced, not even a dangling
  symlink, and the file is ours from its first byte (a failed write removes it);
- an append (--out, locks) opens with O_NOFOLLOW, then checks what it opened (fstat): a regular file, owned by
  the caller or root, with no second hard link;
- a file the tool keeps (fixture state), or one a reader may read at any moment (--metrics), is replaced whole by
  renaming a new file of a unique name over it; an output replaced so must be a regular file of the caller's;
- an output directory is made by the run, or is owned by the caller and writable by nobody else; a private
  directory (locks, fixture state) is the caller's alone (0700).
Each refusal is one line naming the path and what it is not. Standard library only (the emulation scripts keep
their state with it under the system python3).
"""
import errno
import os
import stat
import tempfile

from benchcore.errors import UserError, name

NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH


def write_new(path, write, what, binary=False, mode=0o644):
    """write(f) into a new file at path (f text, or bytes with binary); refused (UserError) when anything is
    there; another OSError (a full disk) is the caller's to word, the partial file removed."""
    try:
        fd = os.open(path, NEW, mode)
    except FileExistsError:
        raise UserError(f"{what} {name(path)} exists; refusing to replace a file this run did not create") from None
    try:
        with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            write(f)
    except BaseException:
        os.unlink(path)   # ours: made above with O_EXCL
        raise
    return str(path)


def open_new(path, what):
    """A new text file at path, open for writing and reading back (a child's log), made as write_new makes one."""
    try:
        return os.fdopen(os.open(path, NEW & ~os.O_WRONLY | os.O_RDWR, 0o644), "w+", encoding="utf-8")
    except FileExistsError:
        raise UserError(f"{what} {name(path)} exists; refusing to replace a file this run did not create") from None


def write_new_text(path, text, what):
    return write_new(path, lambda f: f.write(text), what)


def replace_text(path, text, mode=0o644):
    """path's whole content replaced by text, for a file the tool itself keeps (fixture state, a namespace's hosts):
    a new file of a unique name beside it (mkstemp: O_EXCL), renamed over path, which replaces a link there rather
    than following it; readers see the old content or the new, never half."""
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(path)), prefix=f".{os.path.basename(path)}.")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def check_replace(path, what):
    """Refuse, before anything runs, a path replace_output would refuse: its directory not the caller's to write in
    (trusted_dir), or something there that is not a regular file of the caller's (a link, a directory, a FIFO,
    another user's file, a file with a second hard link)."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        trusted_dir(directory, f"{what}'s directory")
        st = os.lstat(path)
    except FileNotFoundError:
        if not os.path.isdir(directory):
            raise UserError(f"{what} {name(path)}: no such directory") from None
        return
    if stat.S_ISLNK(st.st_mode):
        raise UserError(f"{what} {name(path)} is a symbolic link; refusing to follow or replace it")
    problem = _append_problem(st)
    if problem:
        raise UserError(f"{what} {name(path)} {problem}; refusing to replace it")


def replace_output(path, text, what):
    """path's content replaced whole by text, for a reader that may look at any moment (node_exporter's textfile
    collector): checked as check_replace, then a private new file beside it (mkstemp, 0600 until written), renamed
    over path: the rename replaces a name, never follows one."""
    check_replace(path, what)
    try:
        replace_text(path, text)
    except OSError as exc:
        raise UserError(f"{what} {name(path)}: {exc.strerror}") from None
    return str(path)


def _owner_problem(st, allow_root=True):
    """Why a file or directory with this stat is not the caller's to write in (None: it is)."""
    owners = {os.geteuid(), 0} if allow_root else {os.geteuid()}
    return None if st.st_uid in owners else f"is owned by another user (uid {st.st_uid})"


def _append_problem(st):
    """Why a file with this stat is not one to append to (None: it is)."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    return _owner_problem(st) or ("has another hard link (it may be someone else's file)" if st.st_nlink > 1
                                  else None)


def check_append(path, what):
    """Refuse, before anything runs, a path open_append would refuse (a missing file is fine)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise UserError(f"{what} {name(path)} is a symbolic link; refusing to follow it (name the file itself)")
    problem = _append_problem(st)
    if problem:
        raise UserError(f"{what} {name(path)} {problem}; refusing to append to it")


def open_append(path, what, buffering=-1):
    """A text file object appending to path (created 0644 when missing), after checking what was opened; its
    descriptor also reads (os.pread: the last byte of what is there)."""
    try:
        fd = os.open(path, APPEND, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP or os.path.islink(path):   # ELOOP, or EACCES where the link is another's
            raise UserError(f"{what} {name(path)} is a symbolic link; refusing to follow it") from None
        if exc.errno == errno.ENXIO:
            raise UserError(f"{what} {name(path)} is not a regular file") from None
        raise UserError(f"{what} {name(path)}: {exc.strerror}") from None
    problem = _append_problem(os.fstat(fd))
    if problem:
        os.close(fd)
        raise UserError(f"{what} {name(path)} {problem}; refusing to append to it")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a+", encoding="utf-8", buffering=buffering)


def trusted_dir(path, what, private=False):
    """Refuse an existing path that is not a directory the caller may write in alone: a symbolic link, another
    user's directory, one others may write in (private: one others may enter)."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise UserError(f"{what} {name(path)} is a symbolic link; refusing to follow it")
    if not stat.S_ISDIR(st.st_mode):
        raise UserError(f"{what} {name(path)} is not a directory")
    problem = _owner_problem(st, allow_root=not private)
    if problem is None and st.st_mode & (0o077 if private else OTHERS_WRITE):
        problem = "is open to other users" if private else "is writable by other users"
    if problem:
        raise UserError(f"{what} {name(path)} {problem}; refusing to write in it")


def output_dir(path, what):
    """path as a directory to write new files in: made now (with its parents), or one the caller owns that
    nobody else can write. Returns True when this call made it."""
    parent = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(parent, exist_ok=True)
        os.mkdir(path, 0o755)
        return True
    except FileExistsError:
        trusted_dir(path, what)
        return False
    except OSError as exc:
        raise UserError(f"{what} {name(path)}: {exc.strerror}") from None


def private_dir(path, what):
    """path as the caller's private directory (0700; locks, fixture state): made now, or refused unless it is
    the caller's and closed to everyone else. Its parent must exist."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        trusted_dir(path, what, private=True)
    except OSError as exc:
        raise UserError(f"{what} {name(path)}: {exc.strerror}") from None
    return str(path)
