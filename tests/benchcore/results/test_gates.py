"""Gates never pass on bad numbers; numbers from users are finite or refused; JSON out never holds NaN/Infinity;
reports are bounded, keep what they wrote and never collide; records read back never end in a traceback."""
import json
import os
import subprocess

import pytest

from benchcore.errors import UserError
from benchcore.results import schema, thresholds
from tests.conftest import assert_one_line_error, run_tool

GIB = 1 << 30
SIZES = (1024, 4096, 16384)
FLAWS = {"NaN": float("nan"), "0": 0, "-1": -1, "null": None, "missing row": "missing"}


def comm(size, time_us, run="r", **extra):
    return schema.measurement("commbench", run_id=run, collective="all_reduce", size_bytes=size, count=size // 4,
                              dtype="float32", op="sum", in_place=False, time_us=time_us, world_size=2, nodes=1,
                              backend="gloo", algbw_gbps=size / time_us / 1e3, busbw_gbps=size / time_us / 1e3,
                              **extra)


def flawed(flaw, **extra):
    """The three sizes, the 4K row's time_us replaced by the flaw (or the row left out)."""
    out = []
    for size in SIZES:
        rec = comm(size, 100.0 + size / 100, **extra)
        if size == 4096:
            if FLAWS[flaw] == "missing":
                continue
            rec["time_us"] = FLAWS[flaw]
        out.append(rec)
    return out


def write(path, recs):
    """JSON lines as another tool might write them (json.dumps writes NaN for a NaN)."""
    path.write_text("".join(json.dumps(r) + "\n" for r in recs))
    return path


@pytest.mark.parametrize("flaw", FLAWS)
def test_a_value_that_is_not_a_finite_positive_number_fails_the_gate(tmp_path, flaw):
    """diff --fail-on-regression, an accept threshold (absolute and regression) and report --baseline: the 4K row
    whose time is NaN, 0, -1, null or that is missing fails, named; it never passes and never vanishes."""
    base = write(tmp_path / "base.jsonl", [comm(s, 100.0 + s / 100) for s in SIZES])
    new = write(tmp_path / "new.jsonl", flawed(flaw))
    done = run_tool("commbench", "diff", base, new, "--fail-on-regression", memory_limit=GIB, timeout=60)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stdout + done.stderr
    named = "missing in new: all_reduce 4K" if flaw == "missing row" else "all_reduce 4K float32 sum out-of-place " \
                                                                         "2 ranks: no usable value: new time_us is"
    assert named in done.stdout and "failing rows: 1 of 3 baseline rows" in done.stdout, done.stdout

    if flaw != "missing row":
        outcome = thresholds.judge(thresholds.parse("time_us <= 1e6", "commbench"), flawed(flaw))
        assert not outcome.passed and "measured time_us is" in outcome.message and "at 4K" in outcome.message
    checked = [dict(r, accept_check="steady") for r in flawed(flaw)]
    baseline = [comm(s, 100.0 + s / 100, accept_check="steady") for s in SIZES]
    regression = thresholds.judge(thresholds.parse("no regression > 5 % vs baseline", "commbench"), checked, baseline)
    assert not regression.passed and not regression.skipped and "all_reduce 4K" in regression.message

    out = tmp_path / "rep"
    done = run_tool("commbench", "report", new, "--baseline", base, "--out", out, memory_limit=2 * GIB, timeout=120)
    assert done.returncode == 0, done.stderr
    md = (out / "report.md").read_text()
    note = ("missing: 1 baseline rows have no partner in the results: all_reduce 4K" if flaw == "missing row" else
            "not usable: 1 measurements of the results have a metric that is not a finite positive number: "
            "all_reduce 4K")
    assert note in md, md


