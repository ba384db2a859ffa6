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
The algorithms NCCL adds where the hardware offers them (ALGORITHMS; the topology file says what it has):
  NVLS       NVLink SHARP (nvls: true, NVSwitch 3+): the switch reduces. all_reduce on one node, or across nodes
             with IB SHARP (sharp: true, NCCL_COLLNET_ENABLE=1); all_gather/reduce_scatter on one node. Simple only.
  NVLSTree   NVLS inside each node, a tree between nodes (all_reduce, 2+ nodes). Simple only.
  CollNetDirect, CollNetChain   IB SHARP (sharp: true and NCCL_COLLNET_ENABLE=1): the switches reduce across
             nodes (all_reduce, 2+ nodes; Direct needs an NVSwitch and at most 8 GPUs a node). Simple only.
  PAT        all_gather/reduce_scatter with one GPU per node (NCCL >= 2.23), logarithmic latency. Simple only.
  Sources: v2.27.7 src/graph/tuning.cc (hwLat, the NVLS/CollNet/PAT latency formulas, PAT's 0.75 bandwidth, which
  algorithm runs which collective and protocol), src/enqueue.cc (topoGetAlgoInfo: NVLS across nodes only with
  CollNet, CollNetDirect up to 8 local GPUs, the fastest pair runs); v2.28.3 src/graph/tuning.cc nvlsEfficiency
  (0.85 Hopper, 0.74 Blackwell); v2.27.7 src/graph/topo.h SM80/SM90/SM100_NVLINK_BW (20.0, 20.6, 40.1 GB/s a
  link: what NCCL credits an NVLink with, ~82 % of its line rate). Each algorithm's first version: the release
  that added its NCCL_ALGO_* constant (git tags of NVIDIA/nccl).
  Bandwidth (payload per second, algbw A; busbw = A x the collective's bus factor f): E = NCCL's per-link rate x
  links (the GPU's NVLink rate as NCCL's rings reach it), L GPUs a node, N the node's NICs (rail: min(L, NICs)) at
  NET_EFFICIENCY of their line rate (24 of 25 GB/s: nccl-tests issue #119):
    Ring, Tree     as above, over E instead of the datasheet rate inside a node
    NVLS           A = E L/(L+1) x nvlsEfficiency (each GPU moves S (1 + 1/L) a direction: the switch reads every
                   GPU's data and multicasts the sums); across nodes also <= N; all_gather/reduce_scatter: busbw
                   E x nvlsEfficiency
    NVLSTree       A = min(NVLS's, N on 2 nodes, N/2 on more: a node inside a tree carries 2 S a direction)
    CollNet        A = min(E, N) (each node's sum crosses its NICs once each way; Direct x 0.85 on Hopper+)
    PAT            the ring's busbw x 0.75
  Ceilings (what no run of that algorithm can exceed, busbw; B: the datasheet's per-GPU rate): Ring the link (the
  tier model's peak), Tree f min(B/2, N or N/2), NVLS f B L/(L+1) (and <= f N across nodes; all_gather and
  reduce_scatter: B), NVLSTree f min(B L/(L+1), N or N/2), CollNet f min(B, N), PAT the ring's.
Left out: the per-channel bandwidth caps and the single-node LL cap (they need NCCL's channel count), the tree's
per-size correction factors, the ring Simple "plateau" factor, NVLS's data types (NCCL runs it for sums, min and max
of 16/32/64-bit types only) and buffer registration; broadcast, reduce and point-to-point calls keep the plain
alpha-beta model.
"""
import math
from dataclasses import dataclass, replace

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
COLLECTIVES = {"all_reduce": ("allreduce", lambda n: 2 * (n - 1), lambda m: 2 * (m - 1),
                              ("Ring", "Tree", "NVLS", "NVLSTree", "CollNetDirect", "CollNetChain")),
               "all_gather": ("allgather", lambda n: n - 1, lambda m: m - 1, ("Ring", "NVLS", "PAT")),
               "reduce_scatter": ("reducescatter", lambda n: n - 1, lambda m: m - 1, ("Ring", "NVLS", "PAT"))}
ALGORITHMS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")   # NCCL's order, spelling
SINCE = {"Ring": (1, 0), "Tree": (2, 4), "CollNetDirect": (2, 14), "CollNetChain": (2, 14), "NVLS": (2, 17),
         "NVLSTree": (2, 18), "PAT": (2, 23)}                              # first release with the algorithm
NVLS_GATHER_SINCE = (2, 19)                         # NVLS for all_gather/reduce_scatter (tuning.cc v2.19.3)
SIMPLE_ONLY = ("CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")
NVLINK_GBPS = {3: 20.0, 4: 20.6, 5: 40.1}          # topo.h SM80/SM90/SM100_NVLINK_BW, by NVLink generation
NVLS_EFFICIENCY = {4: 0.85, 5: 0.74}                # tuning.cc v2.28.3 nvlsEfficiency, Hopper (NVLink 4), Blackwell (5)
# latency (us) of the Simple protocol: hwLat[NVLINK][algo], hwLat[NET][algo] (v2.27.7; base latency 0), and PAT's
NEW_HW_US = {"CollNetDirect": (3.7, 31.0), "CollNetChain": (2.8, 30.0), "NVLS": (25.0, 18.0), "NVLSTree": (25.0, 14.0)}
PAT_BASE_US, PAT_PER_RANK_US, PAT_NET_DIVISOR, PAT_FRACTION = 8.0, 2.8, 3.5, 0.75
COLLNET_ARITY_US, COLLNET_DIRECT_MAX_LOCAL, COLLNET_DIRECT_HOPPER = 0.4, 8, 0.85
NET_EFFICIENCY = 0.96     # "24GB/s is the peak performance per 200G NIC (12 GB/s for 100G)": NCCL's maintainer,
                          # NVIDIA/nccl-tests issue #119 (2022-11-17)


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
    net = HW_US["net"]["Tree" if local == 1 else algo][p] if algo in HW_US["net"] else NEW_HW_US.get(algo, (0, 0))[1]
    hops = nodes.bit_length() - 1          # log2 of the node count, as NCCL's log2i
    if algo == "PAT":
        return PAT_BASE_US + hops * HW_US["net"]["Tree"][2] / PAT_NET_DIVISOR + n * PAT_PER_RANK_US
    if algo in NEW_HW_US:
        intra = NEW_HW_US[algo][0]
        net = HW_US["net"]["Tree"][2] if local == 1 else net     # one GPU a node: the tree's network latency
        return {"NVLS": intra + (net if nodes > 1 else 0.0), "NVLSTree": intra + 2 * hops * net,
                "CollNetDirect": 2 * (min(1, local - 1) * intra + (local - 1) * COLLNET_ARITY_US) + net,
                "CollNetChain": 2 * (local - 1) * intra + net}[algo]
    if algo == "Tree":
        return BASE_US[algo][p] + 2 * ((local - 1) * HW_US[link][algo][p] + hops * net)
    inter = net_steps(nodes) if nodes > 1 else 0
    intra = max(HW_US[link][algo][p], NET_OVERHEAD_US[p] if nodes > 1 else 0.0)
    return BASE_US[algo][p] + (steps(n) - inter) * intra + inter * net


def reach(topo):
    """The topology at the rates NCCL's transfers reach: NVLink at NCCL's per-link rate, a NIC at NET_EFFICIENCY of
    its line rate (the model's predictions; ceilings stay the datasheet's)."""
    return replace(topo, intra_gbps=link_gbps(topo), nic_gbps=topo.nic_gbps * NET_EFFICIENCY)


def link_gbps(topo):
    """A GPU's NVLink rate as NCCL credits it (its per-link constant x links), or the datasheet's where the file
    names no NVLink generation and link count."""
    if topo.nvlink_gen in NVLINK_GBPS and topo.nvlink_links:
        return min(topo.intra_gbps, NVLINK_GBPS[topo.nvlink_gen] * topo.nvlink_links)
    return topo.intra_gbps


def node_gbps(topo, local):
    """The payload rate of a node's NICs that `local` GPUs reach (rail: one NIC each)."""
    nics = min(local, topo.nics_per_node) if topo.rank_to_nic == "rail" else topo.nics_per_node
    return nics * topo.nic_gbps * topo.payload_fraction


def bus_factor(collective, n):
    """nccl-tests' busbw / algbw."""
    return (2 if collective == "all_reduce" else 1) * (n - 1) / n


def offered(algo, collective, shape, topo, env, version=None, plausible=False):
    """Whether NCCL may run algo for this call on this topology under env (NCCL_NVLS_ENABLE, NCCL_COLLNET_ENABLE,
    NCCL_PAT_ENABLE) and version ((major, minor); None: the newest). plausible: CollNet counts unless turned off
    (an imported log rarely says NCCL_COLLNET_ENABLE=1)."""
    if algo not in COLLECTIVES[collective][3]:
        return False
    since = NVLS_GATHER_SINCE if algo == "NVLS" and collective != "all_reduce" else SINCE[algo]
    if version is not None and tuple(version) < since:
        return False
    local, nodes = shape.local, shape.nodes
    said = env.get("NCCL_COLLNET_ENABLE")
    collnet = topo.sharp and nodes > 1 and (said == "1" or (plausible and said != "0"))
    nvls = topo.nvls and local > 1 and env.get("NCCL_NVLS_ENABLE") != "0"
    return {"Ring": True, "Tree": True,
            "NVLS": nvls and (nodes == 1 or (collnet and collective == "all_reduce")),
            "NVLSTree": nvls and nodes > 1,
            "CollNetDirect": collnet and topo.fabric == "nvswitch" and local <= COLLNET_DIRECT_MAX_LOCAL,
            "CollNetChain": collnet,
            "PAT": local == 1 and nodes > 1 and env.get("NCCL_PAT_ENABLE") != "0"}[algo]


def algbw_gbps(algo, collective, shape, topo):
    """The payload rate (algbw) of NVLS, NVLSTree and CollNet at large sizes (the module doc's formulas)."""
    link, local, nodes = link_gbps(topo), shape.local, shape.nodes
    net = node_gbps(reach(topo), local)
    nvls = link * local / (local + 1) * NVLS_EFFICIENCY.get(topo.nvlink_gen, NVLS_EFFICIENCY[4])
    if algo == "NVLS" and collective != "all_reduce":
        return link * NVLS_EFFICIENCY.get(topo.nvlink_gen, NVLS_EFFICIENCY[4]) / bus_factor(collective, shape.n)
    if algo == "NVLS":
        return min(nvls, net) if nodes > 1 else nvls
    if algo == "NVLSTree":
        return min(nvls, net if nodes <= 2 else net / 2)
    hopper = algo == "CollNetDirect" and (topo.nvlink_gen or 0) >= 4
    return min(link, net) * (COLLNET_DIRECT_HOPPER if hopper else 1.0)


def ceilings(collective, shape, topo, ring_peak_gbps, env=None, version=None):
    """{algorithm: the busbw no run of it can exceed here} for each algorithm NCCL may have run (plausibly: an
    imported log rarely says which; NCCL_ALGO narrows them), from the datasheet rates; ring_peak_gbps: the tier model's
    ring peak."""
    rate, local, nodes, f = topo.intra_gbps, shape.local, shape.nodes, bus_factor(collective, shape.n)
    net = node_gbps(topo, local)
    tree_net = math.inf if nodes == 1 else net if nodes <= 2 else net / 2
    table = {"Ring": ring_peak_gbps, "PAT": ring_peak_gbps, "Tree": f * min(rate / 2, tree_net),
             "NVLS": (f * min(rate * local / (local + 1), net if nodes > 1 else math.inf)
                      if collective == "all_reduce" else rate),
             "NVLSTree": f * min(rate * local / (local + 1), tree_net),
             "CollNetDirect": f * min(rate, net), "CollNetChain": f * min(rate, net)}
    env = env or {}
    here = [a for a in ALGORITHMS if offered(a, collective, shape, topo, env, version, True)]
    return {a: table[a] for a in allowed(env.get("NCCL_ALGO"), COLLECTIVES[collective][0], here) or here}


def fraction(algo, proto, n, nodes, peak_gbps):
    """The share of the ring's link bandwidth the pair gets, per rank's ring bytes."""
    p = PROTOCOLS.index(proto)
    f = TREE_LL128_ONE_NODE if (algo, proto, nodes) == ("Tree", "LL128", 1) else FRACTION[algo][p]
    if proto == "LL" and nodes > 1 and peak_gbps > 0:
        f = min(f, LL_MAX_GBPS[min(nodes, 3)] / peak_gbps)
    return f * ((n - 1) / n if algo == "Tree" else 1)


def choose(collective, shape, topo, bw_seconds, peak_gbps, calls=1, env=None, version=None):
    """NCCL's pick for `calls` calls of collective on shape, whose ring bytes take bw_seconds at NCCL's link rates
    (peak_gbps: that ring's busbw), among the algorithms offered here under env and version."""
    func, _, _, algos = COLLECTIVES[collective]
    env = env or {}
    link = LINKS[topo.fabric]
    here = [a for a in algos if offered(a, collective, shape, topo, env, version)]
    protos = [p for p in PROTOCOLS if p != "LL128" or link == "nvlink"]
    protos = allowed(env.get("NCCL_PROTO"), func, protos) or protos
    pairs = [(a, p) for a in allowed(env.get("NCCL_ALGO"), func, here) for p in protos
             if p == "Simple" or a not in SIMPLE_ONLY]
    pairs = pairs or [(a, p) for a in here for p in protos if p == "Simple" or a not in SIMPLE_ONLY]
    payload = peak_gbps * bw_seconds / bus_factor(collective, shape.n)      # GB

    def seconds(a, p):
        if a in FRACTION:
            return bw_seconds / fraction(a, p, shape.n, shape.nodes, peak_gbps)
        if a == "PAT":
            return bw_seconds / PAT_FRACTION
        return payload / algbw_gbps(a, collective, shape, topo)

    return min((Choice(f"{a}/{p}", calls * latency_us(collective, a, p, shape.n, shape.nodes, link) * 1e-6
                       + seconds(a, p)) for a, p in pairs), key=lambda c: c.seconds)
