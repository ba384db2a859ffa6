"""The alpha-beta (latency-bandwidth) model: what a case should take on a topology.

A transfer of m bytes over a link costs alpha + m * beta (Hockney). A collective on n ranks is
a number of steps, each paying a tier's per-step latency alpha, plus the bytes that the busiest
unit of each tier carries, divided by that unit's bandwidth B = 1 / beta. Sources:

  - Thakur, Rabenseifner & Gropp, "Optimization of Collective Communication Operations in MPICH",
    IJHPCA 19(1), 2005: ring all_gather (n-1) alpha + (n-1)/n m beta; reduce_scatter the same;
    all_reduce as reduce_scatter + all_gather, 2(n-1) alpha + 2(n-1)/n m beta (also Patarasuk &
    Yuan 2009, bandwidth-optimal); pairwise-exchange all_to_all (n-1) alpha + (n-1)/n m beta;
    pipelined (chain) broadcast and reduce (n-1) alpha + m beta for large m.
  - NCCL's bus bandwidth (nccl-tests doc/PERFORMANCE.md): busbw = algbw x factor, the factor being
    exactly the per-rank traffic of those ring algorithms over the payload (2(n-1)/n, (n-1)/n, 1),
    so "bus bytes" = factor x size is what every rank pushes through its link, and busbw is
    comparable with the bandwidth of the slowest link. Per-step latencies in topologies/ come from
    NCCL's tuning model (src/graph/tuning.cc, hwLat).

Tiers. A rank's traffic goes either inside its node (tier "intra-node": a GPU's NVSwitch/NVLink/PCIe
port, or, for fabric loopback, the node's one loopback queue that every local rank shares) or
between nodes (tier "inter-node": the node's NICs; rail-optimised, local rank i uses NIC i, so L
ranks use min(L, NICs) NICs; shared, the node's traffic spreads over all of them). In a ring over
M nodes of L ranks each (n = L M), M of the n hops cross nodes: of a rank's bus bytes b, a share
(n - M)/n goes inside the node and M/n between nodes, so a node's NICs carry L M/n b = b in all.
Tiers run concurrently: a phase takes as long as its slowest tier (the tier that bounds it);
phases of a strategy run one after another and add up.

The tier matches the transport: MPI ranks on one node move data through shared memory (tier
"shared-memory", one rank's copy rate), Gloo through TCP loopback (a topology whose intra-node fabric is
not loopback does not describe it), NCCL through the GPU fabric. Nodes emulated on one machine (the
topology's inter-node fabric is loopback) send their inter-node traffic through that machine's intra-node
tier, which all the run's ranks share: 1 and 2 emulated nodes of the same world size predict the same.
A tier's rate is used only where it is a ceiling (topology.CEILINGS); otherwise the prediction is n/a
(None) with the reason.

A CPU backend's own cost per collective call (Gloo's work queue and Python path, 0.2-2 ms on a 2-core machine where
the loopback's per-step latency is 7 us; MPI's, a few us) is no tier's: `commbench topo --calibrate` measures it into
the topology (per_op_us, from a 1-element call) and a collective call on that backend adds it once; a Gloo
all_reduce adds it once per segment its ring sends (gloo_segments: 4 on 2 ranks from 16 B). A calibrated
topology without it (calibrated before it was measured, or MPI where mpi4py was missing) gives the time n/a with
the reason: the model would leave out what small sizes take. Point-to-point phases (p2p, ring's send/recv steps) keep the tiers' latency.

Per transport only the primitives differ: Gloo runs reduce_scatter_tensor as an all_reduce of the
whole input and keeps its slice (measured here: 2.0-2.1x the ring's time through a tc-shaped
loopback, where all_gather took 1.0-1.1x), so under Gloo a reduce_scatter moves all_reduce's bytes.

Each registry row (commbench/cases/collectives.py, commbench/cases/strategies.py) supplies its model:
model(cfg, size, shape, backend) -> {phase: Phase}; this module turns phases into times.
"""
import math
import os
from dataclasses import dataclass
from typing import List, Optional

from benchcore.vocabulary import TYPES
from commbench.model import nccl
from commbench.model.topology import OWN_COST_BACKENDS