@pytest.mark.parametrize("tool, args, needle", [
    ("commbench", ["run", "-T", "nan"], "--timeout must be a finite number"),
    ("commbench", ["run", "--hang-timeout", "1e999"], "--hang-timeout must be a finite number"),
    ("commbench", ["pairs", "--min-fraction", "nan"], "--min-fraction must be a finite number"),
    ("commbench", ["sweep", "--per-config-timeout", "inf"], "--per-config-timeout must be a finite number"),
    ("commbench", ["selftest", "link", "--timeout", "-inf"], "--timeout must be a finite number"),
    ("commbench", ["diff", "a", "b", "--threshold", "nan"], "--threshold 'nan' must be a finite number"),
    ("iobench", ["diff", "a", "b", "--threshold", "1e999%"], "--threshold '1e999%' must be a finite number"),
    ("commbench", ["model", "--topology", "{inf}"], "field intra_node.per_gpu_gbps: expected a GB/s in 0.001..100000"),
    ("commbench", ["model", "--topology", "localhost", "--nproc-per-node", "1"], "one rank moves no data"),
])
def test_a_number_from_a_user_that_is_not_finite_is_refused_in_one_line(tmp_path, tool, args, needle):
    """Every float option of both tools, thresholds and topology fields: nan, inf, 1e999 refused before anything
    runs (click's float takes them)."""
    topo = (tmp_path / "inf.yaml")
    topo.write_text("name: inf\ngpus_per_node: 8\nintra_node: {fabric: nvswitch, per_gpu_gbps: .inf, latency_us: 1}\n"
                    "inter_node: {nics_per_node: 8, per_nic_gbps: 50, latency_us: 5, rank_to_nic: rail}\n")
    done = run_tool(tool, *[str(topo) if a == "{inf}" else a for a in args], memory_limit=GIB, timeout=60)
    assert_one_line_error(done, needle)
    assert done.returncode == 2


def test_thresholds_and_json_output_hold_only_finite_numbers():
    for text, needle in (("time_us <= 1e999", "must be a finite number"),
                         ("busbw >= 1e400 x link peak", "must be a finite number"),
                         ("no regression > 5000 % vs baseline", "the percentage must be <= 999")):
        with pytest.raises(UserError, match=needle):
            thresholds.parse(text, "commbench")
    done = run_tool("commbench", "model", "--topology", "localhost", "--format", "json", "-b", "1", "-e", "1G",
                    memory_limit=GIB, timeout=60)
    assert done.returncode == 0 and done.stdout.count("\n") == 31, done.stderr
    for line in done.stdout.splitlines():
        json.loads(line, parse_constant=lambda c: pytest.fail(f"{c} in {line}"))


def test_records_read_back_with_wrong_types_or_numbers_never_end_in_a_traceback(tmp_path):
    """diff, report and model --fit over records with a string size, a list env, a list collective, an infinite
    busbw, a string time, no backend, and times of 1e308 and 1e-308 us: warnings or one error line, no traceback."""
    good = [comm(s, 100.0 + s / 100) for s in SIZES]
    bad = [dict(comm(2048, 50.0), size_bytes="2K"), dict(comm(2048, 50.0), env=["NCCL_ALGO=Ring"]),
           dict(comm(2048, 50.0), collective=["all_reduce"]), dict(comm(2048, 50.0), busbw_gbps=float("inf")),
           dict(comm(8192, 60.0), time_us="60"), dict(comm(32768, 70.0), backend=None),
           dict(comm(65536, 1e308)), dict(comm(131072, 1e-308))]
    base = write(tmp_path / "base.jsonl", good)
    mixed = write(tmp_path / "mixed.jsonl", good + bad)
    for args in (["diff", base, mixed, "--fail-on-regression"], ["diff", mixed, base],
                 ["report", mixed, "--baseline", mixed, "--out", tmp_path / "rep"],
                 ["model", "--topology", "localhost", "--fit", mixed, "--format", "json"]):
        done = run_tool("commbench", *args, memory_limit=2 * GIB, timeout=120)
        assert "Traceback" not in done.stderr and done.returncode in (0, 1, 2), done.stderr
        lines = done.stderr.splitlines()
        assert all(ln.startswith(("warning: ", "error: ", "wrote ")) for ln in lines), done.stderr
        assert "size_bytes is '2K', not a whole number of bytes" in done.stderr, done.stderr
        if args[0] == "model":
            assert "backend is None, not nccl or gloo" in done.stderr and "time_us 1e+308 is not" in done.stderr
            assert "Infinity" not in done.stdout and "NaN" not in done.stdout
    assert sorted(p.name for p in (tmp_path / "rep").glob("*.png")) == ["busbw-all-reduce.png"]


