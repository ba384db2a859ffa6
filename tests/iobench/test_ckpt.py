"""`iobench ckpt` end to end: real fio, every profile, on a real local directory and on XFS on a loop device."""
import errno
import json
import os
import shutil

import pytest

from benchcore.results.schema import DESIGN, problems
from iobench.profiles import PROFILES
from tests.conftest import read_records
from tests.iobench.conftest import leftovers, plant_sentinels, snapshot
from tests.iobench.tables import compact_tables, shown_mounts

SMALL = ["--quick", "--runtime", "2", "--size", "16M", "--ranks", "2"]


@pytest.fixture(scope="module")
def side_by_side(tmp_path_factory, loop_xfs):
    """One run over both mounts (with user files planted in both), shared by the tests below."""
    from tests.conftest import run_tool
    local_root = tmp_path_factory.mktemp("local")
    xfs_root = loop_xfs[0] / "iobench-test-user"  # the mount is shared: this test's files go away after it
    xfs_root.mkdir()
    paths = [plant_sentinels(local_root), plant_sentinels(xfs_root)]
    before = [snapshot(local_root), snapshot(xfs_root)]
    results = tmp_path_factory.mktemp("results")
    out, plot = results / "results.jsonl", results / "ckpt.png"
    proc = run_tool("iobench", "ckpt", *paths, *SMALL, "--out", out, "--plot", plot, timeout=300,
                    env={"COLUMNS": "100"})
    after = [snapshot(local_root), snapshot(xfs_root)]
    yield {"proc": proc, "paths": paths, "before": before, "after": after, "out": out, "plot": plot,
           "records": read_records(out, tool="iobench")}
    shutil.rmtree(xfs_root)


pytestmark = [pytest.mark.slow, pytest.mark.root, pytest.mark.host_mount]


def test_every_profile_on_both_mounts(side_by_side):
    proc = side_by_side["proc"]
    assert proc.returncode == 0, proc.stderr
    # the tables within 100 columns in a pipe, long mount paths included: each named in one line of its cell
    # (issue 49 item 7; the notes under them are lines of text, never wrapped)
    tables = [ln for ln in proc.stdout.splitlines() if ": " not in ln]
    assert max(len(ln) for ln in tables) <= 100, proc.stdout
    names = shown_mounts(proc.stdout, side_by_side["paths"])
    assert [len(t.rows) for t in compact_tables(proc.stdout)] == [8, 4], proc.stdout
    assert all(row[0] in names.values() and row[1] in PROFILES
               for t in compact_tables(proc.stdout) for row in t.rows), proc.stdout
    local, xfs = map(str, side_by_side["paths"])
    recs = side_by_side["records"]
    assert [(r["mount"], r["profile"]) for r in recs] == [(m, p) for m in (local, xfs) for p in PROFILES]
    for rec in recs:
        assert list(rec)[:len(DESIGN["iobench"])] == list(DESIGN["iobench"]) and problems(rec) == []
        assert rec["tool"] == "iobench" and rec["fio_version"].startswith("fio-3")
        assert rec["iops"] > 0 and rec["bw_mbps"] > 0 and rec["runtime_s"] > 0
        n = rec["lat_samples"]
        assert n > 0 and (rec["lat_p99_us"] is None) == (n < 100) and (rec["lat_p999_us"] is None) == (n < 1000)
        assert 0 < rec["lat_p50_us"] <= (rec["lat_p99_us"] or rec["lat_p50_us"])
        assert rec["direct"] == rec["direct_requested"] == PROFILES[rec["profile"]].options["direct"]
        assert rec["size_bytes"] == 16 << 20
    by = {(r["mount"], r["profile"]): r for r in recs}
    assert by[xfs, "small-random-write"]["rw"] == "randwrite" and by[xfs, "small-random-write"]["bs_bytes"] == 4096
    assert by[xfs, "shard-write"]["numjobs"] == 2 and by[xfs, "restore-read"]["rw"] == "read"
    meta, shard = by[xfs, "metadata"], by[xfs, "shard-write"]
    assert meta["fsync_lat_p99_us"] > 0 and meta["files"] == 256 and meta["files_per_s"] > 0
    # per file: create + write + fsync + close, so more than the write() call and the fsync together
    assert meta["file_lat_mean_us"] > meta["lat_mean_us"] + meta["fsync_lat_mean_us"]
    # time to durable: MB/s over the job's whole time, the end fsync in it
    assert 0 < shard["end_fsync_s"] < shard["runtime_s"]
    assert shard["bw_mbps"] == pytest.approx(shard["io_bytes"] / shard["runtime_s"] / 1e6, rel=0.05)
    x = by[xfs, "shard-write"]
    assert (x["fs_type"], x["storage_class"]) == ("xfs", "loop") and "loop device" in x["device"]
    assert by[local, "shard-write"]["storage_class"] not in ("unknown", "mixed")


