"""issue 18 item 10: `commbench run --format nccl-tests` text, read back by `import`, gives the numbers of the
JSON records of the same run (one launch prints the text and writes --out)."""
import pytest

from benchcore.importers import nccl_text as nccltests
from commbench.output.nccltests import nccl_float
from tests.conftest import read_records, run_tool

RUN = ("run", "--collective", "all_reduce,all_gather,sendrecv", "--nproc-per-node", 2, "-b", 8, "-e", "64K", "-f", 32,
       "-n", 2, "-w", 1, "--format", "nccl-tests")
WIDTH = {"time_us": 7, "algbw_gbps": 6, "busbw_gbps": 6}
SAME = ("collective", "size_bytes", "count", "dtype", "op", "in_place", "blocking", "wrong", "world_size", "nodes",
        "backend", "hosts", "iters", "warmup", "agg_iters")


@pytest.mark.slow
def test_nccl_tests_text_of_a_gloo_run_imports_to_its_json_records(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = run_tool("commbench", *RUN, "--out", out)
    assert proc.returncode == 0, proc.stderr
    json_records = read_records(out)
    (tmp_path / "run.txt").write_text(proc.stdout)
    imported, events = nccltests.parse(proc.stdout, str(tmp_path / "run.txt"), "run")
    assert events == []
    assert len(imported) == len(json_records) == 3 + 2 * 3 + 3   # all_reduce in-place, all_gather both, sendrecv out
    key = lambda r: (r["collective"], r["size_bytes"], r["in_place"])  # noqa: E731
    for rec, back in zip(sorted(json_records, key=key), sorted(imported, key=key)):
        assert {k: back[k] for k in SAME} == {k: rec[k] for k in SAME}
        for field, width in WIDTH.items():   # exactly what nccl-tests' getFloatStr printed for the JSON value
            assert back[field] == float(nccl_float(rec[field], width)), (field, rec, back)
        assert back["source_format"] == "nccl-tests" and back["source_line"] > 0


# `commbench run --collective all_reduce -b 1K -e 4K -f 4 --format nccl-tests -n 2 -w 1` as printed here, its header
# in each form commbench writes (real nodes, emulated nodes) and the form before emulation was said
TEXT = """# Collective test starting: all_reduce_perf
# nThread 1 nGpus 1 minBytes 1024 maxBytes 4096 step: 4(factor) warmup iters: 1 iters: 2 agg iters: 1 validation: 1 graph: 0 unalign: 0
# Blocking Enabled: wait after each inner iteration (-m), no barrier
#
# commbench: gloo, {where} (vm)
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
        1024           256     float     sum      -1      N/A     N/A     N/A     N/A  1181.60    0.00    0.00       0
        4096          1024     float     sum      -1      N/A     N/A     N/A     N/A   334.18    0.01    0.01       0
# Out of bounds values : 0 OK
"""


@pytest.mark.parametrize("where, nodes, emulated", [("2 ranks on 1 node", 1, None),
                                                    ("4 ranks on 2 emulated nodes on one host", 2, True),
                                                    ("2 ranks on 1 node(s)", 1, None)])
def test_commbench_headers_say_backend_nodes_and_emulation(where, nodes, emulated):
    recs, events = nccltests.parse(TEXT.format(where=where), "run.txt", "run")
    assert events == [] and len(recs) == 2
    assert {(r["backend"], r["nodes"], r["hosts"][0], r.get("emulated")) for r in recs} == {("gloo", nodes, "vm",
                                                                                               emulated)}