def test_plot_names_never_collide(tmp_path):
    recs = [dict(comm(s, 100.0), collective=name) for name in ("x_y", "X-Y", "x y") for s in SIZES]
    done = run_tool("commbench", "report", write(tmp_path / "r.jsonl", recs), "--out", tmp_path / "rep",
                    memory_limit=2 * GIB, timeout=120)
    assert done.returncode == 0, done.stderr
    pngs = sorted(p.name for p in (tmp_path / "rep").glob("*.png"))
    assert pngs == ["busbw-x-y-2.png", "busbw-x-y-3.png", "busbw-x-y.png"]
    md = (tmp_path / "rep" / "report.md").read_text()
    assert all(f"]({name})" in md for name in pngs)


@pytest.mark.slow
def test_a_report_of_10000_records_in_1000_groups_is_bounded(tmp_path):
    """At most 12 plots, the rest said to be in the tables; diff and report --baseline join 10,000 rows against
    10,000 others in seconds (it was 1,000 plots in minutes, and a diff past 5 minutes)."""
    recs = [dict(comm(1024 << i, 10.0 + (1024 << i) / 1e3), collective=f"coll_{g}")
            for g in range(1000) for i in range(10)]
    path = write(tmp_path / "r.jsonl", recs)
    other = write(tmp_path / "o.jsonl", [dict(r, collective="other" + r["collective"]) for r in recs])
    # each in seconds; minutes when unbounded: the timeouts
    done = run_tool("commbench", "diff", other, path, "--fail-on-regression", memory_limit=4 * GIB, timeout=120)
    assert done.returncode == 2 and "failing rows: 10000 of 10000 baseline rows (10000 missing in new)" in done.stdout
    assert done.stdout.startswith("0 rows joined: nothing compared; 10000 missing in new, 10000 only in new")
    done = run_tool("commbench", "report", path, "--baseline", other, "--out", tmp_path / "rep", memory_limit=4 * GIB,
                    timeout=120)
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "rep").glob("*.png"))) == 12
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "plots: 12 of 1000 collective/strategy groups" in md and "the other 988 are in the tables only" in md
    assert md.count("\n## commbench: ") == 1000 and "missing: 10000 baseline rows have no partner" in md


@pytest.mark.root
@pytest.mark.slow
@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a tmpfs")
@pytest.mark.parametrize("size_kb, filler_kb, out, kept", [
    # the first plot (~100 KB since its linear large-message panel, a882e86) fits, the second does not: it stays
    (160, 0, "rep", ["busbw-all-reduce.png"]),
    (32, 28, "rep", None),                         # nothing fits: the directory it made is removed
    (32, 28, "mine", []),                          # nothing fits: the directory the user made stays
])
def test_a_report_that_cannot_write_names_the_file_and_keeps_the_rest(tmp_path, size_kb, filler_kb, out, kept):
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    recs = [dict(comm(s, 100.0 + s / 100), collective=name) for name in ("all_reduce", "all_gather") for s in SIZES]
    path = write(tmp_path / "r.jsonl", recs)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_kb}k", "tmpfs", str(mnt)], check=True)
    try:
        if filler_kb:
            (mnt / "filler").write_bytes(b"x" * (filler_kb << 10))
        if kept == []:
            (mnt / out).mkdir()
        done = run_tool("commbench", "report", path, "--out", mnt / out, memory_limit=2 * GIB, timeout=120)
        assert_one_line_error(done, f"cannot write {mnt / out}/busbw-")
        assert "No space left on device; the files written before it are kept" in done.stderr
        if kept is None:
            assert not (mnt / out).exists()
        else:
            assert sorted(p.name for p in (mnt / out).iterdir()) == kept
    finally:
        subprocess.run(["umount", str(mnt)], check=True)
