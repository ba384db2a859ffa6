"""`iobench ckpt <loop-XFS> <CephFS> --quick`: the headline comparison, on the real things.

One run over the session's loop-device XFS and single-node CephFS (~25 s here): both storage
classes detected, every profile measured with the O_DIRECT setting it asks for (no silent
buffered fallback on either mount), complete records, the side-by-side table, and nothing
left behind in either mount.
"""
import os

import pytest

from iobench.profiles import PROFILES
from tests.conftest import read_records, run_tool
from tests.iobench.tables import compact_tables, shown_mounts

pytestmark = [pytest.mark.root, pytest.mark.slow]

# the iobench record fields (benchcore/results/schema.py) (stable names)
RECORD_FIELDS = ("tool", "run_id", "mount", "fs_type", "storage_class", "profile", "rw", "bs_bytes",
                 "iodepth", "numjobs", "direct", "size_bytes", "runtime_s", "iops", "bw_mbps",
                 "lat_mean_us", "lat_p50_us", "lat_p99_us", "lat_p999_us", "fio_version", "hosts",
                 "timestamp")


@pytest.fixture(scope="module")
def compared(loop_xfs_mount, cephfs_mount, tmp_path_factory):
    mounts = [loop_xfs_mount, cephfs_mount.path]
    before = [sorted(os.listdir(m)) for m in mounts]
    out = tmp_path_factory.mktemp("ckpt") / "results.jsonl"
    proc = run_tool("iobench", "ckpt", *mounts, "--quick", "--out", out, timeout=600)
    return {"proc": proc, "mounts": [str(m) for m in mounts], "before": before,
            "after": [sorted(os.listdir(m)) for m in mounts],
            "records": read_records(out, tool="iobench") if out.exists() else []}


def test_every_profile_on_both_storage_classes(compared):
    proc = compared["proc"]
    assert proc.returncode == 0, proc.stderr
    assert "Traceback" not in proc.stderr
    loop, ceph = compared["mounts"]
    recs = compared["records"]
    assert sorted((r["mount"], r["profile"]) for r in recs) == \
        sorted((m, p) for m in (loop, ceph) for p in PROFILES)
    expect = {loop: ("loop", "xfs"), ceph: ("cephfs", "fuse.ceph-fuse")}
    for r in recs:
        missing = [f for f in RECORD_FIELDS if r.get(f) is None and f != "lat_p999_us"]
        assert not missing, (r["mount"], r["profile"], missing)
        assert (r["storage_class"], r["fs_type"]) == expect[r["mount"]], r
        wanted = PROFILES[r["profile"]].options["direct"]
        assert r["direct"] == wanted, (r["mount"], r["profile"], r["direct"])  # no fallback
        assert r["iops"] > 0 and r["bw_mbps"] > 0 and r["runtime_s"] > 0
        assert 0 < r["lat_p50_us"] <= r["lat_p99_us"]
        assert r["lat_p999_us"] is None or r["lat_p99_us"] <= r["lat_p999_us"]  # null with too few samples
        assert r["fio_version"].startswith("fio-3") and r["tool"] == "iobench"
    direct = {(r["mount"], r["profile"]) for r in recs if r["direct"] == 1}
    assert {p for _, p in direct} == {n for n, p in PROFILES.items() if p.options["direct"]}
    assert {m for m, _ in direct} == {loop, ceph}  # O_DIRECT really ran on both mounts
    assert len({r["run_id"] for r in recs}) == 1


def test_side_by_side_table_is_printed(compared):
    out = compared["proc"].stdout
    for needle in ("storage class", "I/O", "I/Os", "MB/s", "per-file", "fsyncs", "loop", "cephfs",
                   *compared["mounts"], *PROFILES):
        assert needle in out, needle
    # per profile the two mounts side by side, each named in one line of its cell (its full path under the tables),
    # then shard-write's and metadata's times to durable; within 100 columns in a pipe
    names = shown_mounts(out, compared["mounts"])
    mounts = [names[m] for m in compared["mounts"]]
    main, durable = compact_tables(out)
    assert [tuple(row[:2]) for row in main.rows] == [(m, p) for p in PROFILES for m in mounts], out
    assert [tuple(row[:2]) for row in durable.rows] == [(m, p) for p in ("shard-write", "metadata") for m in mounts]
    assert max(len(ln) for ln in out.splitlines() if ": " not in ln) <= 100, out


def test_nothing_left_in_either_mount(compared):
    assert compared["after"] == compared["before"]
