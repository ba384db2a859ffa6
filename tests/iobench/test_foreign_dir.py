"""iobench measuring a directory another user owns (N1, N23 of the fleet-hardening round): that user may rename
iobench's private iobench-<run> directory (same parent, so allowed) and put a link to their own directory in its
place, with fio job files of theirs in it. Root must never run, read or write anything there.

The swap happens at a known point, not in a race: a stand-in `fio` first on PATH (the real one's wrapper: iobench
runs whatever `fio` PATH names) has `nobody` swap every iobench directory of the run just before the first real fio
job starts, then runs the real fio with the arguments iobench gave. Those arguments must be held paths
(/proc/PID/fd/N), which a rename cannot redirect, and the user's job files must never run (their exec_prerun would
touch PWNED). Needs root (a directory of nobody's, a process as nobody)."""
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from iobench.safety import MARKER, read_marker
from tests.conftest import BIN, run_tool

NOBODY = pwd.getpwnam("nobody")
pytestmark = [pytest.mark.root, pytest.mark.slow, pytest.mark.host_mount]

AS_NOBODY = ["setpriv", f"--reuid={NOBODY.pw_uid}", f"--regid={NOBODY.pw_gid}", "--clear-groups"]
# nobody's swap: every iobench directory renamed away, a link to nobody's own in its place, holding job files of
# every name iobench uses that run a program of theirs
SWAP = r"""
P=$1; E=$2
for d in "$P"/iobench-*; do
  [ -d "$d" ] && [ ! -L "$d" ] || continue
  b=$(basename "$d"); mv "$d" "$P/hidden-$b" || exit 1
  mkdir -p "$E/$b/checkpoints/ckpt-0" "$E/$b/checkpoints/fio-ckpt-0" "$E/$b/torchrun"
  for j in fio-write fio-read job metadata shard-write restore-read-buffered; do
    printf '[x]\nexec_prerun=touch %s/PWNED\nrw=write\nsize=4k\nfilename=x\n' "$E" > "$E/$b/$j.fio"
  done
  chmod -R a+rwx "$E"; ln -s "$E/$b" "$d"
done
printf '[x]\nexec_prerun=touch %s/PWNED\nrw=write\nsize=4k\nfilename=x\n' "$E" > "$P/job.fio"
"""
# the stand-in fio: logs its arguments, has nobody swap once before the first job, then execs the real fio
FIO = """#!/bin/sh
echo "$*" >> {log}
case "$*" in *--version*) exec {fio} "$@";; esac
if [ ! -e {once} ]; then touch {once}; {as_nobody} /bin/sh {swap} {dir} {evil}; fi
exec {fio} "$@"
"""


@pytest.fixture
def alice():
    """D: a directory nobody owns (under /tmp: pytest's own are closed to nobody); evil: nobody's own; bin: the
    stand-in fio."""
    base = Path(tempfile.mkdtemp(prefix="iobench-foreign-", dir="/tmp"))
    base.chmod(0o755)
    d, evil, tools = base / "alice", base / "evil", base / "bin"
    for p in (d, evil):
        p.mkdir()
        os.chown(p, NOBODY.pw_uid, NOBODY.pw_gid)
    tools.mkdir()
    (tools / "swap.sh").write_text(SWAP)
    (tools / "fio").write_text(FIO.format(log=base / "fio.log", fio=shutil.which("fio"), once=base / "once",
                                          as_nobody=" ".join(AS_NOBODY), swap=tools / "swap.sh", dir=d, evil=evil))
    (tools / "fio").chmod(0o755)
    yield base, d, evil, {"PATH": f"{tools}:{os.environ['PATH']}"}
    shutil.rmtree(base)


def root_files(tree):
    """Everything root made under tree (nobody's: it should hold only what nobody made)."""
    return [str(p) for p in tree.rglob("*") if p.lstat().st_uid == 0]


def check_nothing_of_theirs_ran(base, d, evil, proc):
    assert proc.returncode == 0, proc.stderr
    assert not (evil / "PWNED").exists() and root_files(evil) == []
    log = (base / "fio.log").read_text()
    jobs = [line for line in log.splitlines() if "--version" not in line]
    assert jobs, log
    for line in jobs:   # every path fio was given is a held one: /proc/<iobench's pid>/fd/<n>/...
        paths = re.findall(r"(?:--directory=)?(/\S+)", line)
        assert paths and all(re.match(r"/proc/\d+/fd/\d+/", p) for p in paths), line
    # iobench's own directory, renamed by nobody, was still the one used, and emptied; nobody's link left alone
    (hidden,) = d.glob("hidden-iobench-*")
    assert list(hidden.iterdir()) == [] and all(p.is_symlink() for p in d.glob("iobench-*"))


