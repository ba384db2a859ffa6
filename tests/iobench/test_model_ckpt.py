"""`iobench model-ckpt`: model-shaped checkpoints (MLPerf Storage v2's layouts), per-rank aggregation, and the proof
that the storage moved the bytes (cache and memory never reported as storage throughput)."""
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from iobench import models, moved
from iobench.model_ckpt import aggregate
from iobench.moved import verdict
from tests.conftest import assert_one_line_error, read_records, run_tool

# Hand-computed from the shapes in mlcommons/storage configs/dlio/workload/llama3_*.yaml:
# llama3-8b layer = 2*4096^2 (q, o) + 2*4096*1024 (k, v: 8 kv heads x 128) + 3*4096*14336 (MLP) + 2*4096 (norms)
#                 = 218,112,000; x 32 layers = 6,979,584,000; embedding and head 2 x 128256 x 4096 = 1,050,673,152;
#                 final norm 4096 -> 8,030,261,248 parameters
P_8B = 8_030_261_248
# llama3-70b (MLPerf's shape: 128 heads, 8 kv heads -> k, v 8192 x 512): layer 847,265,792 x 80 + 2,101,346,304 + 8192
P_70B = 69_882_617_856
# llama3-405b stage 0 of 32 (126 layers: stages 0-29 hold 4, 30-31 hold 3): 4 x 3,187,703,808 + 2,101,346,304
# (embedding) = 14,852,161,536; the last stage: 3 x 3,187,703,808 + 2,101,346,304 (head) + 16384 (norm)
STAGE0_405B, LAST_405B = 14_852_161_536, 11_664_474_112


def sizes(layout, kind):
    return [s.nbytes for s in layout.shards if s.kind == kind]


