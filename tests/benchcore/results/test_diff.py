"""`diff`: changes beyond the threshold AND the run-to-run spread, one-sided rows, the exit status."""
import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from benchcore.results import diff, schema

ROOT = Path(__file__).resolve().parents[3]
FOREIGN = ROOT / "tests" / "fixtures" / "foreign"


def comm(run, size, time_us, **extra):
    return schema.measurement("commbench", run_id=run, collective="all_reduce", size_bytes=size, count=size // 4,
                              dtype="float32", op="sum", in_place=False, time_us=time_us, world_size=2, nodes=1,
                              env={"GLOO_SOCKET_IFNAME": "lo"}, busbw_gbps=size / time_us / 1e3, **extra)


def runs(side, shifts, noise=0.03, n=6, seed=1):
    """n runs (run ids side-0 ...) of all_reduce at each size with time 1000 us x shift x noise."""
    rng = random.Random(seed)
    return [comm(f"{side}-{i}", size, 1000 * shift * (1 + rng.uniform(-noise, noise)))
            for i in range(n) for size, shift in shifts.items()]


def test_twenty_percent_drop_is_flagged_two_percent_shift_in_three_percent_noise_is_not():
    base = runs("base", {1 << 20: 1.0, 4 << 20: 1.0}, seed=1)
    new = runs("new", {1 << 20: 1.02, 4 << 20: 1.25}, seed=2)   # 4M: busbw -20 % (time x 1.25)
    lines, only_base, only_new = diff.compare(base, new, 0.05)
    found = {ln.label.split()[1]: ln for ln in lines}
    assert found["4M"].significant and found["4M"].worse and found["4M"].basis == "t-test"
    assert found["4M"].ratio == pytest.approx(1.25, rel=0.03)
    assert not found["1M"].significant
    text = diff.text(lines, only_base, only_new, 0.05)
    assert "all_reduce 4M float32 sum out-of-place 2 ranks:" in text and "1.2" in text and "x slower" in text
    assert "95% interval of the ratio" in text
    assert "all_reduce 1M" not in text.split("summary")[0]        # not listed as a change
    assert "summary all_reduce: geometric mean" in text


def test_one_sided_rows_are_listed():
    base = runs("base", {1 << 20: 1.0}, n=3)
    new = runs("new", {1 << 20: 1.0, 16 << 20: 1.0}, n=3)
    lines, only_base, only_new = diff.compare(base, new, 0.05)
    assert len(lines) == 1 and [r["size_bytes"] for r in only_new] == [16 << 20] and only_base == []
    assert "only in new: all_reduce 16M float32 sum out-of-place 2 ranks" in diff.text(lines, only_base, only_new,
                                                                                        0.05)


def test_single_values_use_rank_ranges_else_threshold_only():
    overlap = diff.compare([comm("a", 1024, 100.0, time_us_min=90.0, time_us_max=130.0)],
                           [comm("b", 1024, 120.0, time_us_min=110.0, time_us_max=140.0)], 0.05)[0][0]
    assert overlap.basis == "rank range" and not overlap.significant      # 20 % but the ranges overlap
    apart = diff.compare([comm("a", 1024, 100.0, time_us_min=95.0, time_us_max=105.0)],
                         [comm("b", 1024, 120.0, time_us_min=115.0, time_us_max=125.0)], 0.05)[0][0]
    assert apart.basis == "rank range" and apart.significant and apart.worse
    bare = diff.compare([comm("a", 1024, 100.0)], [comm("b", 1024, 90.0)], 0.05)[0][0]
    assert bare.basis == "threshold" and bare.significant and not bare.worse
    assert "threshold only" in diff.text([bare], [], [], 0.05) and "1.11x faster" in diff.text([bare], [], [], 0.05)
    small = diff.compare([comm("a", 1024, 100.0)], [comm("b", 1024, 104.0)], 0.05)[0][0]
    assert not small.significant


def test_identity_ignores_interface_variables_but_not_configuration():
    a = comm("a", 1024, 100.0)
    b = comm("b", 1024, 100.0, sweep_config="NCCL_ALGO=Tree")
    c = dict(comm("c", 1024, 100.0), env={"GLOO_SOCKET_IFNAME": "eth0"})
    lines, only_base, only_new = diff.compare([a], [b, c], 0.05)
    assert len(lines) == 1 and len(only_new) == 1 and only_new[0]["sweep_config"] == "NCCL_ALGO=Tree"