def test_a_swapped_scratch_directory_never_runs_the_users_job_file(alice):
    """N1, model-ckpt (rank 0's fio of the same workload), ckpt and run (the checked job file, which nobody rewrote
    after the check: fio reads the copy iobench checked)."""
    base, d, evil, env = alice
    proc = run_tool("iobench", "model-ckpt", d, "--model", "llama3-8b", "--scale", "0.00005", "--writes", "1",
                    "--reads", "1", "--ranks", "2", "--wait", "120", env=env)
    check_nothing_of_theirs_ran(base, d, evil, proc)

    for args in (["ckpt", d, "--quick", "--profile", "metadata", "--size", "1M", "--wait", "120"],
                 ["run", d / "job.fio", "--directory", d, "--wait", "120"]):
        for p in [*d.iterdir(), *evil.iterdir(), base / "once", base / "fio.log"]:
            shutil.rmtree(p) if p.is_dir() and not p.is_symlink() else p.unlink()
        job = d / "job.fio"
        subprocess.run([*AS_NOBODY, "sh", "-c", f"printf '[w]\\nrw=write\\nsize=64k\\n' > {job}"], check=True)
        proc = run_tool("iobench", *args, env=env)
        check_nothing_of_theirs_ran(base, d, evil, proc)


def test_torch_ckpt_in_a_swapped_directory(alice):
    """The same for torch-ckpt: fio's reference in one private directory, the checkpoints in another, both swapped."""
    base, d, evil, env = alice
    proc = run_tool("iobench", "torch-ckpt", d, "--size", "4M", "--ranks", "1", "--repeats", "1", "--ckpt-format",
                    "torch-save", "--wait", "120", env=env)
    assert proc.returncode == 0, proc.stderr
    assert not (evil / "PWNED").exists() and root_files(evil) == []
    assert len(list(d.glob("hidden-iobench-*"))) == 2


def test_clean_removes_only_the_callers_private_directories(alice, tmp_path):
    """A directory nobody made with iobench's marker (a dead run's) is not ours: neither warned about nor removed; a
    marker that is a FIFO or a link never blocks or is followed."""
    base, d, evil, env = alice
    fake = d / "iobench-fake"
    script = (f"mkdir -m 700 {fake} && printf '{{\"run_id\": \"x\", \"pid\": 999999, \"host\": \"%s\"}}' "
              f"\"$(hostname)\" > {fake}/{MARKER} && mkdir {d}/iobench-fifo && mkfifo {d}/iobench-fifo/{MARKER} && "
              f"mkdir {d}/iobench-link && ln -s /etc/shadow {d}/iobench-link/{MARKER}")
    subprocess.run([*AS_NOBODY, "sh", "-c", script], check=True)
    assert read_marker(fake) is None
    done = run_tool("iobench", "clean", d, timeout=30)
    assert done.returncode == 0 and "nothing to clean" in done.stdout, done.stdout + done.stderr
    assert fake.is_dir() and (fake / MARKER).exists()


def test_sigkill_of_model_ckpt_leaves_torchruns_files_only_where_clean_removes_them(tmp_path):
    """N23: torchrun's torchelastic_* directories were left in TMPDIR by a killed model-ckpt; now they are in the run's
    private directory, which `iobench clean` removes."""
    data, tmp = tmp_path / "data", tmp_path / "tmp"
    data.mkdir()
    tmp.mkdir()
    err = tmp_path / "stderr"
    proc = subprocess.Popen([str(BIN / "iobench"), "model-ckpt", data, "--model", "llama3-8b", "--scale", "0.0005",
                             "--writes", "5", "--reads", "5", "--ranks", "2", "--no-fio", "--wait", "120"],
                            env={**os.environ, "TMPDIR": str(tmp)}, stdout=subprocess.DEVNULL,
                            stderr=err.open("w"), start_new_session=True)
    try:
        deadline = time.monotonic() + 240
        while not list(data.glob("iobench-*/torchrun/torchelastic_*")) and time.monotonic() < deadline:
            assert proc.poll() is None, err.read_text()
            time.sleep(0.05)
        assert list(data.glob("iobench-*/torchrun/torchelastic_*")), "torchrun never started"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
    family = [int(p) for p in filter(str.isdigit, os.listdir("/proc"))
              if f"/proc/{proc.pid}/fd/" in Path(f"/proc/{p}/cmdline").read_bytes().decode(errors="replace")]
    deadline = time.monotonic() + 30          # torchrun and its ranks end with iobench (SIGTERM at its death)
    while any(Path(f"/proc/{p}").exists() for p in family) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(tmp.iterdir()) == []
    done = run_tool("iobench", "clean", data, timeout=60)
    assert done.returncode == 0 and done.stdout.startswith("removed "), done.stdout + done.stderr
    assert list(data.iterdir()) == [] and list(tmp.iterdir()) == []


@pytest.mark.skipif(not shutil.which("bindfs"), reason="needs bindfs (scripts/setup installs it)")
def test_a_file_system_that_makes_roots_files_anothers_still_takes_a_run(tmp_path):
    """NFS's root_squash makes root's new directory nobody's: iobench still knows it for its own (a file it makes
    there is nobody's too), where a directory of nobody's put in its place on a plain file system is refused. bindfs
    --force-user=nobody stands in for the squashing server."""
    src, mnt = tmp_path / "src", tmp_path / "mnt"
    src.mkdir()
    mnt.mkdir()
    subprocess.run(["bindfs", "--force-user=nobody", "--force-group=nogroup", src, mnt], check=True, timeout=30)
    try:
        proc = run_tool("iobench", "ckpt", mnt, "--quick", "--profile", "metadata", "--size", "1M", "--wait", "120")
        assert proc.returncode == 0, proc.stderr
        assert list(src.iterdir()) == []
    finally:
        subprocess.run(["umount", mnt], timeout=30)