def test_every_preset_matches_its_hand_computed_layout():
    l8 = models.layout("llama3-8b")
    assert models.MODELS["llama3-8b"].params() == P_8B
    assert (l8.tp, l8.pp, l8.dp, l8.zero, l8.ranks) == (1, 1, 8, 3, 8)
    assert sizes(l8, "model") == [P_8B * 2 // 8] * 8 == [2_007_565_312] * 8      # ZeRO-3: weights split over DP
    assert sizes(l8, "optim") == [P_8B * 12 // 8] * 8 == [12_045_391_872] * 8
    assert l8.total_bytes == P_8B * 14

    l70 = models.layout("llama3-70b")
    assert models.MODELS["llama3-70b"].params() == P_70B and l70.ranks == 64 and len(l70.shards) == 128
    assert set(sizes(l70, "model")) == {round(P_70B * 2 / 64)} and set(sizes(l70, "optim")) == {round(P_70B * 12 / 64)}

    l405 = models.layout("llama3-405b")
    assert (l405.tp, l405.pp, l405.dp, l405.zero, l405.ranks) == (8, 32, 2, 1, 512)
    model_files = [s for s in l405.shards if s.kind == "model"]
    assert len(model_files) == 256 and {s.rank % 2 for s in model_files} == {0}   # ZeRO-1: DP rank 0 writes weights
    assert model_files[0].nbytes == STAGE0_405B * 2 // 8 == 3_713_040_384
    assert model_files[-1].nbytes == LAST_405B * 2 // 8
    assert sizes(l405, "optim")[0] == STAGE0_405B * 12 // 16 == 11_139_121_152
    assert len(models.layout("llama3-1t").shards) == 8 * 64 + 1024

    # MLPerf Storage's README sizes (its GB are GiB): 105, 912, 5,290 -> within 3 %; the 1T shape gives 0.86 of 18 TB
    for name in ("llama3-8b", "llama3-70b", "llama3-405b"):
        assert models.layout(name).total_bytes == pytest.approx(models.MODELS[name].published_bytes, rel=0.03)
    one_t = models.layout("llama3-1t").total_bytes / models.MODELS["llama3-1t"].published_bytes
    assert one_t == pytest.approx(0.86, abs=0.01)


def test_scale_and_overrides():
    small = models.layout("llama3-70b", scale=0.001)
    assert small.total_bytes == pytest.approx(P_70B * 14 * 0.001, rel=1e-6)
    assert "llama3-70b at 1/1000 scale" in small.describe() and "978 MB" in small.describe()
    zero0 = models.layout("llama3-8b", dp=2, zero=0)
    assert [(s.rank, s.kind) for s in zero0.shards] == [(0, "model"), (0, "optim")]   # DP rank 1 holds a replica only
    with pytest.raises(Exception, match="--pp 200 leaves a stage"):
        models.layout("llama3-8b", pp=200)


def test_layout_size_and_scale_are_bounded_before_anything_is_built(tool, tmp_path):
    """A layout beyond MAX_RANKS ranks is refused before it is built (--tp 10**20 looped for ever, --tp 100000 --dp
    100000 grew past 1.1 GB); the full-scale size comes from the unscaled files, and a scale that leaves every
    file below a byte (each then clamped to one) is refused with the smallest useful one."""
    with pytest.raises(Exception, match="1,000,000,000,000,000,000,000 layout ranks; model-ckpt builds at most 65,536"):
        models.layout("llama3-8b", tp=10**20, dp=10)
    assert len(models.layout("llama3-8b", dp=models.MAX_RANKS).shards) == 2 * models.MAX_RANKS   # the largest allowed
    tiny = models.layout("llama3-8b", scale=1e-10)
    assert {s.nbytes for s in tiny.shards} == {1}
    assert tiny.full_bytes == P_8B * 14 == models.layout("llama3-8b").full_bytes
    with pytest.raises(Exception, match=r"--scale 1e-300 leaves every file .* smallest useful scale is 8.3e-11"):
        models.layout("llama3-8b", scale=1e-300)
    assert_one_line_error(tool("iobench", "model-ckpt", tmp_path, "--model", "llama3-8b", "--tp", "100000", "--dp",
                               "100000", "--dry-run", memory_limit=1 << 30), "model-ckpt builds at most 65,536")
    done = tool("iobench", "model-ckpt", tmp_path, "--model", "llama3-8b", "--scale", "1e-10", "--dry-run")
    assert done.returncode == 0 and f"at full scale {P_8B * 14 / (1 << 30):,.0f} GiB" in done.stderr, done.stderr


def test_aggregate_from_hand_made_start_and_end_times():
    """Two hosts, three ranks: the aggregate is all bytes over first start to last end, never a sum of rates."""
    ranks = [(10.0, 12.0, 200e6, "a"), (10.5, 11.5, 100e6, "a"), (11.0, 14.0, 300e6, "b")]
    got = aggregate(ranks)
    assert got["duration_s"] == 3.0 and got["span_s"] == 4.0
    assert got["aggregate_mbps"] == pytest.approx(600 / 4)      # the sum of rates would be 100 + 100 + 100 = 300
    assert got["min_rank_mbps"] == pytest.approx(100)
    assert got["per_host_mbps"] == pytest.approx({"a": 300 / 2, "b": 100})


def test_verdict_calls_a_cache_a_cache():
    assert verdict(100, 100) == ("storage", 1.0)
    assert verdict(50, 100) == ("cache", 0.5)
    assert verdict(None, 100) == ("unproven", None)
    assert verdict(100, 100, memory=True) == ("memory", None)


def test_bad_input_is_one_line(tool, tmp_path):
    assert_one_line_error(tool("iobench", "model-ckpt", tmp_path, "--model", "llama3-8b", "--scale", "2"),
                          "--scale must be above 0 and at most 1")
    assert_one_line_error(tool("iobench", "model-ckpt", tmp_path, "--model", "llama3-8b", "--ranks", "9"),
                          "--ranks 9 on 1 node(s) is more than the layout's 8 ranks")
    assert_one_line_error(tool("iobench", "model-ckpt", tmp_path, "--model", "llama3-8b", "--nodes", "2"),
                          "--nodes 2 needs --rdzv-endpoint HOST:PORT")
    assert_one_line_error(tool("iobench", "model-ckpt", tmp_path, "--model", "llama3-8b", "--nodes", "2",
                               "--rdzv-endpoint", "node0"), "--rdzv-endpoint 'node0' is not HOST:PORT")
    assert_one_line_error(tool("iobench", "model-ckpt", tmp_path, "--model", "llama3-405b"),   # 5.7 TB
                          "model-ckpt: a smaller --scale or fewer --writes")


@pytest.mark.slow
@pytest.mark.root
def test_storage_cache_and_memory_on_real_mounts(tool, loop_xfs, tmpfs, tmp_path):
    """On the loop XFS the device moves every byte of a write and of a read after the cache drop (storage); read
    again without the drop, the page cache serves it (moved x ~0: reported as cache, no bw_mbps); on tmpfs nothing
    is storage (memory)."""
    data, out = loop_xfs[0] / f"model-{tmp_path.name}", tmp_path / "r.jsonl"
    data.mkdir()
    common = ("--model", "llama3-8b", "--scale", "0.0002", "--writes", "2", "--reads", "2", "--out", out)
    try:
        done = tool("iobench", "model-ckpt", data, *common, timeout=300)
        assert done.returncode == 0, done.stderr
        write, read = read_records(out)
        assert (write["rw"], read["rw"]) == ("write", "read") and write["files"] == 16 and write["wrong"] == 0
        assert write["size_bytes"] == pytest.approx(P_8B * 14 * 0.0002, rel=0.01)
        for rec in (write, read):
            assert rec["served_by"] == "storage" and rec["bytes_moved_ratio"] >= 0.95 and rec["bw_mbps"] > 0
            assert rec["bw_mbps_min"] <= rec["bw_mbps"] <= rec["bw_mbps_max"] and rec["min_rank_mbps"] > 0
        done = tool("iobench", "model-ckpt", data, *common[:-2], "--no-drop", "--out", out, timeout=300)
        cached = read_records(out)[-1]
        assert cached["served_by"] == "cache" and cached["bytes_moved_ratio"] < 0.5 and cached["bw_mbps"] is None
        assert cached["cache_mbps"] > 0 and "no storage throughput" in done.stdout
    finally:
        shutil.rmtree(data)
    mem = tmpfs("mem", size="128M")   # and torch.distributed.checkpoint: a file per rank, fio's likewise
    done = tool("iobench", "model-ckpt", mem, *common[:-2], "--writes", "1", "--reads", "1", "--ckpt-format", "dcp",
                "--out", out, timeout=300)
    assert done.returncode == 0, done.stderr
    dcp = read_records(out)[-2:]
    assert {r["served_by"] for r in dcp} == {"memory"} and all(r["bw_mbps"] is None for r in dcp)
    assert {(r["profile"], r["ckpt_format"], r["files"], r["wrong"]) for r in dcp} == {("llama3-8b-dcp", "dcp", 2, 0)}
    assert all(r["fio_bw_mbps"] > 0 for r in dcp)
    # memory's MB/s hidden, and so is its ratio to fio's (issue 49 item 8: '1.02 x fio' of two memory figures)
    cells = [[c.strip() for c in line.split("│")] for line in done.stdout.splitlines() if line.startswith("│ ")]
    assert [(c[5], c[7], c[8]) for c in cells if c[1] in ("write", "read")] == [("(memory)", "n/a", "n/a")] * 2
    assert "x fio: n/a (both figures are of memory, not storage)" in done.stdout


CACHED = """\
checks:
  - name: cached
    kind: checkpoint
    mount: {mount}
    model: llama3-8b
    scale: 0.0002
    ranks: 2
    writes: 1
    reads: 1
    no_drop: true          # the read finds the checkpoint in the page cache
    thresholds:
      - wrong == 0
      - llama3-8b-ckpt min_rank_mbps >= 1
"""


@pytest.mark.slow
@pytest.mark.host_mount
def test_a_checkpoint_check_fails_a_read_the_cache_served(tmp_path):
    """The check kind end to end: the write passes, the cache-served read has no storage figure, so the check fails
    naming it (acceptance/localhost.yaml's checkpoint-model check is the passing case)."""
    spec = tmp_path / "spec.yaml"
    spec.write_text(CACHED.format(mount=tmp_path))
    # host_mount: locked
    done = run_tool("commbench", "accept", "--spec", spec, "--out", tmp_path / "out", timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "FAIL cached" in done.stdout + done.stderr
    recs = [r for r in read_records(tmp_path / "out" / "results.jsonl") if r.get("model")]
    assert [(r["rw"], r["served_by"]) for r in recs] == [("write", "storage"), ("read", "cache")]
    assert "min_rank_mbps is null" in (tmp_path / "out" / "junit.xml").read_text()


def test_nfs_counter_reads_the_clients_bytes_to_and_from_the_server(monkeypatch):
    """This kernel has no NFS client (no nfs in /proc/filesystems), so the counter reads a captured
    /proc/self/mountstats: tests/fixtures/nfs/mountstats, two NFS mounts' lines from influxdata/telegraf's
    plugins/inputs/nfsclient/testdata/mountstats (an NFSv3 and an NFSv4 client, as their kernels printed them).
    `bytes:` fields 5 and 6 are what went over the wire (server read, server write), not what the page cache served
    (fields 1-4)."""
    monkeypatch.setattr(moved, "MOUNTSTATS", Path(__file__).parent.parent / "fixtures" / "nfs" / "mountstats")
    v3 = moved.nfs(SimpleNamespace(mount_point="/NFS"))
    assert v3() == (1134399088816, 407107155723)
    assert moved.nfs(SimpleNamespace(mount_point="/mnt"))() == (627536112, 0)      # NFSv4, options over 3 lines
    assert moved.nfs(SimpleNamespace(mount_point="/elsewhere")) is None


OSC_STATS = """snapshot_time             1716301234.123456789 secs.nsecs
req_waittime              412 samples [usec] 61 20351 1230875 12097436735
read_bytes                38 samples [bytes] 4096 1048576 {read}
write_bytes               21 samples [bytes] 65536 1048576 {write}
ost_read                  38 samples [usec] 152 41286 702319 41853106347
"""


def test_lustre_counter_sums_the_mounts_oscs(monkeypatch, tmp_path):
    """This kernel has no Lustre client, so `lfs getname` and the OSC stats files are stand-ins in the form the
    Lustre Operations Manual gives (lprocfs stats: NAME COUNT samples [UNIT] MIN MAX SUM): the bytes of this
    mount's client instance's OSCs only, another client's (another mount of the same file system) left out."""
    lfs = tmp_path / "bin" / "lfs"
    lfs.parent.mkdir()
    lfs.write_text("#!/bin/sh\necho 'scratch-ffff8d2c4f6e5000 /lus'\n")
    lfs.chmod(0o755)
    monkeypatch.setenv("PATH", f"{lfs.parent}:{os.environ['PATH']}")
    root = tmp_path / "lustre"
    for name, read, write in (("scratch-OST0000-osc-ffff8d2c4f6e5000", 1000, 30),
                              ("scratch-OST0001-osc-ffff8d2c4f6e5000", 2000, 40),
                              ("scratch-OST0000-osc-ffff9aaa00000000", 10 ** 9, 10 ** 9)):   # another mount's
        (root / "osc" / name).mkdir(parents=True)
        (root / "osc" / name / "stats").write_text(OSC_STATS.format(read=read, write=write))
    monkeypatch.setattr(moved, "LUSTRE_ROOTS", (root,))
    assert moved.lustre(SimpleNamespace(mount_point="/lus"))() == (3000, 70)
