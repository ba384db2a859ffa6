"""`diff` as a table (issue 39 item 5): the summary line first, rows by collective, size and placement with old and
new time and busbw and their change in %, numbers as a person reads them, --metric, and a comparison that joins
nothing is a failure (exit 2); iobench joins on the storage (device, fs type, class) and options, not the directory."""
import json
import random

from benchcore.results import diff, schema
from tests.conftest import run_tool

SIZES = (1 << 20, 64 << 20)


def comm(run, collective, size, in_place, time_us, **extra):
    """A record as `commbench run` writes it (2 ranks on 1 node; busbw of all_reduce: 2(n-1)/n x algbw)."""
    algbw = size / time_us / 1e3
    fields = dict(dtype="float32", op="sum", world_size=2, nodes=1, backend="gloo", launcher="local", emulated=False,
                  algbw_gbps=algbw, busbw_gbps=algbw)
    return schema.measurement("commbench", run_id=run, collective=collective, size_bytes=size, count=size // 4,
                              in_place=in_place, time_us=time_us, **dict(fields, **extra))


def side(name, shifts, n=5, seed=1, noise=0.02, **extra):
    """n runs of all_gather and all_reduce at SIZES, out- and in-place, written in a shuffled order; time 45,240 us
    x shift[(collective, size)] x noise."""
    rng = random.Random(seed)
    recs = [comm(f"{name}-{i}", coll, size, place, 45240.0 * shifts.get((coll, size), 1.0) *
                 (1 + rng.uniform(-noise, noise)), **extra)
            for i in range(n) for coll in ("all_reduce", "all_gather") for size in SIZES for place in (True, False)]
    rng.shuffle(recs)
    return recs


def rows_of(text):
    """The table's data rows, each split on runs of two or more spaces."""
    lines = text.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith("---")) + 1
    end = lines.index("", start)
    return [[c for c in ln.split("  ") if c.strip()] for ln in lines[start:end]], lines[start - 2]


def test_the_summary_line_comes_first_and_rows_come_by_collective_size_and_placement():
    base = side("base", {})
    new = side("new", {("all_reduce", 64 << 20): 1.25, ("all_gather", 1 << 20): 0.8}, seed=2)
    lines, only_base, only_new = diff.compare(base, new, 0.05)
    text = diff.text(lines, only_base, only_new, 0.05)
    assert text.splitlines()[0] == ("8 rows joined: 2 slower beyond noise, 2 faster, 4 within noise "
                                    "(time: beyond 5% and the run-to-run spread)")
    rows, header = rows_of(text)
    assert header.split() == ["collective", "size", "place", "config", "old", "time", "new", "time", "time", "old",
                              "busbw", "new", "busbw", "busbw", "verdict", "(time)"]
    assert [(r[0].strip(), r[1].strip(), r[2].strip()) for r in rows] == [
        (coll, size, place) for coll in ("all_gather", "all_reduce") for size in ("1M", "64M")
        for place in ("out", "in")]
    assert [r[-1].strip() for r in rows] == ["faster"] * 2 + ["within noise"] * 4 + ["slower"] * 2
    slower = [c.strip() for c in rows[-1]]
    assert slower[3] == "float32 sum 2 ranks"
    old_time, new_time = (float(c.split()[0]) for c in slower[4:6])
    assert slower[4].endswith(" ms") and 44.0 < old_time < 46.5 and 55.0 < new_time < 58.0   # 45.24 ms, not 4.524e+04
    assert slower[6].startswith("+2") and slower[6].endswith("%")          # time up about 25 %
    assert slower[7].endswith(" GB/s") and slower[9].startswith("-") and slower[9].endswith("%")   # busbw down
    assert "e+" not in text and "e-0" not in text


