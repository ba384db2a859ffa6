"""`iobench run JOBFILE --directory PATH`: any fio job file through the same checks, parser and records."""
import json
import os
import subprocess

import pytest

from tests.conftest import assert_one_line_error, read_records
from tests.iobench.conftest import assert_failed_run, leftovers
from tests.iobench.tables import compact_tables, shown_mounts

pytestmark = pytest.mark.host_mount   # runs iobench on a host file system (its lock: one at a time)

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


HOSTILE = [
    ("directory=/etc", "'directory' is not allowed"),
    ("opendir=/etc", "'opendir' is not allowed"),
    ("filename=/dev/sda", "filename names a path"),
    ("filename=a:../b", "names a path"),
    ("filename=-", "filename names a path or a special file"),
    ("filename_format=../x.$jobnum", "names a path"),
    ("write_lat_log=/root/lat", "'write_lat_log' is not allowed"),
    ("write_iolog=trace", "'write_iolog' is not allowed"),
    ("read_iolog=/tmp/trace", "'read_iolog' is not allowed"),
    ("exec_postrun=rm -rf /", "'exec_postrun' is not allowed"),
    ("exec_prerun=touch {canary}", "'exec_prerun' is not allowed"),
    ("ioengine=exec\nprogram=touch\narguments={canary}", "this ioengine is not allowed"),
    ("ioengine=external:/tmp/x.so", "this ioengine is not allowed"),
    ("ioengine=rados\npool=data", "this ioengine is not allowed"),
    ("ioengine=null", "this ioengine is not allowed"),
    ("ioengine=sg", "this ioengine is not allowed"),
    ("ioscheduler=none", "'ioscheduler' is not allowed"),
    ("cgroup=evil", "'cgroup' is not allowed"),
    ("mem=mmapshared:/dev/shm/x", "'mem' is not allowed"),
    ("replay_redirect=/dev/sda", "'replay_redirect' is not allowed"),
    ("include other.fio", "'include' is not allowed"),
    ("filename=${HOME}", "environment variables"),
    ("numjobs=two", "numjobs is not a whole number"),
    ("direct=yes", "direct must be 0 or 1"),
    ("thread=0", "thread: iobench runs jobs as threads"),
    ("direct=1\nbs=1000", ":1: this job's bs is not a multiple of 512 bytes, which O_DIRECT needs"),
]


@pytest.mark.parametrize("line,needle", HOSTILE)
def test_job_files_that_could_reach_outside_are_refused_before_fio(tool, tmp_path, line, needle):
    """An allow-list: every option that names a program, library, device setting, trace, log or path is
    refused with one line before fio starts (the canary a program would create never appears)."""
    canary = tmp_path / "canary"
    job = tmp_path / "bad.fio"
    job.write_text(f"[job]\nrw=write\nsize=1m\n{line.replace('{canary}', str(canary))}\n")
    proc = tool("iobench", "run", job, "--directory", tmp_path)
    assert_one_line_error(proc, needle)
    assert leftovers(tmp_path) == [] and not canary.exists()


@pytest.mark.slow
def test_comments_are_read_as_fio_reads_them(tool, tmp_path):
    """fio cuts a line at ';' or '#': `[global] ; note` and `size=2m ; note` are valid and mean what fio runs."""
    job, data, out = tmp_path / "c.fio", tmp_path / "data", tmp_path / "r.jsonl"
    job.write_text("[global] ; shared settings\nioengine=psync # engine\nsize=2m ; two MiB\n"
                   "[c1]   # first\nrw=write;x\nbs=4k\n")
    data.mkdir()
    proc = tool("iobench", "run", job, "--directory", data, "--out", out)
    assert proc.returncode == 0, proc.stderr
    (rec,) = read_records(out)
    assert (rec["profile"], rec["rw"], rec["io_bytes"], rec["ioengine"]) == ("c1", "write", 2 << 20, "psync")


def test_fio_rejecting_the_job_is_one_clear_line(tool, tmp_path):
    job = tmp_path / "bogus.fio"
    job.write_text("[job]\nrw=sideways\nsize=1m\n")
    proc = tool("iobench", "run", job, "--directory", tmp_path)
    assert_failed_run(proc, "fio failed (exit 1)")
    assert "sideways" in proc.stderr and leftovers(tmp_path) == []


def test_no_job_section_and_missing_file(tool, tmp_path):
    (tmp_path / "g.fio").write_text("[global]\nrw=read\n")
    assert_one_line_error(tool("iobench", "run", tmp_path / "g.fio", "--directory", tmp_path), "defines no job")
    assert_one_line_error(tool("iobench", "run", tmp_path / "x.fio", "--directory", tmp_path), "no such file")


@pytest.mark.root
@pytest.mark.slow
def test_direct_job_on_a_mount_without_odirect_fails_clearly(tool, nodirect_fuse, tmp_path):
    """`run` does not rewrite a user's job: fio's own EINVAL comes back as one line."""
    job = tmp_path / "direct.fio"
    job.write_text("[d]\nrw=write\nbs=4k\nsize=1m\ndirect=1\n")
    proc = tool("iobench", "run", job, "--directory", nodirect_fuse)
    assert_failed_run(proc, "fio failed")
    assert "does not support O_DIRECT" in proc.stderr and leftovers(nodirect_fuse) == []