INTRA, INTER, SHM = "intra-node", "inter-node", "shared-memory"
ELEMENT_BYTES = {name: d.bytes for name, d in TYPES.items()}
TRANSPORT_TIERS = {("mpi", INTRA): SHM}     # (backend, the case's tier) -> the tier the transport crosses
# backend -> (the intra-node fabrics it can cross, how it moves a node's data)
INTRA_PATHS = {"gloo": (("loopback",), "Gloo moves a node's CPU tensors over TCP loopback"),
               "nccl": (("nvswitch", "nvlink", "pcie"), "NCCL moves a node's GPU buffers over NVLink or PCIe")}


@dataclass(frozen=True)
class Shape:
    """Who takes part: n ranks in the operation, `local` of them per node, on `nodes` nodes, and
    `groups` such operations running at once on every node (hierarchical's L inter-node groups)."""
    n: int
    local: int
    nodes: int
    groups: int = 1


@dataclass(frozen=True)
class Term:
    """One tier's share of a step sequence: steps x alpha + per-rank bytes over the tier's unit."""
    tier: str
    steps: float
    rank_bytes: float
    one_flow: bool = False     # inter-node: one flow per node (a single NIC), not spread over the NICs
    senders: float = 1.0       # share of the ranks that send rank_bytes (a chain's last one sends nothing): what
                               # a loopback all of them share carries


@dataclass
class Phase:
    """One timed phase: its bus factor and terms; terms None: the sum of the case's other phases (TOTAL)."""
    factor: float                       # busbw / algbw of the phase's record
    terms: Optional[List[Term]] = None
    shape: Optional[Shape] = None       # a phase on subgroups (hierarchical); None: the whole run
    nccl: Optional[str] = None          # the collective its calls are: under NCCL its tuner picks algorithm and
    calls: int = 1                      # protocol per call (commbench/model/nccl.py); calls: how many, in sequence


@dataclass(frozen=True)
class Prediction:
    time_us: float             # the model's time
    tier: str                  # the tier that bounds it (the one that takes longest)
    peak_gbps: float           # busbw when every phase runs at its bounding tier's bandwidth, latency left out
    busbw_gbps: float          # the busbw the model predicts: factor x size / time
    algo: Optional[str] = None  # NCCL's pick by its own model ("Tree/LL"), None where the call is not NCCL's
    reason: Optional[str] = None  # why time, peak and busbw are None: a tier it crosses has no ceiling
    time_reason: Optional[str] = None  # why time and busbw are None while peak stands: no own cost per call
    ceilings: Optional[dict] = None    # under NCCL: {algorithm: its busbw ceiling} of those NCCL may run here;
                                       # peak_gbps is then the highest (commbench/model/nccl.py)


def ring_terms(bus_bytes, steps, shape, one_flow=False, senders=1.0):
    """A ring over shape: every step pays the slowest hop's latency (inter-node once it spans nodes);
    bus bytes split (n - M)/n inside the node and M/n across nodes (see the module doc)."""
    n, m = shape.n, shape.nodes
    if n <= 1:
        return []
    if m == 1:
        return [Term(INTRA, steps, bus_bytes, senders=senders)]
    terms = [Term(INTER, steps, bus_bytes * m / n, one_flow, senders)]
    if n > m:
        terms.append(Term(INTRA, 0, bus_bytes * (n - m) / n, senders=senders))
    return terms


# The collectives' terms, one function per nccl-tests collective (its row in commbench/cases/collectives.py
# names it): terms(size, shape, backend) with size the byte count nccl-tests prints for it.

def all_reduce(size, shape, backend):
    """Ring: 2(n-1) alpha + 2(n-1)/n S beta."""
    n = shape.n
    return ring_terms(2 * (n - 1) / n * size, 2 * (n - 1), shape) if n > 1 else []


def all_gather(size, shape, backend):
    """Ring: (n-1) alpha + (n-1)/n S beta, S the gathered array."""
    n = shape.n
    return ring_terms((n - 1) / n * size, n - 1, shape) if n > 1 else []


