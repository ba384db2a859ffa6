"""Process supervision and /proc readers, written once for both tools, the scripts and the tests.

Standard library only: scripts/ import it without the virtualenv.

- spawn: a child in its own session (so it and everything it starts stop as one group) that
  gets SIGTERM when the process that spawned it dies (PR_SET_PDEATHSIG);
- stop: SIGTERM to the group, then SIGKILL after a grace, until no process of the group is left;
- run: an argument list with a timeout, the whole group stopped on timeout or Ctrl-C;
- proc_stat / group_alive / read_mounts: what /proc says.
"""
import contextlib
import ctypes
import os
import signal
import subprocess
import time
from dataclasses import dataclass

PR_SET_PDEATHSIG = 1
PR_SET_NAME = 15
STOP_GRACE_S = 10


@contextlib.contextmanager
def signals_blocked():
    """Hold Ctrl-C and SIGTERM until the block ends, so clean-up is never cut short."""
    held = {signal.SIGINT, signal.SIGTERM}
    old = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, old)


def _own_group_dying_with_parent():
    os.setsid()
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def spawn(argv, *, env=None, cwd=None, stdin=subprocess.DEVNULL, stdout=None, stderr=None, text=False,
          die_with_parent=True):
    """Popen of argv in a session of its own; SIGTERM reaches it when its parent dies."""
    return subprocess.Popen([str(a) for a in argv], env=env, cwd=cwd, stdin=stdin, stdout=stdout, stderr=stderr,
                            text=text, errors="replace" if text else None,
                            preexec_fn=_own_group_dying_with_parent if die_with_parent else os.setsid)


@dataclass
class ProcStat:
    state: str   # R, S, D, T (stopped), Z (zombie), ...
    ppid: int
    pgid: int


def proc_stat(pid):
    """ProcStat of pid from /proc/<pid>/stat, or None when there is no such process."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return ProcStat(fields[0], int(fields[1]), int(fields[2]))


def proc_cmdline(pid):
    """argv of pid as strings, or None."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return None


def set_name(name):
    """This process's name in /proc/<pid>/comm and ps (15 bytes at most): a forked process keeps its parent's argv."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_NAME, name.encode()[:15])


def proc_name(pid):
    """pid's name (/proc/<pid>/comm), or None."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().rstrip("\n")
    except OSError:
        return None


def pids():
    return [int(e) for e in os.listdir("/proc") if e.isdigit()]


def group_alive(pgid):
    """Whether a process of group pgid is left (zombies aside)."""
    for pid in pids():
        st = proc_stat(pid)
        if st and st.pgid == pgid and st.state != "Z":
            return True
    return False


def kill(pid, sig=signal.SIGKILL):
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, sig)


def signal_group(pgid, sig):
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _wait_group(proc, seconds):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None and not group_alive(proc.pid):
            return True
        time.sleep(0.05)
    return False


def stop(proc, grace=STOP_GRACE_S):
    """End a spawned child and every process of its group: SIGTERM, then SIGKILL after grace; reap it."""
    with signals_blocked():
        if proc.poll() is None or group_alive(proc.pid):
            signal_group(proc.pid, signal.SIGTERM)
            if not _wait_group(proc, grace):
                signal_group(proc.pid, signal.SIGKILL)
                _wait_group(proc, grace)
        proc.wait()


@dataclass
class Completed:
    returncode: int
    stdout: str
    stderr: str
    timed_out: bool


def run(argv, timeout, *, cwd=None, env=None, grace=STOP_GRACE_S):
    """Run argv (text output captured) for at most timeout s; the whole group is stopped on timeout,
    on Ctrl-C/SIGTERM, and when the child exits leaving processes behind that hold its pipes."""
    proc = spawn(argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + timeout
    try:
        while True:
            try:
                out, err = proc.communicate(timeout=max(0.01, min(1.0, deadline - time.monotonic())))
                timed_out = False
                break
            except subprocess.TimeoutExpired:
                exited = proc.poll() is not None
                if exited or time.monotonic() >= deadline:
                    stop(proc, grace)
                    out, err = _drain(proc)
                    timed_out = not exited
                    break
    except BaseException:
        stop(proc, grace)
        raise
    if group_alive(proc.pid):
        stop(proc, grace)
    return Completed(proc.returncode, out or "", err or "", timed_out)


def _drain(proc, seconds=5):
    """What a stopped child left in its pipes; a process outside its group may still hold them open."""
    try:
        return proc.communicate(timeout=seconds)
    except subprocess.TimeoutExpired:
        for pipe in (proc.stdout, proc.stderr):
            pipe.close()
        return "", "(output pipes held open by a process outside the child's group; output lost)"


def meminfo(key):
    """Bytes of /proc/meminfo's field key ('MemAvailable', 'MemTotal'); 0 when it is not there."""
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def mem_available():
    """Bytes of memory the kernel says can be had without swapping (MemAvailable)."""
    return meminfo("MemAvailable")


def one_line(text, limit=600):
    """A child's output squeezed onto one line for an error message."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    joined = " | ".join(lines) or "(no output)"
    return joined if len(joined) <= limit else joined[:limit] + " ..."


@dataclass
class MountEntry:
    """One line of /proc/self/mountinfo."""
    mount_point: str
    fs_type: str
    source: str
    dev: str        # "major:minor"
    options: str

    @property
    def read_only(self):
        return "ro" in self.options.split(",")


def _unescape(field):
    """mountinfo escapes space, tab, newline and backslash as octal (\\040)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text):
    """MountEntry per mountinfo line, in kernel order (the last one stacked on a point is on top)."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or len(tail) < 2:
            continue
        mounts.append(MountEntry(_unescape(fields[4]), tail[0], _unescape(tail[1]), fields[2], fields[5]))
    return mounts


def read_mounts(path="/proc/self/mountinfo"):
    with open(path) as f:
        return parse_mountinfo(f.read())


def mount_at(path):
    """The MountEntry on top at mount point path, or None."""
    found = None
    for m in read_mounts():
        if m.mount_point == str(path):
            found = m
    return found
