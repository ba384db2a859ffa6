"""benchcore.processes.procs with real processes: group stop, SIGKILL after grace, run() timeouts, /proc readers."""
import os
import signal
import subprocess
import time

from benchcore.processes.procs import group_alive, parse_mountinfo, proc_stat, run, spawn, stop


def gone(pid):
    """No such process, or only its zombie left."""
    st = proc_stat(pid)
    return st is None or st.state == "Z"


def test_stop_ends_the_child_and_its_grandchild():
    proc = spawn(["sh", "-c", "sleep 300 & echo $!; wait"], stdout=subprocess.PIPE, text=True)
    grandchild = int(proc.stdout.readline())
    assert proc_stat(grandchild).pgid == proc.pid
    stop(proc, grace=5)
    assert proc.returncode == -signal.SIGTERM
    assert not group_alive(proc.pid) and gone(grandchild)
    proc.stdout.close()


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace():
    proc = spawn(["sh", "-c", "trap '' TERM; echo ready; exec sleep 300"], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline() == "ready\n"
    start = time.monotonic()
    stop(proc, grace=1)
    assert proc.returncode == -signal.SIGKILL and 1 <= time.monotonic() - start < 60   # the grace, then no hang
    assert not group_alive(proc.pid)
    proc.stdout.close()


def test_run_timeout_stops_the_whole_group():
    done = run(["sh", "-c", "echo $$; sleep 300 & sleep 300"], 1, grace=5)
    assert done.timed_out and done.returncode == -signal.SIGTERM
    assert not group_alive(int(done.stdout.split()[0]))


def test_run_returns_when_the_child_exits_leaving_a_grandchild_on_its_stdout():
    start = time.monotonic()
    done = run(["sh", "-c", "echo $$; echo started >&2; sleep 300 &"], 60, grace=5)
    assert time.monotonic() - start < 60   # not the grandchild's 300 s (a hang), whatever the load
    assert (done.returncode, done.timed_out, done.stderr) == (0, False, "started\n")
    assert not group_alive(int(done.stdout.split()[0]))


def test_parse_mountinfo_unescapes_spaces():
    text = "36 35 98:0 / /mnt/my\\040disk rw,noatime master:1 - ext3 /dev/my\\040dev ro\nnot a mountinfo line\n"
    (m,) = parse_mountinfo(text)
    assert (m.mount_point, m.fs_type, m.source, m.dev, m.read_only) == ("/mnt/my disk", "ext3", "/dev/my dev",
                                                                         "98:0", False)


def test_proc_stat_of_self_and_of_a_stopped_child():
    me = proc_stat(os.getpid())
    assert (me.state, me.ppid, me.pgid) == ("R", os.getppid(), os.getpgrp())
    proc = spawn(["sleep", "300"])
    try:
        os.kill(proc.pid, signal.SIGSTOP)
        deadline = time.monotonic() + 10
        while proc_stat(proc.pid).state != "T" and time.monotonic() < deadline:
            time.sleep(0.01)
        assert proc_stat(proc.pid).state == "T" and proc_stat(proc.pid).pgid == proc.pid
    finally:
        stop(proc, grace=1)
    assert proc_stat(proc.pid) is None


def test_run_returns_when_a_process_outside_the_group_holds_the_pipes(tmp_path):
    """The child exits; a grandchild in a session of its own keeps stdout open: run() still returns."""
    pidfile = tmp_path / "pid"
    done = run(["sh", "-c", f"setsid sleep 30 & echo $! > {pidfile}"], 60, grace=1)
    os.kill(int(pidfile.read_text()), signal.SIGKILL)  # the stray one: outside the group, ours to end
    assert done.returncode == 0 and not done.timed_out and "output lost" in done.stderr   # not after its 30 s
