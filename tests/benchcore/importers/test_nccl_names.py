"""`import` of every real nccl-tests/rccl-tests result (issue 25 item 15): the collective found by the names of the
collectives registry wherever the file says it (banner, trailing 'concluded' line, *_perf command, file name in the
spellings people use, --collective), never a word that is not a collective (gpu_perf); nccl-tests' JSON (-J) and
rccl-tests' (-Z json, -Z csv), whose fixtures tests/fixtures/foreign/make_nccl_json.py lays out as their writers do
(NVIDIA/nccl-tests src/util.cu, ROCm/rccl-tests src/common.cu's Reporter); hostile JSON refused in one line."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchcore import vocabulary
from benchcore.errors import UserError
from benchcore.results import read

FOREIGN = Path(__file__).resolve().parents[2] / "fixtures" / "foreign"
ROOT = Path(__file__).resolve().parents[3]

# a 2.13+ table as nccl-tests prints it, without its banner (the head of the log cut, or never kept)
TABLE = """# nThread 1 nGpus 8 minBytes 8 maxBytes 1048576 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 \
validation: 1 graph: 0
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
     1048576        262144     float     sum      -1    25.31   41.43   72.50       0    24.97   41.99   73.49       0
# Out of bounds values : 0 OK
# Avg bus bandwidth    : 72.995
#
"""
CONCLUDED = "# Collective test concluded: {}\n"
STARTING = "# Collective test starting: {}\n"


@pytest.mark.parametrize("spelled,collective", [
    ("all_reduce", "all_reduce"), ("allreduce", "all_reduce"), ("All-Reduce", "all_reduce"),
    ("AllReduce", "all_reduce"), ("alltoall", "all_to_all"), ("AlltoAll", "all_to_all"), ("all_to_all", "all_to_all"),
    ("ReduceScatter", "reduce_scatter"), ("SendRecv", "sendrecv"), ("AlltoAllv", "all_to_allv"),
    ("HyperCube", "hypercube"), ("gpu", None), ("all", None), ("perf", None),
])
def test_the_registry_knows_every_spelling(spelled, collective):
    assert vocabulary.named(spelled) == collective


@pytest.mark.parametrize("file_name,head,tail,expected", [
    ("h100-all_reduce-2node.txt", "", "", "all_reduce"),
    ("allreduce.log", "", "", "all_reduce"),
    ("all-gather-16gpu.txt", "", "", "all_gather"),
    ("alltoall", "", "", "all_to_all"),
    ("reduce_scatter", "", "", "reduce_scatter"),
    ("sendrecv.out", "", "", "sendrecv"),
    ("AllReduce_8xMI300X.txt", "", "", "all_reduce"),                   # rccl-tests' own spelling
    ("rccl-AlltoAllv-2node.log", "", "", "all_to_allv"),
    ("nccl-tests-hung-all_gather_perf.log", "", "", "all_gather"),
    ("run.log", "", CONCLUDED.format("alltoall_perf"), "all_to_all"),   # only the trailing line says it
    ("all_reduce_perf.log", "", CONCLUDED.format("broadcast_perf"), "broadcast"),  # the log's word beats the name
    ("gpu_perf.log", "", CONCLUDED.format("alltoall_perf"), "all_to_all"),
    ("gpu_perf.log", "", "", "refused: says gpu_perf, and 'gpu' is not a collective"),
    ("run.log", "", "", "refused: the file name names none"),
    ("allreduce-vs-allgather.log", "", "", "refused: names several (all_reduce, all_gather)"),
    ("run.log", STARTING.format("gpu_perf"), "", "refused: the file name names none"),  # a renamed binary
    ("all_gather.log", STARTING.format("gpu_perf"), "", "all_gather"),
])
def test_the_collective_from_file_names_and_trailers_or_a_refusal(tmp_path, file_name, head, tail, expected):
    path = tmp_path / file_name
    path.write_text(head + TABLE + tail)
    if expected.startswith("refused: "):
        with pytest.raises(UserError) as exc:
            read.load(str(path))
        message = str(exc.value)
        assert expected[len("refused: "):] in message and "import --collective NAME (all_reduce, " in message
        assert "\n" not in message and message.startswith(f"{path}: no collective named: ")
        return
    recs = read.load(str(path)).records
    assert [(r["collective"], r["size_bytes"], r["in_place"], r["busbw_gbps"]) for r in recs] == \
        [(expected, 1048576, False, 72.5), (expected, 1048576, True, 73.49)]


def _import(*args, cwd=ROOT):
    return subprocess.run([sys.executable, "-m", "commbench.commands.cli", "import", *map(str, args)],
                          capture_output=True, text=True, cwd=cwd, timeout=120)


def test_collective_option_names_what_the_file_does_not(tmp_path):
    for name, head in (("gpu_perf.log", ""), ("run.log", ""), ("banner.log", STARTING.format("broadcast_perf"))):
        (tmp_path / name).write_text(head + TABLE)
    out = tmp_path / "r.jsonl"
    done = _import(tmp_path / "gpu_perf.log", tmp_path / "run.log", tmp_path / "banner.log", "--collective",
                   "All-Reduce", "--out", out)
    assert done.returncode == 0, done.stderr
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(Path(r["source_file"]).name, r["collective"]) for r in recs[::2]] == \
        [("gpu_perf.log", "all_reduce"), ("run.log", "all_reduce"), ("banner.log", "broadcast")]
    bad = _import(tmp_path / "run.log", "--collective", "gpu")
    assert bad.returncode == 2 and bad.stdout == "" and "Traceback" not in bad.stderr
    assert bad.stderr.splitlines() == ["error: --collective 'gpu': not a collective (one of all_reduce, all_gather, "
                                       "reduce_scatter, broadcast, reduce, all_to_all, sendrecv, gather, scatter, "
                                       "all_to_allv, hypercube; allreduce, all-reduce, AllReduce are all_reduce)"]


def test_nccl_tests_and_rccl_tests_json_through_the_cli(tmp_path):
    (tmp_path / "gpu_perf.json").write_text('{"version":3,"start_time":"2026-11-30 10:00:00","args":["./gpu_perf"],'
                                            '"results":[{"size":8}]}')
    out = tmp_path / "r.jsonl"
    done = _import(FOREIGN / "nccl-tests-2.19-J-all_reduce.json", FOREIGN / "nccl-tests-2.17-J-alltoall-failed.json",
                   FOREIGN / "rccl-tests-Z-json-all_gather.json", FOREIGN / "rccl-tests-Z-csv-all_reduce.csv",
                   tmp_path / "gpu_perf.json", "--out", out)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.splitlines() == [
        f"{FOREIGN / 'nccl-tests-2.19-J-all_reduce.json'}: 8 measurements (nccl-tests-json)",
        f"{FOREIGN / 'nccl-tests-2.17-J-alltoall-failed.json'}: 5 measurements (nccl-tests-json); truncated: "
        "all_to_all results end after 5 measurement(s) without nccl-tests' footer (out_of_bounds); the file shows "
        "no reason",
        f"{FOREIGN / 'rccl-tests-Z-json-all_gather.json'}: 8 measurements (rccl-tests-json)",
        f"{FOREIGN / 'rccl-tests-Z-csv-all_reduce.csv'}: 4 measurements (rccl-tests-csv)",
        f"error: {tmp_path / 'gpu_perf.json'}: no collective named: its binary's name (args[0]) names none, and the "
        "file "
        "name says gpu_perf, and 'gpu' is not a collective; say which with import --collective NAME (all_reduce, "
        "all_gather, reduce_scatter, broadcast, reduce, all_to_all, sendrecv, gather, scatter, all_to_allv, "
        "hypercube)"]
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    ar, a2a, ag, csv = recs[:8], recs[8:14], recs[14:22], recs[22:]
    assert [(r["size_bytes"], r["in_place"], r["time_us"], r["algbw_gbps"], r["busbw_gbps"]) for r in ar[-4:]] == \
        [(8388608, False, 310.4, 27.02, 50.67), (8388608, True, 308.9, 27.16, 50.92),
         (134217728, False, 1620.5, 82.83, 155.3), (134217728, True, None, 83.01, 155.6)]   # "nan": no time
    r = ar[0]
    assert (r["collective"], r["count"], r["dtype"], r["op"], r["wrong"], r["world_size"], r["nodes"], r["hosts"]) == \
        ("all_reduce", 2, "float32", "sum", 0, 16, 2, ["h100-00", "h100-01"])      # 2 processes x -g 8
    assert (r["versions"], r["env"], r["iters"], r["warmup"], r["blocking"], r["source_line"]) == \
        ({"nccl": "2.27.3"}, {"NCCL_IB_HCA": "mlx5", "NCCL_DEBUG": "WARN"}, 20, 5, False, 1)  # no other variable kept
    assert "root" not in r and "cycle" not in r and r["source_format"] == "nccl-tests-json"
    assert [(r["collective"], r["size_bytes"], r["in_place"], r["wrong"], r["world_size"]) for r in a2a[3:5]] == \
        [("all_to_all", 8388608, True, None, 4), ("all_to_all", 67108864, False, None, 4)]  # -c 0; the cut row's half
    assert (a2a[-1]["event"], a2a[-1]["collective"], a2a[-1]["hosts"]) == ("truncated", "all_to_all", ["dgx-07"])
    assert [(r["cycle"], r["size_bytes"], r["in_place"], r["time_us"], r["busbw_gbps"]) for r in ag[2:6]] == \
        [(0, 268435456, False, 1702.4, 147.825564), (0, 268435456, True, 1699.0, 148.121389),
         (1, 1048576, False, 30.1, 32.659136), (1, 1048576, True, 29.8, 32.987919)]
    assert {(r["collective"], r["op"], r["wrong"], r["world_size"], r["nodes"]) for r in ag} == \
        {("all_gather", None, 0, 16, None)}                                   # 2 processes x 8; nodes unknown
    assert [r["source_line"] for r in ag] == list(range(2, 10))
    assert [(r["size_bytes"], r["count"], r["in_place"], r["time_us"], r["algbw_gbps"], r["busbw_gbps"],
             r["source_line"]) for r in csv] == [(1024, 512, False, 18.2, 0.056264, 0.098462, 2),
                                                 (1024, 512, True, 17.9, 0.057207, 0.100112, 3),
                                                 (16777216, 8388608, False, 101.5, 165.292768, 289.262345, 4),
                                                 (16777216, 8388608, True, 100.7, 166.605919, 291.560357, 5)]
    assert {(r["collective"], r["dtype"], r["op"], r["wrong"], r["world_size"], r["nodes"], r["source_format"])
            for r in csv} == {("all_reduce", "float16", "sum", None, 8, 1, "rccl-tests-csv")}   # one process -g 8


HEAD = '{"version":3,"start_time":"2026-11-30 10:00:00","args":["./build/all_reduce_perf"],'
ROW = '{"size":8,"count":2,"type":"float","redop":"sum","root":"    -1","out_of_place":%s,"in_place":null}'
PLACE = '{"time":1.5,"alg_bw":0.01,"bus_bw":0.01,"nwrong":0}'


@pytest.mark.parametrize("text,why", [
    (HEAD + '"results":' + "[" * 200000 + "]" * 200000 + "}", "nested deeper than any nccl-tests document"),
    (HEAD + '"results":"all"}', "nccl-tests JSON results is text, not a list"),
    (HEAD + '"results":[' + ROW.replace('"size":8', '"size":"8GB"') % PLACE + "]}",
     "nccl-tests JSON line 1 results[0].size is text, not a count"),
    (HEAD + '"results":[' + ROW.replace('"size":8', '"size":-8') % PLACE + "]}",
     "nccl-tests JSON line 1 results[0].size is a negative number, not a count"),
    (HEAD + '"results":[' + ROW % PLACE.replace('"nwrong":0', '"nwrong":true') + "]}",
     "nccl-tests JSON line 1 results[0].out_of_place.nwrong is true/false, not a count"),
    (HEAD + '"results":[' + ROW.replace('"    -1"', '"abc"') % PLACE + "]}",
     "nccl-tests JSON line 1 results[0].root is text that is not a rank"),
    (HEAD + '"config":{"devices":5},"results":[]}', "nccl-tests JSON config.devices is a number, not a list"),
    (HEAD + '"results":[' + ROW % PLACE + "]}" + "\x00", "not valid JSON (line 1, column"),
    (HEAD + '"results":[' + ROW % PLACE, "not valid JSON (line 1, column"),
    (HEAD + '"results":[{"size":' + "9" * 5000 + "}]}", "not valid JSON: Exceeds the limit"),
    ('[{"numCycle":0, "name":["AllReduce"], "gpus":8}]', "rccl-tests JSON line 1 [0].name is a list, not text"),
    ('[{"numCycle":0, "name":"AllReduce", "gpus":8, "size":1024, "type":"float", "redop":"sum", "inPlace":"yes"}]',
     "rccl-tests JSON line 1 [0].inPlace is text, not a count"),
    ('numCycle,collective,gpus,size,type,redop,inplace,time,algbw,busbw,#wrong\n'
     '0,"AllReduce",8,1K,"half","sum",0,1,1,1,0',
     "[0].size is text, not a count"),
])
def test_hostile_json_is_refused_in_one_line(tmp_path, text, why):
    path = tmp_path / "all_reduce.json"
    path.write_text(text)
    with pytest.raises(UserError) as exc:
        read.load(str(path))
    assert str(exc.value).startswith(f"{path}: ") and why in str(exc.value), str(exc.value)
    assert "\n" not in str(exc.value) and len(str(exc.value)) < 500


def test_huge_json_is_refused_before_it_is_read(tmp_path):
    path = tmp_path / "all_reduce.json"
    path.write_text(HEAD)
    os.truncate(path, 1 << 30)                  # sparse: nothing of it is on disk, nothing of it is read
    with pytest.raises(UserError, match=r": 1073741824 bytes of nccl-tests-json, more than the 33554432 this reads "
                                        r"whole$"):
        read.load(str(path))


def test_printf_infinity_and_nan_have_no_value(tmp_path):
    path = tmp_path / "all_reduce.json"
    path.write_text(HEAD + '"results":[' + ROW % PLACE.replace('"alg_bw":0.01', '"alg_bw":inf').replace(
        '"time":1.5', '"time":-nan') + '],"out_of_bounds":{"count":0,"okay":"true"}}')
    (rec,) = read.load(str(path)).records
    assert (rec["time_us"], rec["algbw_gbps"], rec["busbw_gbps"], rec["wrong"]) == (None, None, 0.01, 0)
