"""`import`: nccl-tests/rccl-tests logs of every generation and fio JSON of every version into records.

The logs are rendered by tests/fixtures/foreign/make_nccl_logs.py from each version's printf formats; fio 3.33
output is captured from real fio (capture_fio.py); fio 2.1.10, 2.20 and 3.1 documents are built from their
stat.c JSON writers. Numbers are checked exactly as the logs print them.
"""
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchcore.errors import UserError
from benchcore.results import read, schema
from iobench.fio import measurements, parse_output

FOREIGN = Path(__file__).resolve().parents[2] / "fixtures" / "foreign"
ROOT = Path(__file__).resolve().parents[3]


def load(name):
    return read.load(str(FOREIGN / name)).records


def rows(records):
    return [(r["size_bytes"], r["in_place"], r["time_us"], r["algbw_gbps"], r["busbw_gbps"])
            for r in records if not r.get("event")]


def events(records):
    return [(r["event"], r["reason"]) for r in records if r.get("event")]


def test_every_record_follows_the_schema():
    for path in sorted(FOREIGN.iterdir()):
        if path.suffix in (".log", ".md", ".json", ".csv"):
            for rec in read.load(str(path)).records:
                assert schema.problems(rec) == [], (path.name, rec)
                assert rec["source_file"] == str(path) and rec["source_format"] in \
                    ("nccl-tests", "nccl-tests-json", "rccl-tests-json", "rccl-tests-csv", "fio-json")


def test_nccl_tests_1x_times_in_ms_and_res_column():
    recs = load("nccl-tests-1.x.log")
    assert rows(recs) == [(8, False, 34.0, 0.0, 0.0), (8, True, 33.0, 0.0, 0.0),
                          (1048576, False, 123.0, 8.53, 14.92), (1048576, True, 121.0, 8.67, 15.17),
                          (33554432, False, 2456.0, 13.66, 23.91), (33554432, True, 2449.0, 13.70, 23.98)]
    r = recs[2]
    assert (r["collective"], r["dtype"], r["op"], r["count"]) == ("all_reduce", "float32", "sum", 262144)
    assert r["wrong"] is None and r["check_error"] == 2e-07          # max abs error, not a count
    assert (r["world_size"], r["nodes"], r["hosts"]) == (2, 2, ["dgx1", "dgx2"])
    assert (r["iters"], r["warmup"], r["source_line"]) == (20, 5, 11)
    assert events(recs) == []                                        # footer without '#' and without unit


def test_nccl_tests_2_0_error_column_without_redop_root():
    recs = load("nccl-tests-2.0-all_gather.log")
    assert rows(recs)[0] == (0, False, 4.51, 0.0, 0.0)                # zero-byte row
    assert rows(recs)[4:] == [(16777216, False, 1210.0, 13.87, 10.40), (16777216, True, 1198.0, 14.0, 10.5)]
    r = recs[4]
    assert (r["collective"], r["op"], r["count"], r["check_error"], r["wrong"]) == \
        ("all_gather", None, 4194304, 0.0, None)                     # count: elements of the whole array
    assert (r["world_size"], r["nodes"], r["hosts"]) == (4, 2, ["node01", "node02"])
    assert r["env"] == {"NCCL_SOCKET_IFNAME": "ib0"} and r["versions"] == {"nccl": "2.4.8+cuda10.1"}
    assert r["source_line"] == 19                                    # an NCCL INFO line came before it


def test_nccl_tests_2_9_root_column_and_failed_footer():
    recs = load("nccl-tests-2.9-broadcast.log")
    assert rows(recs) == [(1024, False, 12.61, 0.08, 0.08), (1024, True, 12.4, 0.08, 0.08),
                          (4194304, False, 402.3, 10.43, 10.43), (4194304, True, 399.8, 10.49, 10.49)]
    assert {r["root"] for r in recs if not r.get("event")} == {0}
    assert recs[2]["check_error"] == 3.0
    assert events(recs) == [("failed", "nccl-tests: Out of bounds values : 1 FAILED (broadcast)")]


