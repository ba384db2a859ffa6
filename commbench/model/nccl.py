"""What NCCL's tuner picks for one call: algorithm (Ring, Tree) and protocol (LL, LL128, Simple), by NCCL's own model.

Source: NVIDIA/nccl v2.27.7, src/graph/tuning.cc (ncclTopoTuneModel: baseLat, hwLat, the bandwidth refinements and
the latency formulas; ncclTopoGetAlgoTime: time = latency + bytes / bandwidth, the fastest pair runs). The constants
used here are the same in v2.23.4 through v2.30.7. NCCL takes the bandwidth from its graph search; here it is the
tier model's (commbench/model/alphabeta.py: the bounding tier's link bandwidth B), scaled by NCCL's fractions.

A call on n ranks, M nodes, L = n / M per node, link = NVLink (nvswitch, nvlink fabrics) or PCI (pcie):
  latency (us)
    Ring  base + (s - s_net) x max(hw[link], net overhead) + s_net x hw[NET]
          s: 2(n-1) steps for all_reduce, n-1 for all_gather and reduce_scatter; s_net: 2(M-1) or M-1 of them
          cross nodes; net overhead, once the ring spans nodes: 1 us per step (3 us Simple), NCCL's x86 Intel value
    Tree  base + 2 ((L-1) hw[link] + log2(M) hw[NET])     all_reduce only
          hw[NET] is the Tree row's where L = 1 ("with ppn=1 latencies are fully exposed")
  bandwidth: B x the fraction below; a tree all_reduce's algbw is busbw / 2 where a ring's is n/(2(n-1)) busbw, so a
    tree moves n/(n-1) x the ring's bytes per rank; LL's busbw is at most llMaxBw across nodes (Intel hosts' row)
  LL128 only where GPUs meet over NVLink (NCCL: typeIntra <= PATH_NVB).

NCCL_ALGO and NCCL_PROTO in effect narrow the choice as they do in NCCL ('Tree,Ring', '^LL', 'allreduce:tree;...');
a setting that leaves nothing modelled here (NCCL_ALGO=NVLS) leaves the choice open.
Left out: NVLS, NVLS Tree, CollNet and PAT (NVLink SHARP, SHARP switches, or one GPU per node), the per-channel
bandwidth caps and the single-node LL cap (they need NCCL's channel count and GPU generation), the tree's per-size
correction factors and the ring Simple "plateau" factor; broadcast, reduce and point-to-point calls keep the plain
alpha-beta model.
"""
from dataclasses import dataclass

PROTOCOLS = ("LL", "LL128", "Simple")
BASE_US = {"Tree": (6.8, 14.0, 8.4), "Ring": (6.6, 14.0, 8.4)}          # baseLat, per protocol
HW_US = {"nvlink": {"Tree": (0.6, 1.25, 4.0), "Ring": (0.6, 1.9, 3.4)},  # hwLat[link][algorithm], per protocol
         "pci": {"Tree": (1.0, 1.9, 4.0), "Ring": (1.0, 2.5, 5.7)},
         "net": {"Tree": (5.0, 8.5, 14.0), "Ring": (2.7, 4.0, 14.0)}}
NET_OVERHEAD_US = (1.0, 1.0, 3.0)                                        # getNetOverhead (Intel x86), x3 for Simple
FRACTION = {"Ring": (0.5, 0.92, 1.0), "Tree": (0.92 / 3.8, 0.92 * 120 / 128, 0.92)}
TREE_LL128_ONE_NODE = 0.92 * 7 / 9
LL_MAX_GBPS = {2: 39.0, 3: 20.4}                                         # llMaxBws, Intel row: 2 nodes, more
LINKS = {"nvswitch": "nvlink", "nvlink": "nvlink", "pcie": "pci"}         # topology fabric -> NCCL's link type
# collective -> (its name in NCCL_ALGO/NCCL_PROTO, steps on n ranks, steps across M nodes, algorithms modelled)
COLLECTIVES = {"all_reduce": ("allreduce", lambda n: 2 * (n - 1), lambda m: 2 * (m - 1), ("Ring", "Tree")),
               "all_gather": ("allgather", lambda n: n - 1, lambda m: m - 1, ("Ring",)),
               "reduce_scatter": ("reducescatter", lambda n: n - 1, lambda m: m - 1, ("Ring",))}


@dataclass(frozen=True)
class Choice:
    name: str          # "Tree/LL"
    seconds: float     # calls x latency + the bytes at the pair's bandwidth


def covers(topo, backend, collective):
    """Whether NCCL's tuner decides this call: an NCCL backend on GPU links, a collective modelled here."""
    return backend == "nccl" and topo.fabric in LINKS and collective in COLLECTIVES


def allowed(text, func, names):
    """The names an NCCL_ALGO / NCCL_PROTO value enables for NCCL function func (NCCL's list syntax)."""
    on = list(names)
    for part in (text or "").split(";"):
        prefix, _, items = part.rpartition(":")
        if prefix and prefix.strip().lower() != func:
            continue
        items = items.strip()
        listed = {t.strip().lower() for t in items.lstrip("^").split(",")}
        on = [x for x in names if (x.lower() in listed) != items.startswith("^")]
    return on


def latency_us(collective, algo, proto, n, nodes, link):
    """NCCL's latency of one call (the module doc's formulas)."""
    _, steps, net_steps, _ = COLLECTIVES[collective]
    p, local = PROTOCOLS.index(proto), max(1, n // nodes)
    net = HW_US["net"]["Tree" if local == 1 else algo][p]
    if algo == "Tree":
        return BASE_US[algo][p] + 2 * ((local - 1) * HW_US[link][algo][p] + (nodes.bit_length() - 1) * net)
    inter = net_steps(nodes) if nodes > 1 else 0
    intra = max(HW_US[link][algo][p], NET_OVERHEAD_US[p] if nodes > 1 else 0.0)
    return BASE_US[algo][p] + (steps(n) - inter) * intra + inter * net


def fraction(algo, proto, n, nodes, peak_gbps):
    """The share of the ring's link bandwidth the pair gets, per rank's ring bytes."""
    p = PROTOCOLS.index(proto)
    f = TREE_LL128_ONE_NODE if (algo, proto, nodes) == ("Tree", "LL128", 1) else FRACTION[algo][p]
    if proto == "LL" and nodes > 1 and peak_gbps > 0:
        f = min(f, LL_MAX_GBPS[min(nodes, 3)] / peak_gbps)
    return f * ((n - 1) / n if algo == "Tree" else 1)


def choose(collective, shape, topo, bw_seconds, peak_gbps, calls=1, env=None):
    """NCCL's pick for `calls` calls of collective on shape, whose ring bytes take bw_seconds at the links' peak."""
    func, _, _, algos = COLLECTIVES[collective]
    env = env or {}
    link = LINKS[topo.fabric]
    algos = allowed(env.get("NCCL_ALGO"), func, algos) or algos
    protos = [p for p in PROTOCOLS if p != "LL128" or link == "nvlink"]
    protos = allowed(env.get("NCCL_PROTO"), func, protos) or protos
    return min((Choice(f"{a}/{p}", calls * latency_us(collective, a, p, shape.n, shape.nodes, link) * 1e-6
                       + bw_seconds / fraction(a, p, shape.n, shape.nodes, peak_gbps))
                for a in algos for p in protos), key=lambda c: c.seconds)
