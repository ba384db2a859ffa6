"""Data safety: refusals before fio starts, cleanup on Ctrl-C / SIGTERM / fio failure, --keep."""
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from iobench.profiles import fio_directory
from iobench.safety import MARKER, read_marker
from tests.conftest import BIN, assert_one_line_error, read_records
from tests.iobench.conftest import assert_failed_run, leftovers, plant_sentinels, snapshot

pytestmark = pytest.mark.host_mount   # runs iobench on a host file system (its lock: one at a time)

LONG = ["--profile", "small-random-write", "--runtime", "60", "--size", "8M"]


def test_missing_path(tool, tmp_path):
    assert_one_line_error(tool("iobench", "ckpt", tmp_path / "nope", "--quick"), "does not exist")


def test_file_instead_of_directory(tool, tmp_path):
    (tmp_path / "f").write_text("mine")
    assert_one_line_error(tool("iobench", "ckpt", tmp_path / "f", "--quick"), "is not a directory")
    assert (tmp_path / "f").read_text() == "mine"


@pytest.mark.root
def test_block_device(tool, loop_xfs):
    _, device = loop_xfs
    assert_one_line_error(tool("iobench", "ckpt", device, "--quick"), "is a block device")


@pytest.mark.root
def test_read_only_mount(tool, tmpfs, tmp_path):
    ro = tmpfs("ro", ro=True)
    out = tmp_path / "r.jsonl"
    assert_one_line_error(tool("iobench", "ckpt", ro, "--quick", "--out", out), "read-only mount")
    (rec,) = read_records(out)
    assert rec["event"] == "refused" and "read-only" in rec["reason"] and rec["mount"] == str(ro)


@pytest.mark.root
def test_too_small_mount(tool, tmpfs):
    small = tmpfs("small", size="16M")
    proc = tool("iobench", "ckpt", small, "--profile", "shard-write", "--size", "64M")
    assert_one_line_error(proc, "free; this run needs 64M plus a 64M margin")
    assert os.listdir(small) == []


@pytest.mark.root
def test_one_bad_path_refuses_the_whole_run_before_fio(tool, tmpfs, tmp_path):
    ro = tmpfs("ro", ro=True)
    proc = tool("iobench", "ckpt", tmp_path, ro, "--quick")
    assert_one_line_error(proc, "read-only mount")
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("out,needle", [("/dev/full", "is not a regular file"), ("DIR", "is a directory")])
def test_out_that_is_not_a_file_is_refused_before_fio(tool, tmp_path, out, needle):
    out = tmp_path if out == "DIR" else out
    assert_one_line_error(tool("iobench", "ckpt", tmp_path, "--quick", "--out", out), needle)
    assert leftovers(tmp_path) == []


def test_fio_missing(tool, tmp_path):
    proc = tool("iobench", "ckpt", tmp_path, "--quick", env={"PATH": "/nonexistent"})
    assert_one_line_error(proc, "fio not found on PATH: install it (Debian/Ubuntu: apt-get install fio")
    assert leftovers(tmp_path) == []


def test_fio_timeout_is_an_error_and_cleans_up(tool, tmp_path):
    data = plant_sentinels(tmp_path)
    before = snapshot(tmp_path)
    out = tmp_path.parent / f"{tmp_path.name}-r.jsonl"
    proc = tool("iobench", "ckpt", data, *LONG, "--timeout", "2", "--out", out)
    assert_failed_run(proc, "did not finish within 2 s")
    assert proc.stderr.strip().splitlines()[-1].startswith("error: small-random-write on")
    assert leftovers(data) == [] and snapshot(tmp_path) == before
    assert read_records(out)[-1]["event"] == "failed"


