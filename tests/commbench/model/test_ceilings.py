"""Utilisation over ceilings, the tier each transport crosses, emulated nodes (issue 25, items 1-3).

util = busbw / a ceiling (datasheet, tc rate, calibration); a reference measurement (localhost's loopback) gives
util and model time n/a with the reason. MPI ranks on one node use the shared-memory tier. Nodes emulated on
one machine share its loopback: 1 and 2 emulated nodes of the same world size predict the same.
"""
import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from benchcore.results import schema, thresholds
from commbench.cases.case import TOTAL
from commbench.cases.registry import CASES
from commbench.model import alphabeta as model
from commbench.model import detect, topology
from tests.conftest import assert_one_line_error, read_records, run_tool

CFG = {"dtype": "float32", "op": "sum", "root": 0, "in_place": True}
LOCAL = topology.resolve("localhost")
# localhost's figures taken as calibrated ceilings, with a shared-memory tier of 10 GB/s per rank
CALIBRATED = replace(LOCAL, intra_ceiling="calibrated", inter_ceiling="calibrated", shm_gbps=10.0, shm_latency_us=1.0,
                     shm_ceiling="calibrated")


def predicted(name, size, topo, n, nodes, backend):
    return model.predict(CASES[name], {**CFG, "case": name}, size, topo, n, nodes, backend)[TOTAL]


def test_a_reference_rate_is_no_ceiling_util_and_model_time_are_na_with_the_reason():
    assert (LOCAL.intra_ceiling, LOCAL.inter_ceiling) == ("none", "none")
    assert topology.resolve("dgx-h100").inter_ceiling == "datasheet"
    fields = model.record_fields(LOCAL, CASES["all_reduce"], {**CFG, "case": "all_reduce"}, TOTAL, 1 << 20, 2, 1,
                                 "gloo", 0.5)
    assert fields.get("link_utilization") is None and fields.get("predicted_time_us") is None
    assert fields.get("link_peak_gbps") is None and fields["link_tier"] == "intra-node"
    assert "reference measurement, not a ceiling" in fields["link_peak_reason"]
    assert schema.problems(schema.measurement("commbench", **fields)) == []
    ok = model.record_fields(CALIBRATED, CASES["all_reduce"], {**CFG, "case": "all_reduce"}, TOTAL, 1 << 20, 2, 1,
                             "gloo", 0.5)
    assert ok["link_peak_gbps"] == pytest.approx(0.8) and ok["link_utilization"] == pytest.approx(0.5 / 0.8)


@pytest.mark.parametrize("edit, field", [
    ({"intra_node": {"ceiling": "measured-once"}}, "intra_node.ceiling"),
    ({"inter_node": {"fabric": "wifi"}}, "inter_node.fabric"),
    ({"shared_memory": {"latency_us": 1}}, "shared_memory.per_rank_gbps"),
])
def test_ceiling_fields_are_validated(edit, field):
    data = LOCAL.as_dict()
    data.pop("source")
    for section, values in edit.items():
        data[section] = {**data.get(section, {}), **values}
    with pytest.raises(Exception, match=field.replace(".", r"\.")):
        topology.validate(data, "t.yaml")


def test_mpi_on_one_node_crosses_shared_memory_not_loopback():
    mpi, gloo = predicted("all_reduce", 1 << 20, CALIBRATED, 2, 1, "mpi"), predicted("all_reduce", 1 << 20,
                                                                                       CALIBRATED, 2, 1, "gloo")
    assert mpi.tier == "shared-memory" and mpi.peak_gbps == pytest.approx(10.0)   # one rank's copy rate
    assert gloo.tier == "intra-node" and gloo.peak_gbps == pytest.approx(0.8)     # 1.6 shared by 2 ranks
    none = predicted("all_reduce", 1 << 20, LOCAL, 2, 1, "mpi")
    assert none.time_us is None and "no shared_memory tier" in none.reason
    # a GPU topology describes no loopback: Gloo's CPU tensors between a node's ranks are n/a there
    h100 = predicted("all_reduce", 1 << 20, topology.resolve("dgx-h100"), 16, 2, "gloo")
    assert h100.time_us is None and "TCP loopback" in h100.reason


