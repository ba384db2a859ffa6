"""`iobench run JOBFILE --directory PATH`: any fio job file through the same checks, parser and records."""
import pytest

from tests.conftest import assert_one_line_error, read_records
from tests.iobench.conftest import assert_failed_run, leftovers

MIXED = "[global]\nioengine=psync\nsize=4m\n\n[mixed]\nrw=randrw\nbs=4k\ntime_based=1\nruntime=1s\n"


@pytest.mark.slow
def test_mixed_job_gives_one_record_per_direction(tool, tmp_path):
    job, data, out = tmp_path / "mixed.fio", tmp_path / "data", tmp_path / "r.jsonl"
    job.write_text(MIXED)
    data.mkdir()
    proc = tool("iobench", "run", job, "--directory", data, "--out", out)
    assert proc.returncode == 0, proc.stderr
    read, write = read_records(out)
    assert [(r["profile"], r["direction"], r["rw"]) for r in (read, write)] == [
        ("mixed", "read", "randrw"), ("mixed", "write", "randrw")]
    assert read["size_bytes"] == 4 << 20 and read["lat_kind"] == "lat" and read["lat_p99_us"] > 0
    assert "mixed (read)" in proc.stdout and "mixed (write)" in proc.stdout
    assert leftovers(data) == [] and sorted(p.name for p in tmp_path.iterdir()) == ["data", "mixed.fio", "r.jsonl"]


@pytest.mark.parametrize("line,needle", [
    ("directory=/etc", "'directory' is not allowed"),
    ("filename=/dev/sda", "filename=/dev/sda names a path"),
    ("filename=a:../b", "names a path"),
    ("write_lat_log=/root/lat", "write_lat_log=/root/lat names a path"),
    ("exec_postrun=rm -rf /", "'exec_postrun' is not allowed"),
    ("include other.fio", "'include' is not allowed"),
    ("filename=${HOME}", "environment variables"),
])
def test_job_files_that_could_write_elsewhere_are_refused(tool, tmp_path, line, needle):
    job = tmp_path / "bad.fio"
    job.write_text(f"[job]\nrw=write\nsize=1m\n{line}\n")
    proc = tool("iobench", "run", job, "--directory", tmp_path)
    assert_one_line_error(proc, needle)
    assert leftovers(tmp_path) == []


def test_fio_rejecting_the_job_is_one_clear_line(tool, tmp_path):
    job = tmp_path / "bogus.fio"
    job.write_text("[job]\nrw=sideways\nsize=1m\n")
    proc = tool("iobench", "run", job, "--directory", tmp_path)
    assert_failed_run(proc, "fio failed (exit 1)")
    assert "sideways" in proc.stderr and leftovers(tmp_path) == []


def test_no_job_section_and_missing_file(tool, tmp_path):
    (tmp_path / "g.fio").write_text("[global]\nrw=read\n")
    assert_one_line_error(tool("iobench", "run", tmp_path / "g.fio", "--directory", tmp_path), "defines no job")
    assert_one_line_error(tool("iobench", "run", tmp_path / "x.fio", "--directory", tmp_path), "does not exist")


@pytest.mark.root
@pytest.mark.slow
def test_direct_job_on_a_mount_without_odirect_fails_clearly(tool, nodirect_fuse, tmp_path):
    """`run` does not rewrite a user's job: fio's own EINVAL comes back as one line."""
    job = tmp_path / "direct.fio"
    job.write_text("[d]\nrw=write\nbs=4k\nsize=1m\ndirect=1\n")
    proc = tool("iobench", "run", job, "--directory", nodirect_fuse)
    assert_failed_run(proc, "fio failed")
    assert "does not support O_DIRECT" in proc.stderr and leftovers(nodirect_fuse) == []


def test_dry_run_prints_the_fio_command(tool, tmp_path):
    job = tmp_path / "mixed.fio"
    job.write_text(MIXED)
    proc = tool("iobench", "run", job, "--directory", tmp_path, "--dry-run")
    assert proc.returncode == 0 and proc.stdout.startswith("fio --output-format=json --directory=")
    assert proc.stdout.strip().endswith(str(job)) and leftovers(tmp_path) == []
