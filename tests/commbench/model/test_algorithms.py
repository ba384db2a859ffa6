"""NVLS, NVLSTree, CollNet and PAT in the model (issue 40 item 1) against values computed by hand from the module
doc's formulas and NCCL's constants (commbench/model/nccl.py: v2.27.7 tuning.cc hwLat and latency formulas, v2.28.3
nvlsEfficiency, topo.h SM90_NVLINK_BW); and the ceilings each algorithm has. Predictions only: no GPU needed."""
from dataclasses import replace

import pytest

from commbench.cases.case import TOTAL
from commbench.cases.registry import CASES
from commbench.model import nccl, topology
from commbench.model.alphabeta import Shape, predict

H100 = topology.resolve("dgx-h100")
E_H100 = 18 * 20.6                   # GB/s: NVLink4 as NCCL credits it
NVLS_A = E_H100 * 8 / 9 * 0.85       # NVLS algbw on 8 GPUs: E L/(L+1) x nvlsEfficiency (Hopper)
NODE = 8 * 50 * 0.96                 # GB/s: a node's 8 NICs at 96 % of 400 Gb/s
S = 8 << 30


def pred(name, size, topo=H100, n=8, nodes=1, env=None, version=None):
    cfg = {"case": name, "dtype": "float32", "op": "sum", "root": 0, "in_place": True}
    return predict(CASES[name], cfg, size, topo, n, nodes, "nccl", env, version)[TOTAL]


def test_nvls_on_one_node_by_hand():
    got = pred("all_reduce", S, env={"NCCL_ALGO": "NVLS"})
    assert got.algo == "NVLS/Simple"
    assert got.time_us == pytest.approx(25.0 + S / (NVLS_A * 1e9) * 1e6, rel=1e-9)   # hwLat NVLINK NVLS 25 us
    assert got.busbw_gbps == pytest.approx(1.75 * NVLS_A, rel=1e-3)                   # ~490: 480 is published


@pytest.mark.parametrize("nodes, net", [(2, NODE), (4, NODE / 2)])
def test_nvlstree_across_nodes_by_hand(nodes, net):
    """NVLS inside, a tree between nodes: on 2 nodes a node's NICs carry S each way, beyond that 2 S."""
    got = pred("all_reduce", S, n=8 * nodes, nodes=nodes, env={"NCCL_ALGO": "NVLSTree"})
    hops = nodes.bit_length() - 1
    assert got.time_us == pytest.approx(25.0 + 2 * hops * 14.0 + S / (min(NVLS_A, net) * 1e9) * 1e6, rel=1e-9)


def test_collnet_needs_sharp_and_the_switch_on():
    sharp = replace(H100, sharp=True)
    shape = Shape(16, 8, 2)
    assert not nccl.offered("CollNetDirect", "all_reduce", shape, H100, {"NCCL_COLLNET_ENABLE": "1"})
    assert not nccl.offered("CollNetDirect", "all_reduce", shape, sharp, {})        # NCCL's default: off
    assert nccl.offered("CollNetDirect", "all_reduce", shape, sharp, {"NCCL_COLLNET_ENABLE": "1"})
    on = {"NCCL_COLLNET_ENABLE": "1"}
    direct = pred("all_reduce", S, sharp, 16, 2, {**on, "NCCL_ALGO": "CollNetDirect"})
    chain = pred("all_reduce", S, sharp, 16, 2, {**on, "NCCL_ALGO": "CollNetChain"})
    # Direct: 2 (min(1, L-1) 3.7 + (L-1) 0.4) + 31 us, min(E, N) x 0.85; Chain: 2 (L-1) 2.8 + 30 us, min(E, N)
    assert direct.time_us == pytest.approx(2 * (3.7 + 7 * 0.4) + 31 + S / (min(E_H100, NODE) * 0.85e9) * 1e6)
    assert chain.time_us == pytest.approx(2 * 7 * 2.8 + 30 + S / (min(E_H100, NODE) * 1e9) * 1e6)
    # and NVLS across nodes comes with CollNet
    assert nccl.offered("NVLS", "all_reduce", shape, sharp, on) and not nccl.offered("NVLS", "all_reduce", shape,
                                                                                     H100, on)


def test_pat_one_gpu_a_node_by_hand():
    """PAT: 8 + log2(M) x 14/3.5 + n x 2.8 us, the ring's bandwidth x 0.75; only with one GPU a node."""
    ring = pred("all_gather", S, n=4, nodes=4, env={"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"})
    pat = pred("all_gather", S, n=4, nodes=4, env={"NCCL_ALGO": "PAT"})
    ring_lat = nccl.latency_us("all_gather", "Ring", "Simple", 4, 4, "nvlink")
    assert pat.time_us == pytest.approx(8 + 2 * 14 / 3.5 + 4 * 2.8 + (ring.time_us - ring_lat) / 0.75)
    assert pred("all_gather", 1 << 10, n=4, nodes=4).algo == "Ring/LL"          # 6.6 + 3 x 5.0 us beats 27.2
    assert pred("all_gather", 1 << 10, n=64, nodes=64).algo == "PAT/Simple"     # 211 us beats the ring's 322
    assert not nccl.offered("PAT", "all_gather", Shape(16, 8, 2), H100, {})


def test_ceilings_per_algorithm_by_hand():
    one = pred("all_reduce", S)
    assert one.ceilings == pytest.approx({"Tree": 1.75 * 225, "Ring": 450, "NVLS": 1.75 * 450 * 8 / 9})
    assert one.peak_gbps == pytest.approx(700)             # util is over the highest: an NVLS run stays below 1
    two = pred("all_reduce", S, n=16, nodes=2)
    assert two.ceilings == pytest.approx({"Tree": 1.875 * 225, "Ring": 400, "NVLSTree": 1.875 * 400})
    ring_only = pred("all_reduce", S, env={"NCCL_ALGO": "Ring"})
    assert ring_only.ceilings == {"Ring": 450} and ring_only.peak_gbps == 450
    for p in (one, two):                                    # no algorithm's prediction passes its own ceiling
        assert p.busbw_gbps <= p.ceilings[p.algo.split("/")[0]]


def test_what_nccl_offers_follows_version_and_settings():
    shape = Shape(8, 8, 1)
    assert nccl.offered("NVLS", "all_reduce", shape, H100, {})
    assert not nccl.offered("NVLS", "all_reduce", shape, H100, {}, version=(2, 16))   # NVLS came in 2.17
    assert not nccl.offered("NVLS", "all_gather", shape, H100, {}, version=(2, 18))   # all_gather's in 2.19
    assert not nccl.offered("NVLS", "all_reduce", shape, H100, {"NCCL_NVLS_ENABLE": "0"})
    assert not nccl.offered("NVLS", "all_reduce", shape, topology.resolve("dgx-a100"), {})
    assert not nccl.offered("PAT", "all_gather", Shape(4, 1, 4), H100, {}, version=(2, 22))
    assert pred("all_reduce", S, env={"NCCL_NVLS_ENABLE": "0"}).algo == "Ring/Simple"
    assert pred("all_reduce", S, version=(2, 16)).algo == "Ring/Simple"
    assert pred("all_reduce", S).algo == "NVLS/Simple"