def test_table_puts_mounts_side_by_side(side_by_side):
    stdout = side_by_side["proc"].stdout
    main, durable = compact_tables(stdout)
    for column in ("mount", "profile", "MB/s", "IOPS", "I/Os", "direct"):
        assert column in main.header
    # every profile's per-I/O row on both mounts, in the order given, then the time-to-durable table's rows
    # (shard-write's end fsync, metadata's files)
    names = shown_mounts(stdout, side_by_side["paths"])
    mounts = [names[str(p)] for p in side_by_side["paths"]]
    assert [tuple(row[:2]) for row in main.rows] == [(m, p) for p in PROFILES for m in mounts], stdout
    assert [tuple(row[:2]) for row in durable.rows] == [(m, p) for p in ("shard-write", "metadata") for m in mounts]
    assert f"{side_by_side['paths'][1]}: xfs, storage class loop, device loop" in stdout
    restore = dict(zip(main.header, next(row for row in main.rows if row[1] == "restore-read")))
    assert restore["I/O lat P99 us"] == restore["I/O lat P99.9 us"] == "n/a"  # 16 reads: they mean nothing


def test_user_files_untouched_and_nothing_left(side_by_side):
    assert side_by_side["after"] == side_by_side["before"]
    for path in side_by_side["paths"]:
        assert leftovers(path) == []
    assert side_by_side["plot"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_odirect_fallback_on_a_mount_that_refuses_it(tool, nodirect_fuse, tmp_path):
    """A real FUSE mount rejects open(O_DIRECT) with EINVAL: iobench says so and records direct=0."""
    with pytest.raises(OSError) as refused:
        os.open(nodirect_fuse / "probe", os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
    assert refused.value.errno == errno.EINVAL
    out = tmp_path / "r.jsonl"
    proc = tool("iobench", "ckpt", nodirect_fuse, "--profile", "small-random-write,restore-read", *SMALL,
                "--size", "8M", "--out", out)
    assert proc.returncode == 0, proc.stderr
    warning = [ln for ln in proc.stderr.splitlines() if ln.startswith("warning:")]
    assert len(warning) == 1 and "refuses O_DIRECT" in warning[0] and "EINVAL" in warning[0]
    assert "direct=0" in warning[0]
    recs = read_records(out)
    assert [(r["profile"], r["direct"], r["direct_requested"]) for r in recs] == [
        ("small-random-write", 0, 1), ("restore-read", 0, 1)]
    assert all(r["fs_type"] == "fuse" and r["iops"] > 0 for r in recs)
    # buffered rows on a file system no counter knows: their MB/s unproven, said in the table and under it
    assert {(r["served_by"], r["bytes_moved_ratio"]) for r in recs} == {("unproven", None)}
    assert all(r["served_reason"] == "no byte counter for fuse (unknown) is known to iobench" for r in recs), recs
    assert f"served by unproven: restore-read on {nodirect_fuse}: no byte counter for fuse" in proc.stdout
    assert leftovers(nodirect_fuse) == [] and os.listdir(nodirect_fuse) == []


def test_json_and_csv_output(tool, tmp_path):
    args = ["ckpt", tmp_path, "--profile", "metadata", "--quick", "--size", "1M"]
    proc = tool("iobench", *args, "--format", "json", "--out", "/dev/null")
    recs = [json.loads(ln) for ln in proc.stdout.splitlines()]
    assert [r["profile"] for r in recs] == ["metadata"]
    csv = tool("iobench", *args, "--format", "csv").stdout.splitlines()
    assert csv[0].startswith("tool,run_id,mount,fs_type,storage_class,profile,rw,bs_bytes") and len(csv) == 2


def test_direct_shard_write(tool, loop_xfs, tmp_path):
    """--direct: shard-write with O_DIRECT 1 MiB writes (the end fsync kept), recorded direct=1."""
    out = tmp_path / "r.jsonl"
    proc = tool("iobench", "ckpt", loop_xfs[0], "--profile", "shard-write", "--direct", "--size", "8M", "--ranks", "2",
                "--out", out, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    (rec,) = read_records(out)
    assert (rec["direct"], rec["direct_requested"], rec["bs_bytes"]) == (1, 1, 1 << 20) and rec["end_fsync_s"] >= 0
    assert leftovers(loop_xfs[0]) == []