def test_nccl_tests_2_13_tag_output_info_inside_a_row_overflow():
    recs = load("nccl-tests-2.13-tag-output.log")
    assert rows(recs) == [(0, False, 5.12, 0.0, 0.0), (0, True, 5.03, 0.0, 0.0),
                          (1048576, False, 25.31, 41.43, 72.5), (1048576, True, 24.97, 41.99, 73.49),
                          (268435456, False, 1160.0, 231.41, 404.97), (268435456, True, 1158.0, 231.81, 405.67),
                          (8589934592, False, 18411.0, 466.56, 1816.45), (8589934592, True, 18380.0, 467.35, 1817.87)]
    r = recs[-1]
    assert (r["wrong"], r["op"], r["count"], r["world_size"], r["nodes"]) == (0, "sum", 2147483648, 16, 2)
    assert r["env"] == {"NCCL_IB_HCA": "mlx5"} and r["versions"] == {"nccl": "2.18.3+cuda12.2"}
    assert recs[4]["source_line"] == 30                              # the row NCCL's INFO line interrupted
    assert events(recs) == []


def test_latest_format_in_markdown():
    recs = load("nccl-tests-latest.md")
    assert rows(recs) == [(8, False, 30.12, 0.0, 0.0), (8, True, 29.87, 0.0, 0.0),
                          (1073741824, False, 123457.0, 8697.5, 8153.9), (1073741824, True, 123400.0, 8701.5, 8157.6),
                          (2147483648, True, 246000.0, 8729.6, 8184.0)]  # no out-of-place half: not a record
    assert {r["wrong"] for r in recs} == {None}                       # -c 0: N/A
    assert {(r["collective"], r["world_size"], r["nodes"]) for r in recs} == {("all_to_all", 8, 1)}
    assert recs[0]["versions"] == {"nccl-tests": "2.17.6"}


def test_rccl_tests_in_place_only_two_cycles():
    recs = load("rccl-tests.log")
    assert [(r["size_bytes"], r["in_place"], r["time_us"], r["cycle"]) for r in recs] == \
        [(1024, True, 20.5, 0), (1048576, True, 61.3, 0), (1024, True, 21.0, 1), (1048576, True, 60.9, 1)]
    assert recs[0]["versions"] == {"rccl-tests": "develop:3f2a1b9", "rccl": "2.18.3+hip6.1"}
    assert recs[0]["hosts"] == ["mi300-01"] and recs[0]["world_size"] == 2
    assert recs[1]["busbw_gbps"] == 17.11


def test_truncated_log_keeps_complete_rows_and_says_why():
    recs = load("nccl-tests-truncated.log")
    assert [r[0] for r in rows(recs)] == [0, 0, 1048576, 1048576, 268435456, 268435456]  # not the cut 8G row
    ((kind, reason),) = events(recs)
    assert kind == "truncated"
    assert "row cut mid-way at line 37" in reason and "NCCL WARN NET/IB : Got completion" in reason
    event = recs[-1]
    assert (event["collective"], event["source_line"], event["hosts"]) == ("all_reduce", 37, ["h100-00", "h100-01"])


def test_hung_log_collective_from_file_name_no_reason():
    recs = load("nccl-tests-hung-all_gather_perf.log")
    assert len(rows(recs)) == 6 and recs[0]["collective"] == "all_gather"
    assert events(recs) == [("truncated", "all_gather table ends after 3 complete row(s) without nccl-tests' footer; "
                                          "the log shows no reason")]


def test_log_that_never_printed_a_table():
    ((kind, reason),) = events(load("nccl-tests-init-failure.log"))
    assert kind == "truncated" and "NCCL WARN Duplicate GPU detected" in reason


