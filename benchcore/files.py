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
  directory (locks, fixture state) is the caller's alone (0700);
- the directories above every one of these are walked one at a time from / (or the working directory), each opened
  with O_NOFOLLOW relative to the one before, and the file is opened in the last one: a symbolic link on the way is
  followed only where nobody else could have made or swapped it (a link of the caller's or root's, in a directory of
  the caller's or root's that others cannot write, or that is sticky); another is refused. So a link another user
  plants above an output (D/nightly -> /root-owned/dir in a world-writable D) never redirects a write, and a
  directory renamed meanwhile is still the one walked.
Each refusal is one line naming the path and what it is not. Standard library only (the emulation scripts keep
their state with it under the system python3).
"""
import contextlib
import errno
import os
import secrets
import shutil
import stat

from benchcore.errors import UserError, name

NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
APPEND = os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH
WALK = os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
MAX_LINKS = 40     # as the kernel's path walk (ELOOP beyond)
HOLD = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _on_proc(fd):
    """Whether the directory fd is on /proc: its links (/proc/PID/fd/N) are the kernel's, leading to an open file
    itself, never to the path their text shows."""
    return os.fstat(fd).st_dev == os.stat("/proc").st_dev


def _link_problem(dir_fd, link):
    """Why the symbolic link `link` in the directory dir_fd may not be followed (None: it may): it must be the
    caller's or root's, in a directory of the caller's or root's that nobody else can write or that is sticky (there
    nobody else can rename or replace another's link)."""
    st = os.stat(link, dir_fd=dir_fd, follow_symlinks=False)
    problem = _owner_problem(st)
    if problem:
        return problem.replace("is owned", "is a symbolic link owned", 1)
    parent = os.fstat(dir_fd)
    if _owner_problem(parent) or (parent.st_mode & OTHERS_WRITE and not parent.st_mode & stat.S_ISVTX):
        return "is a symbolic link in a directory another user can write"
    return None


def _walk(path, what, shown, create=False):
    """A descriptor (O_PATH) of directory `path`, walked one component at a time, each opened with O_NOFOLLOW
    relative to the one before (missing ones made 0755 when create; FileNotFoundError otherwise); a link is
    followed only where _link_problem finds none. UserError names `shown` (the path the user gave)."""
    fd = os.open("/" if os.path.isabs(path) else ".", WALK)
    todo = [c for c in reversed(os.fspath(path).split("/")) if c not in ("", ".")]
    links = 0
    try:
        while todo:
            part = todo.pop()
            try:
                step = os.open(part, WALK, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):   # made meanwhile: opened and judged as any
                    os.mkdir(part, 0o755, dir_fd=fd)
                todo.append(part)
                continue
            except OSError as exc:
                if exc.errno not in (errno.ENOTDIR, errno.ELOOP):
                    raise UserError(f"{what} {name(shown)}: {name(part)}: {exc.strerror}") from None
                if not stat.S_ISLNK(os.stat(part, dir_fd=fd, follow_symlinks=False).st_mode):
                    raise UserError(f"{what} {name(shown)}: {name(part)} is not a directory") from None
                if _on_proc(fd):     # a held directory (held_path): the kernel follows it to that very directory
                    step = os.open(part, WALK & ~os.O_NOFOLLOW, dir_fd=fd)
                    os.close(fd)
                    fd = step
                    continue
                problem = _link_problem(fd, part)
                links += 1
                if problem or links > MAX_LINKS:
                    raise UserError(f"{what} {name(shown)}: {name(part)} "
                                    f"{problem or 'leads through too many symbolic links'}; refusing to follow it"
                                    ) from None
                target = os.readlink(part, dir_fd=fd)
                if target.startswith("/"):
                    os.close(fd)
                    fd = os.open("/", WALK)
                todo += [c for c in reversed(target.split("/")) if c not in ("", ".")]
                continue
            os.close(fd)
            fd = step
        return fd
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def _parent(path, what, create=False):
    """(a descriptor of path's directory, walked as _walk does, path's last component); FileNotFoundError when a
    directory above it is missing (create: made)."""
    head, base = os.path.split(os.fspath(path))
    if base in ("", ".", ".."):
        raise UserError(f"{what} {name(path)} names a directory, not a file")
    fd = _walk(head or ".", what, path, create)
    try:
        yield fd, base
    finally:
        os.close(fd)


def make_parents(path, what):
    """Make the directories above path (0755) that are missing, walked as _walk does (no planted link followed)."""
    with _parent(path, what, create=True):
        pass


def _no_dir(path, what):
    raise UserError(f"{what} {name(path)}: no such directory") from None


def write_new(path, write, what, binary=False, mode=0o644):
    """write(f) into a new file at path (f text, or bytes with binary); refused (UserError) when anything is
    there; another OSError (a full disk) is the caller's to word, the partial file removed."""
    try:
        with _parent(path, what) as (d, base):
            try:
                fd = os.open(base, NEW, mode, dir_fd=d)
            except FileExistsError:
                raise UserError(f"{what} {name(path)} exists; refusing to replace a file this run did not create"
                                ) from None
            try:
                with os.fdopen(fd, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
                    write(f)
            except BaseException:
                os.unlink(base, dir_fd=d)   # ours: made above with O_EXCL, in the directory held
                raise
    except FileNotFoundError:
        _no_dir(path, what)
    return str(path)


def open_new(path, what):
    """A new text file at path, open for writing and reading back (a child's log), made as write_new makes one."""
    try:
        with _parent(path, what) as (d, base):
            return os.fdopen(os.open(base, NEW & ~os.O_WRONLY | os.O_RDWR, 0o644, dir_fd=d), "w+", encoding="utf-8")
    except FileExistsError:
        raise UserError(f"{what} {name(path)} exists; refusing to replace a file this run did not create") from None
    except FileNotFoundError:
        _no_dir(path, what)


def write_new_text(path, text, what):
    return write_new(path, lambda f: f.write(text), what)


def replace_text(path, text, mode=0o644):
    """path's whole content replaced by text, for a file the tool itself keeps (fixture state, a namespace's hosts):
    a new file of a unique name beside it (mkstemp: O_EXCL), renamed over path, which replaces a link there rather
    than following it; readers see the old content or the new, never half. The directory is walked as _walk does."""
    with _parent(path, "file") as (d, base):
        tmp = f".{base}.{secrets.token_hex(6)}"
        fd = os.open(tmp, NEW, 0o600, dir_fd=d)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                f.write(text)
                os.fchmod(f.fileno(), mode)
            os.replace(tmp, base, src_dir_fd=d, dst_dir_fd=d)
        except BaseException:
            os.unlink(tmp, dir_fd=d)
            raise


def check_replace(path, what):
    """Refuse, before anything runs, a path replace_output would refuse: its directory not the caller's to write in
    (trusted_dir), or something there that is not a regular file of the caller's (a link, a directory, a FIFO,
    another user's file, a file with a second hard link)."""
    directory = os.path.dirname(os.path.abspath(path))
    try:
        trusted_dir(directory, f"{what}'s directory")
        with _parent(path, what) as (d, base):
            st = os.stat(base, dir_fd=d, follow_symlinks=False)
    except FileNotFoundError:
        if not os.path.isdir(directory):
            _no_dir(path, what)
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
    """Refuse, before anything runs, a path open_append would refuse (a missing file or directory is fine)."""
    try:
        with _parent(path, what) as (d, base):
            st = os.stat(base, dir_fd=d, follow_symlinks=False)
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
        with _parent(path, what) as (d, base):
            try:
                fd = os.open(base, APPEND, 0o644, dir_fd=d)
            except OSError as exc:
                if exc.errno == errno.ELOOP or _is_link(base, d):   # ELOOP, or EACCES where the link is another's
                    raise UserError(f"{what} {name(path)} is a symbolic link; refusing to follow it") from None
                if exc.errno == errno.ENXIO:
                    raise UserError(f"{what} {name(path)} is not a regular file") from None
                raise UserError(f"{what} {name(path)}: {exc.strerror}") from None
    except FileNotFoundError:
        _no_dir(path, what)
    problem = _append_problem(os.fstat(fd))
    if problem:
        os.close(fd)
        raise UserError(f"{what} {name(path)} {problem}; refusing to append to it")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "a+", encoding="utf-8", buffering=buffering)


def _is_link(base, dir_fd):
    try:
        return stat.S_ISLNK(os.stat(base, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def trusted_dir(path, what, private=False):
    """Refuse an existing path that is not a directory the caller may write in alone: a symbolic link, another
    user's directory, one others may write in (private: one others may enter); the directories above it walked as
    _walk does. FileNotFoundError when it is missing."""
    with _parent(os.path.abspath(path), what) as (d, base):
        st = os.stat(base, dir_fd=d, follow_symlinks=False)
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
    try:
        with _parent(os.path.abspath(path), what, create=True) as (d, base):
            os.mkdir(base, 0o755, dir_fd=d)
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
        with _parent(os.path.abspath(path), what) as (d, base):
            os.mkdir(base, 0o700, dir_fd=d)
    except FileExistsError:
        trusted_dir(path, what, private=True)
    except OSError as exc:
        raise UserError(f"{what} {name(path)}: {exc.strerror}") from None
    return str(path)


def held_path(fd):
    """The path of a directory this process holds open (fd): /proc/PID/fd/N, which every process of the caller's
    reaches as that very directory, wherever it is renamed to; nothing put in its old place is ever reached."""
    return f"/proc/{os.getpid()}/fd/{fd}"


def _private_problem(st):
    return _owner_problem(st, allow_root=False) or ("is open to other users" if st.st_mode & 0o077 else None)


def make_held(path, what):
    """A new private directory (0700) at path, held: (a descriptor of its parent, a descriptor of it), the parent
    walked as _walk does; refused when anything is there. Its parent may be another user's, who may rename it and
    put something else in its place: reach it by held_path(), never by path."""
    head, base = os.path.split(os.fspath(path))
    try:
        parent = _walk(head or ".", what, path)
    except FileNotFoundError:
        _no_dir(path, what)
    try:
        os.mkdir(base, 0o700, dir_fd=parent)
        fd = os.open(base, HOLD, dir_fd=parent)
    except OSError as exc:
        os.close(parent)
        raise UserError(f"cannot create {what} {name(path)}: {exc.strerror}") from None
    st = os.fstat(fd)     # another directory put there between the mkdir and the open is not private and ours
    problem = _private_problem(st)
    if problem and st.st_uid != os.geteuid() and not st.st_mode & 0o077 and _made_as(fd) == st.st_uid:
        problem = None    # a file system that makes our files another user's (NFS root_squash): so it made this one
    if problem:
        os.close(fd)
        os.close(parent)
        raise UserError(f"{what} {name(path)} {problem}: it is not the directory this run made")
    return parent, fd


def _made_as(fd):
    """The owner the file system gives a file the caller makes in the directory fd (a probe, removed)."""
    probe = f".owner-probe-{secrets.token_hex(4)}"
    try:
        os.close(os.open(probe, NEW, 0o600, dir_fd=fd))
    except OSError:
        return None
    try:
        return os.stat(probe, dir_fd=fd, follow_symlinks=False).st_uid
    finally:
        os.unlink(probe, dir_fd=fd)


def hold_private(path, what, inode=None):
    """A descriptor of the existing directory path, walked as _walk does, its last component never a link: the
    caller's, private (0700) and, when given, that inode (the directory another node made); else refused."""
    try:
        with _parent(path, what) as (d, base):
            fd = os.open(base, HOLD, dir_fd=d)
    except FileNotFoundError:
        raise UserError(f"{what} {name(path)} does not exist") from None
    except OSError as exc:
        why = "is a symbolic link or no directory" if exc.errno in (errno.ELOOP, errno.ENOTDIR) else exc.strerror
        raise UserError(f"{what} {name(path)}: {why}; refusing to work in it") from None
    st = os.fstat(fd)     # the inode another node made and holds names it alone, whoever the file system says owns it
    problem = (("is open to other users" if st.st_mode & 0o077 else None) if inode is not None else
               _private_problem(st)) or (inode is not None and st.st_ino != inode and "is another directory")
    if problem:
        os.close(fd)
        raise UserError(f"{what} {name(path)} {problem}; refusing to work in it")
    return fd


def remove_held(parent, base, fd):
    """Remove a held directory (make_held): its content through its descriptor, then the directory itself from
    parent when base there is still it (one renamed away stays, empty). Closes both descriptors."""
    try:
        for entry in os.listdir(fd):
            if stat.S_ISDIR(os.stat(entry, dir_fd=fd, follow_symlinks=False).st_mode):
                shutil.rmtree(entry, dir_fd=fd)     # through descriptors; links unlinked, never followed
            else:
                os.unlink(entry, dir_fd=fd)
        mine = os.fstat(fd)
        with contextlib.suppress(FileNotFoundError):
            st = os.stat(base, dir_fd=parent, follow_symlinks=False)
            if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                os.rmdir(base, dir_fd=parent)
    finally:
        os.close(fd)
        os.close(parent)