def test_metric_picks_what_is_judged():
    """time the same, P99 30 % up: --metric time says within noise, --metric p99 slower; busbw judges bandwidth
    (down is slower)."""
    base = [dict(r, time_us_p99=r["time_us"] * 1.1) for r in side("base", {})]
    new = [dict(r, time_us_p99=r["time_us"] * 1.43) for r in side("new", {}, seed=2)]
    by_time = diff.compare(base, new, 0.05)[0]
    by_p99 = diff.compare(base, new, 0.05, "p99")[0]
    assert {diff.verdict(ln) for ln in by_time} == {"within noise"}
    assert {diff.verdict(ln) for ln in by_p99} == {"slower"} and {ln.metric for ln in by_p99} == {"time_us_p99"}
    text = diff.text(by_p99, [], [], 0.05)
    assert text.startswith("8 rows joined: 8 slower beyond noise, 0 faster, 0 within noise (p99: ")
    assert rows_of(text)[1].split()[:8] == ["collective", "size", "place", "config", "old", "p99", "new", "p99"]
    slow_bw = [dict(r, busbw_gbps=r["busbw_gbps"] * 0.7) for r in side("new", {}, seed=2)]
    by_busbw = diff.compare(base, slow_bw, 0.05, "busbw")[0]
    assert {diff.verdict(ln) for ln in by_busbw} == {"slower"} and by_busbw[0].speed > 1.3


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_cli_metric_and_a_diff_that_joins_nothing_fails(tmp_path):
    base = write(tmp_path / "base.jsonl", side("base", {}))
    new = write(tmp_path / "new.jsonl", [dict(r, busbw_gbps=r["busbw_gbps"] / 2) for r in side("new", {}, seed=2)])
    done = run_tool("commbench", "diff", base, new, "--metric", "busbw", "--fail-on-regression", timeout=120)
    assert done.returncode == 1 and done.stdout.startswith("8 rows joined: 8 slower beyond noise"), done.stdout
    assert "verdict (busbw)" in done.stdout
    mpi = write(tmp_path / "mpi.jsonl", side("mpi", {}, backend="mpi"))
    done = run_tool("commbench", "diff", base, mpi, timeout=120)
    assert done.returncode == 2 and done.stdout.startswith("0 rows joined: nothing compared; 8 missing in new, "
                                                           "8 only in new"), done.stdout
    assert done.stderr == f"error: no row of {mpi} joins one of {base}: nothing was compared (8 rows only in the " \
                          "baseline, 8 only in new)\n"
    assert "no difference" not in done.stdout
    bad = run_tool("commbench", "diff", base, new, "--metric", "MB/s", timeout=120)
    assert bad.returncode == 2 and "--metric" in bad.stderr and "Traceback" not in bad.stderr


def io(run, directory, bw, device="/dev/nvme0n1", **extra):
    """A record as `iobench ckpt DIR` writes it (fields of iobench/bench.py's record)."""
    return schema.measurement("iobench", run_id=run, mount=directory, fs_type="xfs", storage_class="local-nvme",
                              device=device, mount_point="/data", profile="shard-write", rw="write",
                              direction="write", bs_bytes=1 << 20, iodepth=1, numjobs=4, direct=0, size_bytes=1 << 30,
                              ioengine="psync", bw_mbps=bw, lat_p99_us=8000.0 * 1000 / bw, **extra)


def test_iobench_joins_two_directories_on_one_disk_and_never_two_disks(tmp_path):
    base = write(tmp_path / "a.jsonl", [io(f"a{i}", "/data/run-a", 1000.0 + i) for i in range(4)])
    moved = write(tmp_path / "b.jsonl", [io(f"b{i}", "/data/run-b", 700.0 + i) for i in range(4)])
    done = run_tool("iobench", "diff", base, moved, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.startswith("1 rows joined: 1 slower beyond noise, 0 faster, 0 within noise (MB/s: ")
    rows, header = rows_of(done.stdout)
    assert header.split()[:4] == ["profile", "dir", "bs", "config"]
    assert [c.strip() for c in rows[0][4:7]] == ["1,001 MB/s", "701.5 MB/s", "-30.0%"]
    other = write(tmp_path / "c.jsonl", [io(f"c{i}", "/data/run-a", 990.0 + i, device="/dev/sdb") for i in range(4)])
    done = run_tool("iobench", "diff", base, other, timeout=120)
    assert done.returncode == 2 and "the sides differ in device (/dev/nvme0n1 vs /dev/sdb)" in done.stdout