def start(args, env=None):
    """iobench in its own process group, as a shell starts a foreground job: Ctrl-C reaches it even when
    this test runs in the background (where SIGINT is inherited ignored)."""
    return subprocess.Popen([str(BIN / "iobench"), *map(str, args)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True, env={**os.environ, **(env or {})},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def wait_for_fio(data, timeout=60):
    """Until fio has laid out its file in iobench's directory (fio is writing)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if list(Path(data).glob("iobench-2*/small-random-write.0.0")):
            return
        time.sleep(0.05)
    pytest.fail("fio never started")


def fio_children(pid):
    """fio processes whose parent is pid."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        comm, fields = stat[stat.index("(") + 1:stat.rindex(")")], stat[stat.rindex(")") + 2:].split()
        if comm == "fio" and int(fields[1]) == pid:
            found.append(int(entry))
    return found


def fio_processes_in(directory):
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "fio" in cmdline and str(directory) in cmdline:
            found.append(pid)
    return found


@pytest.mark.slow
@pytest.mark.parametrize("how", ["ctrl-c", "sigterm"])
def test_interrupt_mid_run_removes_everything(tmp_path, how):
    """Ctrl-C reaches iobench and fio (the whole process group); SIGTERM only iobench, which stops fio
    and exits 143 as benchcore documents (before: 130)."""
    data = plant_sentinels(tmp_path)
    before = snapshot(tmp_path)
    proc = start(["ckpt", data, *LONG])
    wait_for_fio(data)
    if how == "ctrl-c":
        os.killpg(proc.pid, signal.SIGINT)
    else:
        proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == {"ctrl-c": 130, "sigterm": 143}[how] and "Traceback" not in stderr, stderr
    assert leftovers(data) == [] and snapshot(tmp_path) == before
    assert fio_processes_in(data) == []


@pytest.mark.slow
def test_killed_fio_is_an_error_and_cleans_up(tmp_path):
    data = plant_sentinels(tmp_path)
    before = snapshot(tmp_path)
    proc = start(["ckpt", data, *LONG])
    wait_for_fio(data)
    (fio,) = fio_children(proc.pid)
    os.kill(fio, signal.SIGKILL)
    _, stderr = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "fio was killed by signal 9" in stderr.strip().splitlines()[-1], stderr
    assert leftovers(data) == [] and snapshot(tmp_path) == before
    assert fio_processes_in(data) == []


@pytest.mark.slow
def test_keep_leaves_the_run_directory(tool, tmp_path):
    proc = tool("iobench", "ckpt", tmp_path, "--profile", "metadata", "--quick", "--size", "1M", "--keep")
    assert proc.returncode == 0, proc.stderr
    (kept,) = leftovers(tmp_path)
    assert f"kept {tmp_path / kept}" in proc.stderr
    assert (tmp_path / kept / "metadata.fio").exists() and len(list((tmp_path / kept).glob("metadata.0.*"))) == 16
    assert read_marker(tmp_path / kept)["run_id"] == kept[len("iobench-"):]


def test_symlinked_path_is_resolved_and_reported(tool, tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "real")
    proc = tool("iobench", "ckpt", tmp_path / "link", "--profile", "metadata", "--quick", "--size", "1M",
                "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert f'"mount": "{tmp_path / "real"}"' in proc.stdout
    assert os.listdir(tmp_path / "real") == [] and (tmp_path / "link").is_symlink()


# Paths that fio's job-file syntax would reinterpret (cut at ';' or '#', ${VAR} expanded, ':' a list
# separator), and other characters a shell or fio treats specially.
HOSTILE_PATHS = ["ckpt;old", "ckpt#old", "ck${HOME}pt", "ckpt:old", "ckpt old", "back\\slash", "c\\:d",
                 "-ckpt", "q'uo\"te", "ckpt%s$jobnum", "[ckpt]", "ckpt*"]


@pytest.mark.slow
@pytest.mark.parametrize("name", HOSTILE_PATHS)
def test_hostile_path_reaches_fio_exactly(tool, tmp_path, name):
    """fio writes its files inside PATH/iobench-<run>, by fio's own word (its JSON's directory and the file
    names its debug output opens, with iobench's own arguments), and nothing else under the parent changes:
    the directory a cut path would name ('ckpt') keeps its files (before: fio overwrote ckpt/shard.*)."""
    parent, out = tmp_path / "p", tmp_path / "out" / "r.jsonl"
    (parent / "ckpt").mkdir(parents=True)
    (parent / "ckpt" / "shard.0").write_bytes(os.urandom(4096))
    target = parent / name
    target.mkdir()
    before = snapshot(parent / "ckpt")
    proc = tool("iobench", "ckpt", target, "--profile", "shard-write", "--size", "2M", "--ranks", "2", "--keep",
                "--keep-json", "--out", out)
    assert proc.returncode == 0, proc.stderr
    (kept,) = target.iterdir()
    assert kept.name.startswith("iobench-") and sorted(os.listdir(parent)) == sorted(["ckpt", name])
    assert sorted(os.listdir(kept)) == [MARKER, "shard-write.fio", "shard.0", "shard.1"]
    assert snapshot(parent / "ckpt") == before
    (kept_json,) = out.parent.glob("r.jsonl.*.fio.json")
    fio_json = json.loads(kept_json.read_text())   # fio worked in it through the descriptor iobench held
    assert re.fullmatch(r"/proc/\d+/fd/\d+/", fio_json["global options"]["directory"]), fio_json["global options"]
    debug = subprocess.run(["fio", "--output-format=json", "--debug=file", fio_directory(kept), "shard-write.fio"],
                           cwd=kept, capture_output=True, text=True, timeout=60)
    opened = set(re.findall(r'file 0x[0-9a-f]+ "(.*)" added at', debug.stdout + debug.stderr))
    assert opened == {f"{kept}/shard.0", f"{kept}/shard.1"}, debug.stdout[-2000:]


@pytest.mark.parametrize("path,fs", [("/dev", "devtmpfs"), ("/proc", "proc"), ("/sys", "sysfs"),
                                     ("/dev/pts", "devpts")])
def test_pseudo_file_systems_are_refused_by_type(tool, path, fs):
    """Before: /dev was accepted as a target, /proc refused with 'has 0 free'."""
    assert_one_line_error(tool("iobench", "ckpt", path, "--quick"), f"is on {fs} ")
    assert_one_line_error(tool("iobench", "ckpt", path, "--quick", "--dry-run"), "a pseudo file system")


def test_same_path_twice_and_control_characters_are_refused(tool, tmp_path):
    (tmp_path / "l").symlink_to(tmp_path)
    assert_one_line_error(tool("iobench", "ckpt", tmp_path, tmp_path / "l", "--quick"), "is given twice")
    bad = tmp_path / "new\nline"
    bad.mkdir()
    assert_one_line_error(tool("iobench", "ckpt", bad, "--quick", "--dry-run"), "contains a control character")
    warned = tool("iobench", "ckpt", tmp_path, "--runtime", "60", "--timeout", "30", "--dry-run")
    assert warned.stderr == "warning: --timeout 30 s is not longer than --runtime 60 s: fio will be stopped " \
        "before it finishes\n"
    assert_one_line_error(tool("iobench", "ckpt", tmp_path, "--profile", "small-random-write", "--bs", "1000"),
                          "--bs 1000 is not a multiple of 512 bytes, which O_DIRECT (small-random-write) needs")
    assert leftovers(tmp_path) == []


def alive(pids):
    """Which of pids still run (zombies, already dead, count as gone)."""
    return [p for p in pids if (st := _stat(p)) and st != "Z"]


def _stat(pid):
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()[0]


def wait_gone(pids, seconds=15):
    deadline = time.monotonic() + seconds
    while alive(pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(pids)


@pytest.mark.slow
def test_sigkill_of_iobench_kills_fio_then_clean_removes_what_it_left(tool, tmp_path):
    """fio dies with iobench (PR_SET_PDEATHSIG); the next run warns about the stale directory and its size;
    `iobench clean` removes only that directory (marker), never a look-alike; the user's files stay."""
    data = plant_sentinels(tmp_path)
    before = snapshot(tmp_path)
    proc = start(["ckpt", data, *LONG])
    wait_for_fio(data)
    fios = fio_children(proc.pid)
    assert fios
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert wait_gone(fios, 10) == [] and fio_processes_in(data) == []
    (stale,) = leftovers(data)
    warn = tool("iobench", "ckpt", data, "--quick", "--dry-run")
    assert f"warning: {data / stale} (8M) was left by iobench run {stale[8:]}, which is no longer running" \
        in warn.stderr
    done = tool("iobench", "clean", data)
    assert done.returncode == 0 and done.stdout.strip() == f"removed {data / stale} (8M)", done.stderr
    assert leftovers(data) == [] and snapshot(tmp_path) == before  # iobench-not-mine (no marker) stays
    clean = tool("iobench", "clean", data / "iobench-not-mine")   # a clean path: said, exit 0, nothing touched
    assert clean.returncode == 0 and clean.stdout.strip() == \
        f"{data / 'iobench-not-mine'}: nothing to clean (no directory here has iobench's marker)", clean.stderr
    assert snapshot(tmp_path) == before
    assert_one_line_error(tool("iobench", "clean", data / "missing"), "not a directory; nothing removed")


@pytest.mark.slow
def test_a_live_run_holds_its_mount_and_its_directory(tool, tmp_path):
    """While a run measures a mount: a second run on the same mount is refused naming it (pid, run id), after
    --wait seconds if asked, or with --concurrent runs and says so in its records; `iobench clean` refuses to touch the live directory."""
    data = plant_sentinels(tmp_path)
    other = tmp_path / "other"
    other.mkdir()
    proc = start(["ckpt", data, *LONG])
    try:
        wait_for_fio(data)
        (live,) = leftovers(data)
        refused = tool("iobench", "ckpt", other, "--profile", "metadata", "--quick", "--size", "1M")
        assert_one_line_error(refused, f"is being measured by another iobench (pid {proc.pid}, run {live[8:]})")
        waited = tool("iobench", "ckpt", other, "--profile", "metadata", "--quick", "--size", "1M", "--wait", "1")
        assert waited.returncode == 2 and waited.stderr.splitlines()[0].startswith("iobench: waiting up to 1 s for")
        assert waited.stderr.splitlines()[-1].startswith("error:") and leftovers(other) == []
        out = tmp_path / "r.jsonl"
        forced = tool("iobench", "ckpt", other, "--profile", "metadata", "--quick", "--size", "1M", "--concurrent",
                      "--out", out)
        assert forced.returncode == 0, forced.stderr
        assert [r["concurrent"] for r in read_records(out)] == [True]
        assert_one_line_error(tool("iobench", "clean", data), "which may still be running; nothing removed")
        assert leftovers(data) == [live]
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        proc.communicate(timeout=30)
    assert leftovers(data) == []


@pytest.mark.slow
def test_sigkill_of_torch_ckpt_kills_torchrun_and_its_workers(tmp_path):
    """Also N23: torchrun's torchelastic_* files are in the run's directory, never left in TMPDIR."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = start(["torch-ckpt", tmp_path, "--size", "256M", "--ranks", "2", "--no-fio", "--wait", "60"],
                 env={"TMPDIR": str(tmp)})
    deadline, writing = time.monotonic() + 150, []
    while not writing and proc.poll() is None and time.monotonic() < deadline:
        writing = list(tmp_path.glob("iobench-*-torch/torch-save"))
        time.sleep(0.05)
    assert writing, f"workers never started writing (exit {proc.poll()})"
    family = [int(p) for p in filter(str.isdigit, os.listdir("/proc"))   # its directory held by the iobench
              if "torch" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")
              and f"/proc/{proc.pid}/fd/" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
    assert len(family) >= 3  # torchrun and two workers
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=30)
    assert wait_gone(family, 10) == [] and list(tmp.iterdir()) == []
    (stale,) = leftovers(tmp_path)
    done = subprocess.run([str(BIN / "iobench"), "clean", tmp_path / stale], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0 and leftovers(tmp_path) == [], done.stderr