@pytest.mark.slow
def test_dry_run_prints_a_shell_line_that_does_what_iobench_does(tool, tmp_path):
    """Shell-quoted (a space and a ';' in the path): pasted into bash it makes the directory, runs fio in it
    and removes it, and nothing else under the parent changes (before: an unquoted, missing --directory)."""
    job, data = tmp_path / "mixed.fio", tmp_path / "my data;x"
    job.write_text(MIXED)
    data.mkdir()
    (tmp_path / "my").mkdir()
    proc = tool("iobench", "run", job, "--directory", data, "--dry-run")
    assert proc.returncode == 0 and proc.stdout.startswith("mkdir -- ")
    assert leftovers(data) == []
    done = subprocess.run(["bash", "-c", proc.stdout], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert [j["jobname"] for j in json.loads(done.stdout[done.stdout.index("{"):])["jobs"]] == ["mixed"]
    assert os.listdir(data) == [] and os.listdir(tmp_path / "my") == []


@pytest.mark.slow
def test_numjobs_without_group_reporting_gives_one_row_per_job(tool, tmp_path):
    """fio reports each of numjobs=3 under the same name: records and table name them three.0 .. three.2."""
    job, data, out = tmp_path / "three.fio", tmp_path / "data", tmp_path / "r.jsonl"
    job.write_text("[three]\nrw=write\nbs=4k\nsize=1m\nnumjobs=3\n")
    data.mkdir()
    proc = tool("iobench", "run", job, "--directory", data, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert [r["profile"] for r in read_records(out)] == ["three.0", "three.1", "three.2"]
    assert all(f"three.{i}" in proc.stdout for i in range(3))


CACHED = ("[global]\nioengine=psync\nsize=16m\ninvalidate={invalidate}\n\n"
          "[seqread]\nrw=read\nbs=1m\ntime_based=1\nruntime=1s\n")


@pytest.mark.slow
def test_run_says_when_a_cache_served_the_bytes(tool, tmp_path):
    """Issue 49 item 8: `iobench run` printed a page cache's MB/s as the disk's. The device's counter (iobench/
    moved.py, model-ckpt's proof) around fio: a 16M file read for 1 s without fio's cache invalidation comes from
    the page cache (under 0.9 of its bytes reach the device: 'cache', in the table, a line under it, the records);
    with it, the device moves them (storage, no column, no line)."""
    data = tmp_path / "data"
    data.mkdir()
    seen = {}
    for invalidate in (0, 1):
        job, out = tmp_path / f"read{invalidate}.fio", tmp_path / f"r{invalidate}.jsonl"
        job.write_text(CACHED.format(invalidate=invalidate))
        proc = tool("iobench", "run", job, "--directory", data, "--out", out, env={"COLUMNS": "200"})
        assert proc.returncode == 0, proc.stderr
        (rec,) = read_records(out)
        seen[invalidate] = rec, proc.stdout
    cached, out = seen[0]
    assert cached["served_by"] == "cache" and cached["bytes_moved_ratio"] < 0.5, cached
    assert cached["byte_counter"] == "block device (sysfs diskstats)" and cached["bw_mbps"] > 0
    lines = out.splitlines()
    assert any(line.split()[-2:] == ["served", "by"] for line in lines), out          # the column's header
    (table,) = compact_tables(out)
    assert [(row[0], row[1], row[-1]) for row in table.rows] == [
        (shown_mounts(out, [data])[str(data)], "seqread", f"cache ({cached['bytes_moved_ratio']:.2f} moved)")], out
    assert (f"served by cache: seqread on {data}: {cached['bytes_moved_ratio']:.2f} of its read bytes reached "
            "storage by block device (sysfs diskstats) (below 0.9: a cache served it): the MB/s is a cache's (the "
            "page cache's), not the storage's") in out
    stored, out = seen[1]
    assert stored["served_by"] == "storage" and stored["bytes_moved_ratio"] >= 0.9, stored
    assert "served by" not in out


@pytest.mark.slow
@pytest.mark.root
def test_run_on_memory_says_its_mbps_is_not_storage(tool, tmpfs, tmp_path):
    mem = tmpfs("mem", size="96M")        # 16M and iobench's 64M margin
    job, out = tmp_path / "read.fio", tmp_path / "r.jsonl"
    job.write_text(CACHED.format(invalidate=1))
    proc = tool("iobench", "run", job, "--directory", mem, "--out", out, env={"COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    (rec,) = read_records(out)
    assert rec["served_by"] == "memory" and rec["bytes_moved_ratio"] is None
    assert (f"served by memory: seqread on {mem}: tmpfs is memory: no storage moves its bytes: the MB/s is memory's, "
            "not storage's") in proc.stdout