@pytest.mark.parametrize("name,io_bytes,bw_mbps,iops,lat,p50,p99,p999,samples,opts", [
    # 2.1.10: io_bytes KiB, bw KiB/s, usec, no total_ios, no job options (kept unknown, not fio's defaults)
    ("fio-2.1.10.json", 1 << 30, 209715 * 1024 / 1e6, 204, 4870.25, 4768, 9024, 20992, None,
     (None, None, None, None, None)),
    # 2.20: job options, total_ios, iops float, still KiB and usec
    ("fio-2.20.json", 256 << 20, 87381 * 1024 / 1e6, 21845.333333, 1460.5, 1352, 3568, 7712, 65536,
     ("randwrite", 4096, 32, 1, "/mnt/ckpt")),
    # 3.1: ns latencies, io_bytes in bytes, no bw_bytes (the KeyError of issue 13)
    ("fio-3.1.json", 1 << 30, 524288 * 1024 / 1e6, 512.0, 1948.1235, 1908.736, 3522.56, 5537.792, 1024,
     ("read", 1 << 20, 1, 0, "/lustre/ckpt")),
])
def test_old_fio_versions_convert_by_version(name, io_bytes, bw_mbps, iops, lat, p50, p99, p999, samples, opts):
    (r,) = load(name)
    assert r["io_bytes"] == io_bytes and r["bw_mbps"] == pytest.approx(bw_mbps, rel=1e-12)
    assert r["iops"] == iops and r["lat_kind"] == "clat" and r["lat_samples"] == samples
    assert (r["lat_mean_us"], r["lat_p50_us"], r["lat_p99_us"], r["lat_p999_us"]) == \
        pytest.approx((lat, p50, p99, p999), rel=1e-12)
    assert (r["rw"], r["bs_bytes"], r["iodepth"], r["direct"], r["mount"]) == opts
    # iobench's own parser is the same code: iobench run on that fio version reads it too
    (m,) = measurements(parse_output((FOREIGN / name).read_text()))
    assert m["bw_mbps"] == r["bw_mbps"] and m["lat_p99_us"] == r["lat_p99_us"]


def test_version_and_keys_must_agree():
    data = json.loads((FOREIGN / "fio-3.1.json").read_text())
    data["fio version"] = "fio-2.20"                 # says usec, has *_ns keys
    with pytest.raises(UserError, match="writes clat, but the document has clat_ns"):
        measurements(data)
    del data["fio version"]
    with pytest.raises(UserError, match="no fio version"):
        measurements(data)


def test_real_fio_multijob_with_and_without_group_reporting():
    raw = json.loads((FOREIGN / "fio-3-multijob.json").read_text())
    recs = load("fio-3-multijob.json")
    assert [(r["job"], r["direction"], r["numjobs"]) for r in recs] == \
        [("write.0", "write", 2), ("write.1", "write", 2), ("read.0", "read", 2), ("read.1", "read", 2)]
    for r, job in zip(recs, raw["jobs"]):
        section = job[r["direction"]]
        assert r["bw_mbps"] == section["bw_bytes"] / 1e6 and r["io_bytes"] == section["io_bytes"]
        assert r["lat_mean_us"] == pytest.approx(section["clat_ns"]["mean"] / 1000)
    grouped = load("fio-3-group-reporting.json")
    assert [(r["job"], r["direction"]) for r in grouped] == [("write", "write"), ("read", "read")]
    assert grouped[0]["io_bytes"] == 2 * (2 << 20)                  # both write jobs (numjobs=2) in one entry
    assert [r["source_line"] for r in recs] == [11, 259, 507, 755]


def test_real_fio_interrupted_and_job_error():
    (r,) = load("fio-3-interrupted.json")
    assert r["interrupted"] is True and r["job"] == "long" and r["bw_mbps"] > 0
    recs = load("fio-3-job-error.json")
    assert [r.get("job") for r in recs if not r.get("event")] == ["ok"]
    assert events(recs) == [("failed", "fio job 'bad' ended with error 1 (Operation not permitted)")]
    assert recs[1]["job"] == "bad" and recs[1]["mount"] == "/proc/version"
    assert all("interrupted" not in r for r in recs)


@pytest.mark.parametrize("text,why", [
    ("", "empty file"),
    ("fio: failed parsing bs=4q\n", "neither an nccl-tests/rccl-tests table"),
    ('{"benchmarks": [{"name": "x"}]}\n', "JSON without fio's \"jobs\" list (has: 'benchmarks')"),
    ('{"fio version": "fio-3.33", "jobs": [{"jobname": "x",', "truncated or malformed"),
])
def test_not_fio_or_nccl_tests_is_refused_with_the_file_and_why(tmp_path, text, why):
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(UserError) as exc:
        read.load(str(path))
    assert str(exc.value).startswith(f"{path}: ") and why in str(exc.value)
    assert "\n" not in str(exc.value)