@pytest.mark.parametrize("name", ["all_reduce", "all_gather", "reduce_scatter", "sendrecv", "all_to_all", "broadcast"])
def test_emulated_nodes_share_the_loopback_and_predict_as_one_node(name):
    one, two, four = (predicted(name, 4 << 20, CALIBRATED, 4, nodes, "gloo") for nodes in (1, 2, 4))
    assert one.time_us == pytest.approx(two.time_us) == pytest.approx(four.time_us)
    assert one.peak_gbps == pytest.approx(two.peak_gbps) and two.tier == "intra-node"
    # the same world on real nodes (a network between them) is not one node
    real = replace(CALIBRATED, inter_fabric="network")
    assert predicted(name, 4 << 20, real, 4, 2, "gloo").tier == "inter-node"


def test_a_shared_loopback_carries_what_the_ranks_send():
    """The loopback's ceiling is what all of a node's ranks send together: a chain (broadcast, reduce) has one
    sender fewer than ranks, so on 2 ranks only the root's bytes cross it (util over the whole rate)."""
    for name in ("broadcast", "reduce"):
        assert predicted(name, 64 << 20, CALIBRATED, 2, 1, "gloo").peak_gbps == pytest.approx(1.6)
        assert predicted(name, 64 << 20, CALIBRATED, 4, 1, "gloo").peak_gbps == pytest.approx(1.6 / 3)
    assert predicted("sendrecv", 64 << 20, CALIBRATED, 2, 1, "gloo").peak_gbps == pytest.approx(0.8)  # both send


def test_a_node_joined_by_a_network_is_not_the_emulated_localhost():
    fields = {"gpus_per_node": 0, "intra_node.fabric": "loopback", "inter_node.nics_per_node": 1}
    assert detect.in_effect({**fields, "inter_node.fabric": "loopback"}).name == "localhost"
    real = detect.in_effect({**fields, "inter_node.fabric": "network"})
    assert real.name == "detected" and real.inter_fabric == "network" and real.inter_ceiling == "none"
    shaped = detect.in_effect({**fields, "inter_node.fabric": "network", "inter_node.per_nic_gbps": 0.125,
                               "inter_node.ceiling": "tc"})
    assert shaped.inter_ceiling == "tc" and predicted("sendrecv", 1 << 20, shaped, 2, 2, "gloo").reason is None


def test_a_link_peak_threshold_without_a_ceiling_is_skipped_with_the_reason():
    fields = model.record_fields(LOCAL, CASES["all_reduce"], {**CFG, "case": "all_reduce"}, TOTAL, 1 << 20, 2, 1,
                                 "gloo", 0.5)
    rec = schema.measurement("commbench", run_id="r", collective="all_reduce", size_bytes=1 << 20, count=1 << 18,
                             dtype="float32", op="sum", in_place=True, time_us=2000.0, algbw_gbps=0.5, busbw_gbps=0.5,
                             wrong=0, world_size=2, nodes=1, backend="gloo", **fields)
    out = thresholds.judge(thresholds.parse("busbw >= 0.5 x link peak at 1M", "commbench"), [rec])
    assert out.skipped and out.passed and "reference measurement" in out.message


def test_calibrate_refuses_an_existing_file_in_one_line(tmp_path):
    mine = tmp_path / "mine.yaml"
    mine.write_text("keep")
    assert_one_line_error(run_tool("commbench", "topo", "--calibrate", "--out", mine), "exists")
    assert mine.read_text() == "keep"
    assert_one_line_error(run_tool("commbench", "topo", "--out", tmp_path / "x.yaml"), "--calibrate")