def reduce_scatter(size, shape, backend):
    """Ring: (n-1) alpha + (n-1)/n S beta, S the scattered input; Gloo moves an all_reduce of S."""
    if backend == "gloo":
        return all_reduce(size, shape, backend)
    return all_gather(size, shape, backend)


def chain(size, shape, backend):
    """Pipelined chain (broadcast, reduce): (n-1) alpha + S beta; n-1 of the n ranks send S."""
    return ring_terms(size, shape.n - 1, shape, senders=(shape.n - 1) / shape.n) if shape.n > 1 else []


def sendrecv(size, shape, backend):
    """To the ring neighbour: alpha + S beta; across nodes one flow per node (one NIC)."""
    return ring_terms(size, 1, shape, one_flow=True) if shape.n > 1 else []


def all_to_all(size, shape, backend):
    """Pairwise exchange: (n-1) alpha + (n-1)/n S beta; S/n to each peer, L-1 of them inside the node and
    n-L on other nodes (all_to_all does not follow a ring, so the node's NICs carry L(n-L)/n S)."""
    n, local = shape.n, shape.local
    if n <= 1:
        return []
    piece = size / n
    terms = [Term(INTER if shape.nodes > 1 else INTRA, n - 1, 0)]
    if shape.nodes > 1:
        terms.append(Term(INTER, 0, piece * (n - local)))
    if local > 1:
        terms.append(Term(INTRA, 0, piece * (local - 1)))
    return terms


@dataclass(frozen=True)
class Tiers:
    """A topology's tiers as `backend` crosses them, for a run of `local` ranks per node and `world` in all:
    alpha (us) and the unit bandwidth (GB/s)."""
    topo: object
    local: int
    backend: str = "nccl"
    world: int = 1

    def name(self, tier):
        """The tier a term of the case's `tier` crosses: emulated nodes' inter-node traffic stays on the machine."""
        if tier == INTER and self.topo.inter_fabric == "loopback":
            tier = INTRA
        return TRANSPORT_TIERS.get((self.backend, tier), tier)

    def rate(self, tier):
        """(GB/s of one unit, alpha us, ceiling kind) of a tier name() gave; GB/s None: the topology lacks it."""
        t = self.topo
        return {INTRA: (t.intra_gbps, t.intra_latency_us, t.intra_ceiling),
                INTER: (t.nic_gbps, t.inter_latency_us, t.inter_ceiling),
                SHM: (t.shm_gbps, t.shm_latency_us, t.shm_ceiling)}[tier]

    def no_ceiling(self, tier):
        """Why the rate of a tier name() gave is no ceiling for this transport (None: it is one)."""
        t, (gbps, _, kind) = self.topo, self.rate(tier)
        if gbps is None:
            return f"topology {t.name} has no shared_memory tier (MPI ranks on one node copy through shared memory)"
        fabrics, path = INTRA_PATHS.get(self.backend, ((t.fabric,), ""))
        if tier == INTRA and t.fabric not in fabrics:
            return f"{path}; topology {t.name} describes {t.fabric}"
        if kind == "none":
            return (f"topology {t.name}'s {tier} rate {gbps:g} GB/s is a reference measurement, not a ceiling "
                    "(commbench topo --calibrate measures this machine's)")
        return None

    def alpha_us(self, tier):
        return self.rate(self.name(tier))[1]

    def unit_load(self, term, active):
        """(bytes through the tier's busiest unit, that unit's GB/s) for term, `active` ranks of the node at it."""
        t, tier = self.topo, self.name(term.tier)
        if tier == SHM:
            return term.rank_bytes, t.shm_gbps                    # each rank's copies on its own core
        if tier == INTRA:
            if t.fabric != "loopback":
                return term.rank_bytes, t.intra_gbps
            # one loopback queue for the whole node; for emulated nodes, for the whole run
            sharing = self.world if t.inter_fabric == "loopback" else active
            return term.rank_bytes * sharing * term.senders, t.intra_gbps
        nics = 1 if term.one_flow else (min(active, t.nics_per_node) if t.rank_to_nic == "rail" else t.nics_per_node)
        return term.rank_bytes * active, nics * t.nic_gbps * t.payload_fraction   # the node's bytes, its NICs


