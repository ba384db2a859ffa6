"""The profile registry and the fio job files built from it (checked by fio's own parser)."""
import subprocess

import pytest

from benchcore.errors import UserError
from iobench.profiles import PROFILES, build_job, job_file, parse_profiles, space_needed
from tests.conftest import assert_one_line_error


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


def test_space_counts_shared_shard_files_once():
    jobs = [build_job(PROFILES[n], size=64 << 20, ranks=2) for n in ("shard-write", "restore-read", "metadata")]
    assert space_needed(jobs) == 128 << 20


def test_unknown_profile():
    with pytest.raises(UserError, match="unknown profile 'nope'"):
        parse_profiles("shard-write,nope")
    assert [p.name for p in parse_profiles("restore-read,shard-write")] == ["shard-write", "restore-read"]


@pytest.mark.parametrize("name", list(PROFILES))
def test_job_files_parse_with_real_fio(tmp_path, name):
    text = job_file(build_job(PROFILES[name], quick=True), tmp_path / "a:b", ["header"])
    assert "directory=" + str(tmp_path) + "/a\\:b" in text
    (tmp_path / "job.fio").write_text(text)
    out = subprocess.run(["fio", "--parse-only", str(tmp_path / "job.fio")], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr


def test_dry_run_prints_runnable_job_files(tool, tmp_path):
    proc = tool("iobench", "ckpt", tmp_path, "--quick", "--dry-run", "--ranks", "2")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("[global]") == len(PROFILES)
    assert list(tmp_path.iterdir()) == []  # nothing written
    one = proc.stdout.split("\n\n; ")[0]
    (tmp_path / "one.fio").write_text(one)
    out = subprocess.run(["fio", "--parse-only", str(tmp_path / "one.fio")], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr


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
