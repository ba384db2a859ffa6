"""The profile registry and the fio job files built from it (checked by fio's own parser)."""
import json
import os
import subprocess

import pytest

from benchcore.errors import UserError
from iobench.profiles import PROFILES, build_job, job_file, parse_profiles, space_needed, unlink_when_done
from tests.conftest import assert_one_line_error

pytestmark = pytest.mark.host_mount   # runs iobench on a host file system (its lock: one at a time)


def test_issue_profiles_are_registered():
    assert list(PROFILES) == ["small-random-write", "shard-write", "restore-read", "metadata"]
    srw = build_job(PROFILES["small-random-write"])
    assert srw.options.items() >= {"rw": "randwrite", "bs": "4k", "ioengine": "libaio", "iodepth": 64,
                                       "direct": 1, "time_based": 1, "runtime": "120s"}.items()
    shard = build_job(PROFILES["shard-write"], size=8 << 30, ranks=8)
    assert shard.options["numjobs"] == 8 and shard.options["size"] == "1g" and shard.options["end_fsync"] == 1
    restore = build_job(PROFILES["restore-read"], size=8 << 30, ranks=8)
    assert restore.options["filename_format"] == shard.options["filename_format"] and restore.direct == 1


def test_quick_and_overrides():
    quick = build_job(PROFILES["small-random-write"], quick=True)
    assert quick.options["runtime"] == "5s"
    job = build_job(PROFILES["shard-write"], quick=True, size=64 << 20, bs=4 << 20, iodepth=4, jobs=4, runtime=7)
    assert job.options.items() >= {"bs": "4m", "iodepth": 4, "numjobs": 4, "size": "16m", "runtime": "7s"}.items()
    meta = build_job(PROFILES["metadata"], size=1 << 20, bs=16 << 10)
    assert (meta.options["nrfiles"], meta.options["filesize"]) == (64, "16k")


def test_space_is_the_largest_fileset_since_each_is_unlinked_after_its_last_job():
    jobs = unlink_when_done([build_job(PROFILES[n], size=64 << 20, ranks=2) for n in PROFILES])
    assert space_needed(jobs) == 64 << 20
    assert [j.options.get("unlink") for j in jobs] == [1, None, 1, 1]  # shard files live on for restore-read


@pytest.mark.root
@pytest.mark.slow
def test_size_is_counted_once_not_once_per_profile(tool, tmpfs):
    """--size 64M, all four profiles, on a 150M tmpfs: 64M + the 64M margin fit (before: 3 x 64M was asked)."""
    small = tmpfs("small", size="150M")
    proc = tool("iobench", "ckpt", small, "--quick", "--size", "64M", "--runtime", "1", "--ranks", "2",
                "--format", "json")
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["profile"] for line in proc.stdout.splitlines()] == list(PROFILES)
    assert os.listdir(small) == []


def test_unknown_profile():
    with pytest.raises(UserError, match="unknown profile 'nope'"):
        parse_profiles("shard-write,nope")
    assert [p.name for p in parse_profiles("restore-read,shard-write")] == ["shard-write", "restore-read"]


@pytest.mark.parametrize("name", list(PROFILES))
def test_job_files_parse_with_real_fio(tmp_path, name):
    text = job_file([build_job(PROFILES[name], quick=True)], ["header"])
    assert "directory" not in text  # paths go on fio's command line only
    (tmp_path / "job.fio").write_text(text)
    out = subprocess.run(["fio", "--parse-only", str(tmp_path / "job.fio")], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr


def rerun_lines(dry_run_stdout):
    """The shell lines in a --dry-run header, as printed for pasting."""
    return [ln[1:].strip() for ln in dry_run_stdout.splitlines() if ln.startswith(";   mkdir -- ")]


@pytest.mark.slow
def test_dry_run_file_reproduces_iobench_runs_with_plain_fio(tool, tmp_path):
    """The printed file, run by its own pasted rerun line (plain fio), runs the same jobs in the same order,
    each its own group (before: no stonewall, 4 profiles at once, one merged job); nothing left."""
    data = tmp_path / "my data"
    data.mkdir()
    args = ["--quick", "--size", "4M", "--runtime", "1", "--ranks", "2"]
    proc = tool("iobench", "ckpt", data, *args, "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert list(data.iterdir()) == []  # nothing written
    (tmp_path / "ckpt.fio").write_text(proc.stdout)
    (line,) = rerun_lines(proc.stdout)
    plain = subprocess.run(["bash", "-c", line], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert plain.returncode == 0, plain.stderr
    jobs = json.loads(plain.stdout[plain.stdout.index("{"):])["jobs"]
    real = tool("iobench", "ckpt", data, *args, "--format", "json")
    assert real.returncode == 0, real.stderr
    ran = [json.loads(x)["profile"] for x in real.stdout.splitlines()]
    assert [j["jobname"] for j in jobs] == ran == list(PROFILES)
    assert [j["groupid"] for j in jobs] == [0, 1, 2, 3]
    assert list(data.iterdir()) == []


@pytest.mark.root
def test_dry_run_needs_no_free_space_and_prints_one_file(tool, tmpfs):
    full = tmpfs("full", size="1M")
    proc = tool("iobench", "ckpt", full, "--size", "64G", "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("[global]") == 1 and proc.stdout.count("\nstonewall\n") == len(PROFILES)
    assert os.listdir(full) == []


@pytest.mark.parametrize("args,needle", [
    (["--size", "64Q"], "--size '64Q' is not a size"),
    (["--profile", "bogus"], "unknown profile 'bogus'"),
    (["--runtime", "0"], "--runtime must be at least 1"),
])
def test_bad_options_one_line(tool, tmp_path, args, needle):
    assert_one_line_error(tool("iobench", "ckpt", tmp_path, *args), needle)


def test_every_command_has_help_with_example(tool):
    for command in ([], ["ckpt"], ["mounts"], ["run"], ["torch-ckpt"]):
        proc = tool("iobench", *command, "--help")
        assert proc.returncode == 0 and "Example:" in proc.stdout, (command, proc.stdout)


def test_mb_plot_of_mounts_25x_apart_is_a_png(tmp_path):
    """Its axes are linear with each bar's value written on it (tests/benchcore/report/test_figures.py)."""
    from iobench.output import bar_plot
    recs = [{"profile": "shard-write", "mount": m, "bw_mbps": bw, "lat_p99_us": 100.0}
            for m, bw in (("/nvme", 3000.0), ("/cephfs", 120.0))]
    bar_plot(tmp_path / "a.png", recs)
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"
