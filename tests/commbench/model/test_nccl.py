"""NCCL's own tuning model in the alpha-beta model (issue 25, item 4): per call, the fastest algorithm and protocol
(commbench/model/nccl.py, from NVIDIA/nccl src/graph/tuning.cc). No GPU needed: these are predictions."""
import pytest

from commbench.cases.case import TOTAL
from commbench.cases.registry import CASES
from commbench.model import nccl, topology
from commbench.model.alphabeta import Shape, predict, record_fields

CFG = {"dtype": "float32", "op": "sum", "root": 0, "in_place": True}
H100 = topology.resolve("dgx-h100")
SIZES = [8 << (3 * k) for k in range(11)]    # 8 B .. 8 GiB


def predicted(name, size, topo=H100, n=16, nodes=2, backend="nccl", env=None, cfg=None):
    return predict(CASES[name], {**CFG, "case": name, **(cfg or {})}, size, topo, n, nodes, backend, env)[TOTAL]


def test_small_all_reduce_on_two_dgx_h100_nodes_is_tens_of_us_by_nccls_tree_ll():
    """The ring-only model said 2(n-1) x 9.6 us = 288 us at 8 B; NCCL runs a tree with the LL protocol there:
    base + 2 ((L-1) NVLink hop + log2(M) network hop), NCCL's own constants."""
    got = predicted("all_reduce", 8)
    by_hand = nccl.BASE_US["Tree"][0] + 2 * (7 * nccl.HW_US["nvlink"]["Tree"][0] + 1 * nccl.HW_US["net"]["Tree"][0])
    assert got.algo == "Tree/LL" and got.time_us == pytest.approx(by_hand, rel=1e-4)
    assert 10 <= got.time_us < 100
    assert got.time_us < 2 * 15 * H100.inter_latency_us / 5     # the old ring-only figure was over 5x this


def test_the_pick_is_the_fastest_pair_nccl_allows():
    """Per size, the prediction is the fastest of every (algorithm, protocol) held alone, as NCCL's tuner picks."""
    for nodes, n in ((1, 8), (2, 16), (4, 32)):
        for size in SIZES:
            got = predicted("all_reduce", size, n=n, nodes=nodes)
            shape = Shape(n, n // nodes, nodes)
            offered = [a for a in nccl.ALGORITHMS if nccl.offered(a, "all_reduce", shape, H100, {})]
            assert offered == (["Tree", "Ring", "NVLS"] if nodes == 1 else ["Tree", "Ring", "NVLSTree"])
            alone = {f"{a}/{p}": predicted("all_reduce", size, n=n, nodes=nodes,
                                           env={"NCCL_ALGO": a, "NCCL_PROTO": p}).time_us
                     for a in offered for p in nccl.PROTOCOLS if p == "Simple" or a not in nccl.SIMPLE_ONLY}
            assert got.time_us == pytest.approx(min(alone.values())) and alone[got.algo] == pytest.approx(got.time_us)


@pytest.mark.parametrize("name, nodes", [("all_reduce", 2), ("all_gather", 2), ("reduce_scatter", 4), ("ring", 1)])
def test_protocols_go_ll_then_ll128_then_simple_as_size_grows(name, nodes):
    """LL's latency is lowest and its bandwidth half (or less), Simple the reverse: the pick never goes back, starts
    at LL and ends at Simple, where the busbw nears the ceiling of the algorithm picked."""
    preds = [predicted(name, size, n=8 * nodes, nodes=nodes) for size in SIZES]
    order = [nccl.PROTOCOLS.index(p.algo.split("/")[1]) for p in preds]
    assert order == sorted(order) and order[0] == 0 and order[-1] == 2, [p.algo for p in preds]
    last = preds[-1]    # near its algorithm's ceiling: a ring at NCCL's per-link rate (~0.82), NVLSTree (~0.70)
    assert 0.65 < last.busbw_gbps / last.ceilings[last.algo.split("/")[0]] < 1
    if name == "ring":      # the ring strategy runs with NCCL_ALGO=Ring: never a tree
        assert all(p.algo.startswith("Ring/") for p in preds)


def test_pcie_gpus_get_no_ll128_and_gloo_and_point_to_point_stay_plain():
    pcie = topology.resolve("pcie-l40s-8")
    assert {predicted("all_reduce", s, pcie, 8, 1).algo.split("/")[1] for s in SIZES} == {"LL", "Simple"}
    assert predicted("sendrecv", 8).algo is None and predicted("all_to_all", 1 << 20).algo is None
    plain = predicted("sendrecv", 8)
    assert plain.time_us == pytest.approx(H100.inter_latency_us, rel=1e-3)   # one step of the topology's alpha


def test_nccl_algo_and_proto_narrow_the_choice_as_in_nccl():
    free = predicted("all_reduce", 8)
    for env, algo in [({"NCCL_ALGO": "Ring"}, "Ring/LL"), ({"NCCL_ALGO": "^tree"}, "Ring/LL"),
                      ({"NCCL_ALGO": "allreduce:ring;broadcast:tree"}, "Ring/LL"),
                      ({"NCCL_ALGO": "allgather:ring"}, "Tree/LL"), ({"NCCL_PROTO": "Simple"}, "NVLSTree/Simple"),
                      ({"NCCL_PROTO": "^LL,LL128"}, "NVLSTree/Simple"), ({"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"},
                                                                       "Tree/Simple"),
                      ({"NCCL_ALGO": "NVLS"}, "Tree/LL")]:   # NVLS across nodes needs CollNet: not offered here
        got = predicted("all_reduce", 8, env=env)
        assert got.algo == algo, env
        assert got.time_us >= free.time_us
    assert predicted("all_reduce", 8, env={"NCCL_PROTO": "Simple"}).time_us > free.time_us


def test_records_say_what_nccl_picks():
    case, cfg = CASES["all_reduce"], {**CFG, "case": "all_reduce"}
    got = record_fields(H100, case, cfg, TOTAL, 8, 16, 2, "nccl", 0.001, env={})
    assert got["predicted_algo"] == "Tree/LL"
    assert got["predicted_time_us"] == pytest.approx(predicted("all_reduce", 8).time_us)
    assert record_fields(H100, case, cfg, TOTAL, 8, 16, 2, "nccl", 0.001, env={"NCCL_ALGO": "Ring"})[
        "predicted_algo"] == "Ring/LL"
    both = predict(CASES["rs-ag"], {**CFG, "case": "rs-ag"}, 8, H100, 16, 2, "nccl")
    assert both[TOTAL].algo == f"{both['reduce_scatter'].algo} + {both['all_gather'].algo}"