def phase_time(tiers, phase, shape):
    """(seconds, bandwidth-only seconds, bounding tier) of one phase: its slowest tier."""
    active = shape.local * shape.groups
    per_tier = {}
    for term in phase.terms:
        tier = tiers.name(term.tier)
        lat, bw = per_tier.get(tier, (0.0, 0.0))
        load, gbps = tiers.unit_load(term, active)
        per_tier[tier] = (lat + term.steps * tiers.alpha_us(term.tier) * 1e-6, bw + load / (gbps * 1e9))
    if not per_tier:
        return 0.0, 0.0, INTRA
    tier = max(per_tier, key=lambda k: sum(per_tier[k]))
    return sum(per_tier[tier]), max(bw for _, bw in per_tier.values()), tier


def predict(case, cfg, size, topo, world_size, nodes, backend, env=None, version=None):
    """{phase: Prediction} of case config cfg at size bytes, from the row's own model terms.

    A phase's peak is factor x size over its bandwidth-only time, i.e. the busbw at which its bounding
    tier is saturated (for a ring collective: the bandwidth of the slowest tier's unit, as NCCL's
    busbw derivation has it). TOTAL of a multi-phase case is the sum of its phases; its tier is the
    one that spends most of that time. Under NCCL a phase's time is its calls' by NCCL's own model (the fastest
    algorithm and protocol, commbench/model/nccl.py) over NCCL's own link rates; env: the NCCL_* variables in effect
    (the case's own, such as ring's NCCL_ALGO=Ring, apply on top); version: NCCL's (major, minor), None the newest.
    There the peak is the highest ceiling of the algorithms NCCL may run (an NVLS run's busbw exceeds the ring's).
    """
    local = max(1, world_size // max(1, nodes))
    whole = Shape(world_size, local, nodes)
    tiers = Tiers(topo, local, backend, world_size)
    phases = case.model(cfg, size, whole, backend)
    crossed = dict.fromkeys(tiers.name(t.tier) for p in phases.values() for t in p.terms or ())
    why = next(((tier, tiers.no_ceiling(tier)) for tier in crossed if tiers.no_ceiling(tier)), None)
    if why:
        return {name: Prediction(None, why[0], None, None, reason=why[1]) for name in phases}
    env = {**(env or {}), **case.nccl_env}
    own, unsized = own_cost(topo, tiers, crossed, backend)
    out, total, total_bw, spent, algos = {}, 0.0, 0.0, {}, []
    for name, phase in phases.items():
        if phase.terms is not None:
            t, bw, tier = phase_time(tiers, phase, phase.shape or whole)
            algo = None
            call = phase.nccl or (case.collective if case.kind == "collective" else None)  # a collective: one call
            ceilings = None
            if phase.terms and nccl.covers(topo, backend, call):
                shape = phase.shape or whole   # NCCL's transfers reach its per-link rate, not the datasheet's
                reach = phase_time(Tiers(nccl.reach(topo), local, backend, world_size), phase, shape)[1]
                pick = nccl.choose(call, shape, topo, reach, _busbw(phase.factor, size, reach), phase.calls, env,
                                   version)
                t, algo = pick.seconds, pick.name
                ceilings = nccl.ceilings(call, shape, topo, _busbw(phase.factor, size, bw), env, version)
                algos.append(algo)
            elif phase.terms and call and backend in OWN_COST_BACKENDS:   # the backend's own cost, once per call
                sends = gloo_segments(call, size, cfg.get("dtype"), world_size) if backend == "gloo" else 1
                t = None if unsized else t + phase.calls * own * sends * 1e-6
            peak = max(ceilings.values()) if ceilings else _busbw(phase.factor, size, bw)
            out[name] = Prediction(_us(t), tier, peak, _busbw(phase.factor, size, t), algo,
                                   time_reason=unsized if t is None else None, ceilings=ceilings)
            total = None if t is None or total is None else total + t
            total_bw, spent[tier] = total_bw + bw, spent.get(tier, 0.0) + (bw if t is None else t)
    for name, phase in phases.items():
        if phase.terms is None:
            out[name] = Prediction(_us(total), max(spent, key=spent.get) if spent else INTRA,
                                   _busbw(phase.factor, size, total_bw), _busbw(phase.factor, size, total),
                                   " + ".join(algos) or None, time_reason=unsized if total is None else None)
    return out


def gloo_segments(call, size, dtype, ranks):
    """How many 1-element calls' worth of Gloo's own cost one call of size bytes carries. Gloo's ring all_reduce
    (gloo/allreduce.cc) cuts the buffer into 2 x ranks segments of whole elements and sends every non-empty one
    ranks - 1 times in its reduce-scatter and again in its all-gather; a 1-element call (what per_op_us measures)
    sends one. Counted on 2 ranks (torch 2.13, scripts/raw_allreduce_loop.py): 3, 6, 9 and 12 socket writes per
    call and rank at 1, 2, 3 and 4+ float32 elements, still 12 at 4 MiB; the time per call followed them (1 KiB
    took 3-4x a 1-element call). Other calls: one."""
    if call != "all_reduce" or ranks < 2:
        return 1
    return min(2 * ranks, max(1, size // ELEMENT_BYTES.get(dtype, 4)))


def own_cost(topo, tiers, crossed, backend):
    """(the backend's own cost per collective call in us, None) or (None, why the model's time is n/a without it):
    a topology calibrated on this machine must hold it; any other topology's per-step latencies are all it has."""
    if backend not in OWN_COST_BACKENDS:
        return 0.0, None
    own = topo.own_cost_us(backend)
    if own is not None or not any(tiers.rate(tier)[2] == "calibrated" for tier in crossed):
        return own or 0.0, None
    return None, (f"topology {topo.name} has no per_op_us.{backend} ({OWN_COST_BACKENDS[backend]}'s own cost per "
                  "collective call, which no tier counts and small sizes take): commbench topo --calibrate measures it"
                  + (" where mpi4py is installed" if backend == "mpi" else ""))


def _us(seconds):
    return None if seconds is None else seconds * 1e6


def _busbw(factor, size, seconds):
    if seconds is None:
        return None
    return factor * size / seconds / 1e9 if seconds else math.inf


def record_fields(topo, case, cfg, phase, size, world_size, nodes, backend, busbw, env=None):
    """The model's record fields: topology, link_peak_gbps, predicted_time_us, link_utilization, link_tier,
    predicted_algo (NCCL's pick under env, the NCCL_* variables in effect: by default this process's, the worker's)."""
    if topo is None or case.model is None:
        return {"topology": topo.name if topo else None}
    pred = predict(case, cfg, size, topo, world_size, nodes, backend, os.environ if env is None else env).get(phase)
    if pred is None:
        return {"topology": topo.name}
    if pred.reason:      # a tier it crosses has no ceiling: util and model time n/a, and why
        return {"topology": topo.name, "link_tier": pred.tier, "link_peak_reason": pred.reason}
    peak = pred.peak_gbps if math.isfinite(pred.peak_gbps) else None
    return {"topology": topo.name, "link_peak_gbps": peak, "predicted_time_us": pred.time_us,
            "link_utilization": busbw / peak if peak and busbw is not None else None, "link_tier": pred.tier,
            "predicted_algo": pred.algo, **({"predicted_time_reason": pred.time_reason} if pred.time_reason else {})}


def fit_row(case, cfg, size, topo, world_size, nodes, backend, phase):
    """(tier, steps, bytes through its unit) of one measured phase, for fitting alpha and beta of the tier that
    bounds it; None for a sum of phases (a strategy's total), which no single tier bounds."""
    local = max(1, world_size // max(1, nodes))
    whole = Shape(world_size, local, nodes)
    chosen = case.model(cfg, size, whole, backend).get(phase)
    if chosen is None or chosen.terms is None or not chosen.terms:
        return None
    shape, tiers = chosen.shape or whole, Tiers(topo, local, backend, world_size)
    tier = phase_time(tiers, chosen, shape)[2]
    mine = [t for t in chosen.terms if tiers.name(t.tier) == tier]
    return (tier, sum(t.steps for t in mine), sum(tiers.unit_load(t, shape.local * shape.groups)[0] for t in mine))