def test_import_cli_converts_the_good_files_refuses_the_rest(tmp_path):
    (tmp_path / "empty.json").write_text("")
    (tmp_path / "other.json").write_text('{"results": []}')
    out = tmp_path / "records.jsonl"
    done = subprocess.run([sys.executable, "-m", "commbench.commands.cli", "import", str(FOREIGN / "nccl-tests-1.x.log"),
                           str(tmp_path / "empty.json"), str(FOREIGN / "fio-3.1.json"), str(tmp_path / "other.json"),
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert errors == [f"error: {tmp_path / 'empty.json'}: empty file",
                      f"error: {tmp_path / 'other.json'}: not usable fio JSON: JSON without fio's \"jobs\" list "
                      f"(has: 'results'): not fio --output-format=json"]
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [r["source_format"] for r in recs] == ["nccl-tests"] * 6 + ["fio-json"]
    assert recs == load("nccl-tests-1.x.log") + load("fio-3.1.json")


def test_loader_returns_a_dataframe_of_any_mix(tmp_path):
    frame = read.load_frame([str(FOREIGN / "nccl-tests-2.13-tag-output.log"), str(FOREIGN / "fio-2.20.json")])
    assert len(frame) == 9 and set(frame["tool"]) == {"commbench", "iobench"}
    assert frame.loc[frame["tool"] == "iobench", "bw_mbps"].iloc[0] == pytest.approx(87381 * 1024 / 1e6)


def test_the_clis_start_without_pandas_matplotlib_or_torch():
    code = ("import sys, commbench.commands.cli, iobench.cli; "
            "print(sorted(m for m in ('pandas', 'matplotlib', 'torch', 'pyarrow') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.stdout.strip() == "[]", done.stderr


PER_ITER = """# Collective test starting: reduce_scatter_perf
# nThread 1 nGpus 2 minBytes 1048576 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 1 unalign: 0
# Per-Iteration Report: CUDA event timing; i_* uses max over process rows 
#
#                                                              out-of-place (+ per-iteration)                                in-place (+ per-iteration)
#       size         count      type   redop    root     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%     time   algbw   busbw  #wrong    i_min    i_max    i_p99    i_cv%           timestamp
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%)     (us)  (GB/s)  (GB/s)             (us)     (us)     (us)      (%) %Y-%m-%d %H:%M:%S
     1048576        131072     float     sum      -1    20.51   51.12   25.56       0    19.80    22.10    22.05     2.31    20.02   52.38   26.19       0    19.51    21.40    21.33     1.90  2026-11-30 10:00:01
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 25.875 
#
# Collective test concluded: reduce_scatter_perf
"""


def test_per_iteration_columns_and_timestamps_of_the_latest_nccl_tests(tmp_path):
    (tmp_path / "rs.log").write_text(PER_ITER)
    recs = read.load(str(tmp_path / "rs.log")).records
    assert rows(recs) == [(1048576, False, 20.51, 51.12, 25.56), (1048576, True, 20.02, 52.38, 26.19)]
    assert {(r["collective"], r["count"], r["wrong"], r["time_source"]) for r in recs} == \
        {("reduce_scatter", 262144, 0, "cuda_graph")}


def test_a_row_that_an_info_line_cut_and_that_never_continued(tmp_path):
    text = PER_ITER.replace(
        "     1048576        131072     float     sum      -1    20.51",
        "     1048576        131072     float     sum      -1node1:7:7 [0] NCCL INFO comm 0x1 rank 0 nranks 2\n"
        "node1:7:9 [0] NCCL WARN Cuda failure 'an illegal memory access was encountered'\n"
        "node1: Test CUDA failure common.cu:1020 'an illegal memory access was encountered'\n    20.51")
    text = text.split("    20.51")[0]
    (tmp_path / "rs.log").write_text(text)
    recs = read.load(str(tmp_path / "rs.log")).records
    ((kind, reason),) = events(recs)
    assert rows(recs) == [] and kind == "truncated"
    assert "row cut mid-way at line 8" in reason and "NCCL WARN Cuda failure" in reason


def test_iobench_import_is_the_same_command():
    done = subprocess.run([sys.executable, "-m", "iobench.cli", "import", str(FOREIGN / "fio-3.1.json")],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert [json.loads(line) for line in done.stdout.splitlines()] == load("fio-3.1.json")
    assert "fio-3.1.json: 1 measurements (fio-json)" in done.stderr


def test_all_types_in_one_table_are_not_cycles(tmp_path):
    """-d all: the sizes start again for each type; a type is a row key, not a repeat."""
    head, rest = PER_ITER.split("     1048576", 1)
    row = "     1048576" + rest.split("\n", 1)[0]
    text = head + row + "\n" + row.replace("131072     float", "262144      half") + "\n" + rest.split("\n", 1)[1]
    (tmp_path / "d-all.log").write_text(text)
    recs = read.load(str(tmp_path / "d-all.log")).records
    assert [(r["dtype"], r["count"], r.get("cycle")) for r in recs] == \
        [("float32", 262144, None)] * 2 + [("float16", 524288, None)] * 2


def test_srun_label_prefixes(tmp_path):
    text = "".join(f"{0:>3}: {line}\n" for line in PER_ITER.splitlines())
    (tmp_path / "srun.log").write_text(text)
    assert rows(read.load(str(tmp_path / "srun.log")).records) == \
        [(1048576, False, 20.51, 51.12, 25.56), (1048576, True, 20.02, 52.38, 26.19)]


VARIANTS = {   # rows the plain pattern reads and rows only read_row does, in one 2.13 table
    "all_reduce_perf.log": """# nThread 1 nGpus 1 minBytes 8 maxBytes 8192 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 \
validation: 1 graph: 0
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
           8             2     float     sum      -1     5.12    0.00    0.00     N/A     5.03    0.00    0.00     N/A
        1024           256     float     sum       0    12.50    0.08    0.15       0    12.40    0.08    0.15       0
        4096          1024     float     sum      -1    1e999    0.33    0.61       0     13.1    0.31    0.59       0
        8192          2048     float     sum      -1    14.10     N/A    1.10       2    14.00    0.59    1.10       0
       16384          4096     float     sum      -1    15.10    %s    1.10       0    14.00    0.59    1.10       0
        %s          4096     float     sum      -1    15.10    1.10    1.10       0    14.00    0.59    1.10       0
# Out of bounds values : 2 FAILED
""" % ("1" * 400 + ".5", "1" * 5000),
    "reduce_scatter_perf.log": """#       size   count   type   redop   root    time   algbw   busbw    time   algbw   busbw    time   algbw   busbw
        1024     256  float     sum     -1   12.50    0.08    0.15   12.40    0.08    0.15   12.30    0.08    0.15
# Out of bounds values : 0 OK
"""}


def test_rows_read_as_printed_are_the_records_read_row_gives(tmp_path, monkeypatch):
    """A row as nccl-tests prints it becomes its record's JSON line straight from its tokens (Layout.plain, no
    dict, no float); any other row goes through read_row and json's encoding. Both must give the same records,
    field for field and in order, for every fixture log and the variants above (N/A, a value that is not finite,
    a root), every line strict JSON of the schema, and the dicts load() gives the same again."""
    from benchcore.importers import nccl_table as nccltable
    for name, text in VARIANTS.items():
        (tmp_path / name).write_text(text)
    logs = sorted(FOREIGN.glob("*.log")) + sorted(FOREIGN.glob("*.md")) + sorted(tmp_path.glob("*.log"))

    def imported():
        nccltable.header.cache_clear()              # Layouts (and their pattern) are made once per header
        out = {}
        for log in logs:
            try:
                fmt, items = read.records_of(str(log), lines=True)
                out[log.name] = [r for r in items if type(r) is str]
            except UserError:
                continue
        return out
    plain = imported()
    for log in logs:                                # load()'s dicts (what diff and report read) are the same
        if log.name in plain:
            dicts = [list(r.items()) for r in read.load(str(log)).records if not r.get("event")]
            assert dicts == [list(json.loads(line).items()) for line in plain[log.name]], log.name
    monkeypatch.setattr(nccltable, "CELLS", {})          # no layout is plain: every row through read_row
    general = imported()
    nccltable.header.cache_clear()
    assert plain.keys() == general.keys() and sum(map(len, plain.values())) > 40
    as_printed = 0
    for name in plain:
        assert len(plain[name]) == len(general[name]), name
        for a, b in zip(plain[name], general[name]):
            one, other = json.loads(a, parse_constant=_refuse), json.loads(b, parse_constant=_refuse)
            assert list(one.items()) == list(other.items()), (name, a, b)
            assert schema.problems(one) == []
            as_printed += a != b                    # '0.00' as printed, 0.0 as json writes it
    assert as_printed > 10
    recs = [json.loads(r) for r in plain["all_reduce_perf.log"]]
    assert [(r["size_bytes"], r["in_place"], r["time_us"], r["algbw_gbps"], r["wrong"], r.get("root"),
             r.get("nonfinite")) for r in recs] == [
        (8, False, 5.12, 0.0, None, None, None), (8, True, 5.03, 0.0, None, None, None),
        (1024, False, 12.5, 0.08, 0, 0, None), (1024, True, 12.4, 0.08, 0, 0, None),
        (4096, False, None, 0.33, 0, None, ["time_us"]), (4096, True, 13.1, 0.31, 0, None, None),
        (8192, False, 14.1, None, 2, None, None), (8192, True, 14.0, 0.59, 0, None, None),
        (16384, False, 15.1, None, 0, None, ["algbw_gbps"]), (16384, True, 14.0, 0.59, 0, None, None)]


def _refuse(constant):
    raise AssertionError(f"{constant} in a record")


def test_one_command_does_not_import_the_others():
    """The commbench CLI imports a command's module when it runs: `import` (a few hundred MB of log to read) starts
    in a tenth of a second instead of paying for launchers, strategies and acceptance; --help still lists them all."""
    from commbench.commands.cli import COMMANDS, cli
    code = ("import sys; from commbench.commands.cli import cli; sys.argv = ['commbench', 'import', '--help'];\n"
            "try: cli.main(standalone_mode=False)\nexcept SystemExit: pass\n"
            "print(sorted(m for m in sys.modules if m.startswith('commbench.') and m != 'commbench.commands.cli'))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "['commbench.commands']", done.stdout
    ctx = cli.make_context("commbench", ["--help"], resilient_parsing=True)
    for command in COMMANDS:
        assert cli.get_command(ctx, command).name == command
    assert set(COMMANDS) | {"import", "diff", "report"} == set(cli.list_commands(ctx))


# Classes found importing public nccl-tests/rccl-tests logs (issue 25, item 15); each test's log is a short
# synthetic one of the same shape.
HEAD_2X = """#       size         count    type   redop     time   algbw   busbw  error     time   algbw   busbw  error
#        (B)    (elements)                     (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)
"""
ROWS_NEW = """#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
        1024           256     float     sum      -1    11.00    0.09    0.16      0    10.50    0.10    0.17      0
     1048576        262144     float     sum      -1    40.00   26.21   45.87      0    39.00   26.89   47.05      0
# Out of bounds values : 0 OK
"""


def _load(tmp_path, name, text, collective=None):
    (tmp_path / name).write_text(text)
    return list(read.records_of(str(tmp_path / name), collective)[1])


def test_a_log_quoted_in_markdown(tmp_path):
    """A log pasted as a Markdown quote ('> ' before each line, the fence quoted too) under its command."""
    quoted = "".join("> " + line + "\n" if line else ">\n" for line in
                     ("```", "# nThread 1 nGpus 4 minBytes 1024 maxBytes 1048576 step: 2(factor) warmup iters: 5 "
                      "iters: 20 validation: 1", "#", "#   Rank  0 Pid  100 on   gpu1 device  0 [0x1a] GPU",
                      "#   Rank  1 Pid  100 on   gpu1 device  1 [0x1b] GPU", "", *ROWS_NEW.splitlines(), "```"))
    recs = _load(tmp_path, "results.md", "Run:\n\n```\n./build/all_reduce_perf -b 1K -e 1M -g 2\n```\n\n" + quoted)
    assert rows(recs) == [(1024, False, 11.0, 0.09, 0.16), (1024, True, 10.5, 0.1, 0.17),
                          (1048576, False, 40.0, 26.21, 45.87), (1048576, True, 39.0, 26.89, 47.05)]
    assert {(r["collective"], r["world_size"], r["source_line"] > 10) for r in recs} == {("all_reduce", 2, True)}


def test_2_x_alltoall_prints_its_redop_column_blank(tmp_path):
    recs = _load(tmp_path, "a2a.log", HEAD_2X +
                 "           0             0   float             1.63    0.00    0.00    N/A     1.38    0.00    0.00    N/A\n"
                 "     1048576         32768   float            87.42   11.99   10.50    N/A    88.90   11.79   10.32    N/A\n"
                 "# Out of bounds values : 0 OK\n", "all_to_all")
    assert rows(recs) == [(0, False, 1.63, 0.0, 0.0), (0, True, 1.38, 0.0, 0.0),
                          (1048576, False, 87.42, 11.99, 10.5), (1048576, True, 88.9, 11.79, 10.32)]
    assert {(r["op"], r["dtype"], r["count"], r["collective"]) for r in recs} == \
        {(None, "float32", 0, "all_to_all"), (None, "float32", 262144, "all_to_all")}


def test_rows_that_fit_no_header_are_an_event_not_silence(tmp_path):
    """A table whose rows do not fit its header loses them: the import says how many and where the first is (never
    its text: the file may be anything)."""
    text = ROWS_NEW.replace("     sum      -1    11.00", "     sum      -1    11.00 x").replace(
        "     sum      -1    40.00", "     sum      -1    40.00 x")
    recs = _load(tmp_path, "odd.log", text, "all_reduce")
    ((kind, reason),) = events(recs)
    assert rows(recs) == [] and kind == "skipped"
    assert reason == "2 row(s) of the all_reduce table fit no header (or hold a number beyond any run's) and are " \
                     "not read; the first on line 2"
    good_then_bad = ROWS_NEW.replace("     sum      -1    40.00", "     sum      -1    40.00 x")
    recs = _load(tmp_path, "odd.log", good_then_bad.replace("# Out of bounds values : 0 OK\n", ""), "all_reduce")
    assert [kind for kind, _ in events(recs)] == ["truncated"]      # the last row of a cut table: not skipped too


def test_an_elided_device_list_says_no_world_size(tmp_path):
    """'...' among the device lines (a log shortened for a page): the ranks listed are not the world."""
    devices = "#   Rank  0 Pid  1 on w-0 device  0 [0x27] GPU\n#   Rank  1 Pid  2 on w-0 device  1 [0x2a] GPU\n"
    recs = _load(tmp_path, "a.log", devices + "...\n" + ROWS_NEW, "all_reduce")
    assert len(rows(recs)) == 4
    assert {(r["world_size"], r["nodes"], r["hosts"]) for r in recs} == {(None, None, None)}
    recs = _load(tmp_path, "a.log", devices + ROWS_NEW, "all_reduce")
    assert {(r["world_size"], r["nodes"], tuple(r["hosts"])) for r in recs} == {(2, 1, ("w-0",))}


def test_repeated_zero_byte_rows_are_not_cycles(tmp_path):
    """-b 1: the sizes below one element each print a 0-byte row; they are not repeats of a sweep."""
    zero = "           0             0   float     sum    34.27    0.00    0.00    N/A    33.57    0.00    0.00    N/A\n"
    recs = _load(tmp_path, "ag.log", HEAD_2X + zero * 3 + zero.replace("0             0", "32             8", 1)
                 + "# Out of bounds values : 0 OK\n", "all_gather")
    assert [r[0] for r in rows(recs)] == [0, 0, 0, 0, 0, 0, 32, 32]
    assert all("cycle" not in r for r in recs)


def test_environment_values_without_the_period_nccl_ends_the_line_with(tmp_path):
    info = ("h1:7:9 [0] NCCL INFO NCCL_IB_TC set by environment to 160.\n"
            "h1:7:9 [0] NCCL INFO NCCL_SOCKET_IFNAME set by environment to bond0\n"
            "h1:7:9 [0] NCCL INFO NCCL_IB_HCA set by environment to =mlx5_0.1,mlx5_1.\n")
    recs = _load(tmp_path, "a.log", info + ROWS_NEW, "all_reduce")
    assert recs[0]["env"] == {"NCCL_IB_TC": "160", "NCCL_SOCKET_IFNAME": "bond0", "NCCL_IB_HCA": "=mlx5_0.1,mlx5_1"}