@pytest.fixture(scope="module")
def calibrated(tmp_path_factory):
    path = tmp_path_factory.mktemp("calibrate") / "mine.yaml"
    proc = run_tool("commbench", "topo", "--calibrate", "--out", path, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return path, proc


@pytest.mark.slow
def test_calibrate_says_which_ceiling_it_measures(calibrated):
    """It ran 18 s silent (issue 49 item 1): it names every ceiling it measures first, then, every 10 s, the one
    under way with the time left."""
    _, proc = calibrated
    said = [ln for ln in proc.stderr.splitlines() if ln.startswith("topo --calibrate: measuring this machine's ")]
    assert len(said) == 1 and all(f"{name}:" in said[0] for name in (
        "shared_memory ceiling", "latency_us", "intra_node ceiling", "per_op_us.gloo", "per_op_us.mpi")), proc.stderr
    shown = re.findall(r"^\[(\d)/5\] (shared_memory|latency_us|intra_node|per_op_us\.gloo|per_op_us\.mpi)[ :].*, "
                       r"\S+ elapsed, (~\S+ left|estimating the time left)$", proc.stderr, re.M)
    assert shown, proc.stderr   # the calibration takes 15 s or more here: one line at 10 s at least


def gloo_run(path, out, *args, backend="gloo"):
    proc = run_tool("commbench", "run", "--backend", backend, "--topology", path, "-b", "256K", "-e", "4M", "-f", "4",
                    "-n", "5", "-w", "2", "--place", "in", "--out", out, *args, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return {r["size_bytes"]: r for r in read_records(out) if not r.get("event")}


@pytest.mark.slow
@pytest.mark.alone
def test_calibrate_writes_ceilings_that_runs_use(calibrated, tmp_path):
    """`topo --calibrate --out` measures this machine (memory copy, loopback TCP streams) into a file --topology
    takes; Gloo on 1 node and on 2 emulated nodes then predicts the same and measures alike, MPI uses the
    shared-memory tier, and util is busbw over the calibrated ceilings."""
    path, proc = calibrated
    topo = topology.load(path)
    assert (topo.intra_ceiling, topo.shm_ceiling, topo.inter_fabric) == ("calibrated", "calibrated", "loopback")
    assert topo.intra_gbps > 0 and topo.shm_gbps > 0 and "wrote" in proc.stdout
    assert "loopback TCP, the most 1-" in path.read_text()
    one = gloo_run(path, tmp_path / "one.jsonl", "--nproc-per-node", "2")
    two = gloo_run(path, tmp_path / "two.jsonl", "--nodes", "2", "--nproc-per-node", "1")
    assert one.keys() == two.keys() and {r["nodes"] for r in two.values()} == {2}
    for size, rec in one.items():
        assert rec["predicted_time_us"] == pytest.approx(two[size]["predicted_time_us"])  # item 3: the same model
        assert rec["link_tier"] == "intra-node" and rec["link_peak_gbps"] == pytest.approx(topo.intra_gbps / 2)
        assert rec["link_utilization"] == pytest.approx(rec["busbw_gbps"] / rec["link_peak_gbps"])
    ratio = sorted(one[s]["busbw_gbps"] / two[s]["busbw_gbps"] for s in one)
    print(f"busbw 1 node / 2 emulated nodes per size: {[round(r, 2) for r in ratio]}")
    assert 1 / 3 < ratio[len(ratio) // 2] < 3      # within this shared machine's noise (3.5x spread seen)
    mpi = gloo_run(path, tmp_path / "mpi.jsonl", "--nproc-per-node", "2", backend="mpi")
    for rec in mpi.values():
        assert rec["link_tier"] == "shared-memory" and rec["link_peak_gbps"] == pytest.approx(topo.shm_gbps)
        assert 0 < rec["link_utilization"] <= 1.0


RAW_LOOP = Path(__file__).resolve().parents[3] / "scripts" / "raw_allreduce_loop.py"


def test_gloo_s_own_cost_counts_once_per_segment_its_ring_all_reduce_sends():
    """Gloo's ring all_reduce sends min(2 x ranks, elements) segments where a 1-element call (per_op_us) sends one:
    the model adds the own cost that many times to an all_reduce, once to any other call."""
    topo = replace(CALIBRATED, per_op_us=(("gloo", 100.0),))
    bare = replace(CALIBRATED, per_op_us=(("gloo", 0.0),))
    for size, ranks, segments in ((4, 2, 1), (8, 2, 2), (12, 2, 3), (16, 2, 4), (1 << 20, 2, 4), (8, 3, 2),
                                  (1024, 3, 6), (1024, 4, 8)):
        own = predicted("all_reduce", size, topo, ranks, 1, "gloo").time_us - \
            predicted("all_reduce", size, bare, ranks, 1, "gloo").time_us
        assert own == pytest.approx(100.0 * segments), (size, ranks)
    for name in ("all_gather", "broadcast"):
        assert predicted(name, 1024, topo, 2, 1, "gloo").time_us - predicted(name, 1024, bare, 2, 1, "gloo").time_us \
            == pytest.approx(100.0)
    fp64 = model.predict(CASES["all_reduce"], {**CFG, "dtype": "float64", "case": "all_reduce"}, 16, topo, 2, 1,
                         "gloo")[TOTAL].time_us
    assert fp64 - predicted("all_reduce", 16, bare, 2, 1, "gloo").time_us == pytest.approx(200.0)   # 2 elements


@pytest.mark.slow
def test_the_installed_gloo_sends_what_the_model_counts():
    """The count gloo_segments rests on, from the installed Gloo (a bare torch.distributed loop): socket writes per
    all_reduce call and rank grow with the segments sent (1, 2, then 4 on 2 ranks) and no further (1 MiB). A count
    of system calls, not a time: the load of the machine does not change it."""
    proc = run_tool("python", "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2",
                    RAW_LOOP, "50", "5", "4", "8", "1024", str(1 << 20), timeout=120)
    assert proc.returncode == 0, proc.stderr
    writes = {r["size"]: r["writes_per_call"] for r in map(json.loads, proc.stdout.splitlines())}
    print(f"Gloo socket writes per all_reduce call and rank: {writes}")
    one = writes[4]
    assert one >= 1
    for size, elements in ((8, 2), (1024, 256), (1 << 20, 1 << 18)):
        segments = model.gloo_segments("all_reduce", size, "float32", 2)
        assert segments == min(4, elements)
        assert writes[size] == pytest.approx(one * segments, abs=0.5), writes


@pytest.mark.slow
@pytest.mark.alone   # judges no time, but shares the module's calibration with the test above, which judges rates
def test_calibrate_measures_gloo_s_own_cost_per_call_and_the_model_predicts_small_sizes_with_it(calibrated, tmp_path):
    """Issue 39 item 9: the calibration holds Gloo's (and, mpi4py being installed, MPI's) own cost per collective
    call, from a 1-element all_reduce on 2 ranks; a run's records predict small all_reduces on Gloo with it, once
    per segment Gloo's ring sends (8 B: 2, 1 KiB: 4). The measured / model ratio is printed, not judged: on this
    2-core machine one call's time moves 2-5x with the load (the closing note of issue 46 has the tables)."""
    path, proc = calibrated
    topo = topology.load(path)
    assert topo.own_cost_us("gloo") > 0 and topo.own_cost_us("mpi") > 0, path.read_text()
    assert "per_op_us.gloo: a 1-element all_reduce on 2 ranks took" in proc.stdout
    out = tmp_path / "small.jsonl"
    run = run_tool("commbench", "run", "--backend", "gloo", "--topology", path, "-b", "8", "-e", "1K", "-f", "128",
                   "-n", "50", "-w", "5", "--place", "in", "--out", out, timeout=300)
    assert run.returncode == 0, run.stderr
    recs = {r["size_bytes"]: r for r in read_records(out) if not r.get("event")}
    assert sorted(recs) == [8, 1024]
    for size, rec in recs.items():
        cfg = {**CFG, "case": "all_reduce", "dtype": rec["dtype"]}
        expect = model.predict(CASES["all_reduce"], cfg, size, topo, 2, 1, "gloo")[TOTAL].time_us
        assert rec["predicted_time_us"] == pytest.approx(expect)
        assert rec["predicted_time_us"] >= topo.own_cost_us("gloo") * (2 if size == 8 else 4)
        print(f"{size} B: measured {rec['time_us']:.1f} us, model {rec['predicted_time_us']:.1f} us, "
              f"ratio {rec['time_us'] / rec['predicted_time_us']:.2f}")