def test_iobench_bandwidth_drop_is_slower():
    def io(run, bw):
        return schema.measurement("iobench", run_id=run, mount="/mnt", storage_class="nvme", profile="shard-write",
                                  rw="write", direction="write", bs_bytes=1 << 20, iodepth=1, numjobs=1, direct=0,
                                  bw_mbps=bw)
    lines, _, _ = diff.compare([io(f"a{i}", 1000 + i) for i in range(4)], [io(f"b{i}", 700 + i) for i in range(4)],
                               0.05)
    (ln,) = lines
    assert ln.significant and ln.worse and ln.speed == pytest.approx(1000 / 700, rel=0.01)
    assert "MB/s" in diff.text(lines, [], [], 0.05) and "slower" in diff.text(lines, [], [], 0.05)


def write(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def cli(*args):
    return subprocess.run([sys.executable, "-m", "commbench.commands.cli", "diff", *args], capture_output=True,
                          text=True, cwd=ROOT, timeout=120)


def test_cli_exit_status(tmp_path):
    base = write(tmp_path / "base.jsonl", runs("base", {4 << 20: 1.0}))
    slower = write(tmp_path / "new.jsonl", runs("new", {4 << 20: 1.25}, seed=3))
    done = cli(base, slower, "--threshold", "5%", "--fail-on-regression")
    assert done.returncode == 1 and "x slower" in done.stdout, done.stderr
    assert cli(base, slower).returncode == 0
    (tmp_path / "junk.txt").write_text("hello\n")
    bad = cli(base, str(tmp_path / "junk.txt"))
    assert bad.returncode == 2 and bad.stderr.startswith(f"error: {tmp_path / 'junk.txt'}: ")
    assert "Traceback" not in bad.stderr and len(bad.stderr.strip().splitlines()) == 1
    assert cli(base, slower, "--threshold", "lots").returncode == 2


def test_cli_mixes_records_and_nccl_tests_logs(tmp_path):
    """The same log as records on one side and as text on the other: nothing changed."""
    recs = [json.loads(line) for line in subprocess.run(
        [sys.executable, "-m", "commbench.commands.cli", "import", str(FOREIGN / "nccl-tests-2.13-tag-output.log")],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=True).stdout.splitlines()]
    done = cli(write(tmp_path / "r.jsonl", recs), str(FOREIGN / "nccl-tests-2.13-tag-output.log"))
    assert done.returncode == 0
    assert done.stdout.startswith("8 rows joined: 0 slower beyond noise, 0 faster, 8 within noise")
    assert "summary all_reduce: geometric mean unchanged over 8 rows" in done.stdout


def test_a_field_one_side_does_not_know_still_joins_when_unambiguous():
    known = comm("a", 1024, 100.0)
    unknown = dict(comm("b", 1024, 100.0), world_size=None, nodes=None)   # an old log without device lines
    lines, only_base, only_new = diff.compare([known], [unknown], 0.05)
    assert len(lines) == 1 and only_base == only_new == []
    two = [known, comm("c", 1024, 100.0, sweep_config="NCCL_ALGO=Tree")]
    lines, only_base, only_new = diff.compare(two, [dict(unknown, sweep_config=None)], 0.05)
    assert len(lines) == 1          # the default config joins exactly; the Tree config stays one-sided


@pytest.mark.parametrize("field,a,b", [("backend", "gloo", "mpi"), ("launcher", "torchrun", "emulated"),
                                       ("topology", "localhost", "dgx-h100"), ("world_size", 2, 4),
                                       ("nodes", 1, 2)])
def test_a_join_never_pools_records_that_differ_in_a_defining_field(field, a, b):
    """Gloo against Gloo + MPI at one identity used to pool: 3 vs 6 values, a 1.46x 'gain' that was MPI's."""
    base = [dict(comm(f"base-{i}", 1024, 100.0 + i), **{field: a}) for i in range(3)]
    new = ([dict(comm(f"new-{i}", 1024, 101.0 + i), **{field: a}) for i in range(3)]
           + [dict(comm(f"other-{i}", 1024, 40.0 + i), **{field: b}) for i in range(3)])
    lines, only_base, only_new = diff.compare(base, new, 0.05)
    assert [(len(ln.base), len(ln.new)) for ln in lines] == [(3, 3)] and not lines[0].significant
    assert only_base == [] and [r[field] for r in only_new] == [b]      # one row per identity
    if field in ("backend", "launcher", "topology"):
        assert f"only in new: all_reduce 1K float32 sum out-of-place 2 ranks ({field} {b})" in \
            diff.text(lines, only_base, only_new, 0.05)
