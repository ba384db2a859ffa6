"""Is this number normal? Measured busbw against what the hardware delivers: the model per algorithm, the ceiling
of each algorithm NCCL may have run, and the topology's published references (commbench/model/references.py).

Per collective, size, ranks and nodes (the median busbw of the records there), one class and one line:

  impossible        above every ceiling of the algorithms NCCL may have run: a wrong size, rank count or bus
                    factor (or topology), never hardware performing as designed
  nvls              an in-switch reduction's level (NVLS, NVLSTree, CollNet) where the model expects one
  ring-where-nvls   a ring's level where the model expects NVLS: NVLS off (NCCL_NVLS_ENABLE, nvidia-fabricmanager,
                    the driver)
  ring              a ring's (or tree's) level where no NVLS is expected
  slow              below LEVEL_SHARE of the ring's level (published, else the model's): a slow GPU or link, or
                    below a provider's pass mark (a threshold reference)
  latency           a size where the model's busbw is below PLATEAU of its large-size value: latency decides,
                    and the levels above do not apply (not judged)
  rising            a size whose busbw is below RISING of the best the records measured for that collective, ranks
                    and nodes: the busbw still rises there (not judged; the larger sizes are)
  unjudged          no published value, and NCCL's tuner model does not cover the collective (sendrecv, alltoall,
                    broadcast...): util only

Levels: the published range for the algorithm family at that size (within a factor of 2), else the model's
busbw. Which algorithm ran is known where NCCL's own TUNING line says it (the record's effective block: a run's,
or an imported log's INFO lines, commbench/evidence/nccl.py), else where NCCL_ALGO names one (the record's env, or
--env); util is over that algorithm's ceiling, over the highest ceiling otherwise, and the line says which ceiling
it is and what named the algorithm. NVLS's level is told apart from the ring's only
where they differ by more than DISTINCT.
"""
import math
import statistics
from dataclasses import dataclass, field, replace
from typing import Optional

from benchcore.units import format_size
from commbench.cases.case import TOTAL
from commbench.cases.registry import CASES
from commbench.model import nccl
from commbench.model.alphabeta import Shape, predict
from commbench.model.references import matching
from commbench.model.topology import layout_problem

LEVEL_SHARE = 0.9          # at least this share of a level counts as that level (the "below 0.9")
PLATEAU = 0.75             # the model's busbw at a size over its busbw at PLATEAU_SIZE: below, latency decides
PLATEAU_SIZE = 8 << 30
RISING = 0.95             # a size's busbw over the best measured: below, the busbw still rises
DISTINCT = 1.05            # NVLS's level over the ring's: below this the two are not told apart
CEILING_SLACK = 1.005      # rounding in a log's printed busbw
SWITCH = ("NVLS", "NVLSTree", "CollNetDirect", "CollNetChain")     # the switch reduces: "NVLS-level"
FAILING = ("impossible", "ring-where-nvls", "slow")      # exit status 1


@dataclass
class Row:
    collective: str
    size_bytes: int
    ranks: int
    nodes: int
    busbw: float
    klass: str
    line: str
    util: Optional[float] = None
    ceiling: Optional[str] = None      # "NVLS 700" : the ceiling util is over
    model: str = ""                    # "Ring 370 · NVLS 490": the model's busbw per algorithm
    published: str = ""                # the references' labels
    expected: Optional[str] = None     # the model's pick
    algo: Optional[str] = None         # the algorithm that ran, where known
    algo_from: str = ""                # what says so: NCCL's TUNING line ("evidence") or NCCL_ALGO
    placement: str = ""                # which records the busbw is the median of: PLACEMENTS' words
    model_gbps: dict = field(default_factory=dict)     # {algorithm: the model's busbw}
    ceiling_gbps: Optional[float] = None
    references: tuple = ()             # the matching Reference rows
    plateau_gbps: Optional[float] = None    # the model's busbw at PLATEAU_SIZE or more (the latency band's base)
    best_gbps: Optional[float] = None       # the best busbw measured there, at best_size (the rising band's base)
    best_size: Optional[int] = None

    def as_dict(self):
        """The verdict row: what judge prints, and what report --topology draws (the model per algorithm, the
        ceiling, each reference's range with its source)."""
        return {"collective": self.collective, "size": format_size(self.size_bytes), "size_bytes": self.size_bytes,
                "ranks": self.ranks, "nodes": self.nodes, "busbw_gbps": self.busbw, "class": self.klass,
                "diagnosis": self.line, "link_utilization": self.util, "ceiling": self.ceiling, "model": self.model,
                "published": self.published, "expected_algo": self.expected, "algo": self.algo,
                "algo_from": self.algo_from, "placement": self.placement, "model_gbps": self.model_gbps,
                "ceiling_gbps": self.ceiling_gbps, "plateau_gbps": self.plateau_gbps, "best_gbps": self.best_gbps,
                "best_size_bytes": self.best_size,
                "references": [{"label": r.label(), "low": r.low, "high": r.high, "size_bytes": r.size_bytes,
                                "kind": r.kind, "algorithm": r.algorithm, "source": r.source, "date": r.date}
                               for r in self.references]}


def version_of(rec):
    """NCCL's (major, minor) from a record's versions, None where it does not say."""
    text = str((rec.get("versions") or {}).get("nccl") or "")
    parts = text.split(".")
    return (int(parts[0]), int(parts[1])) if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit() else None


def _predict(collective, size, topo, n, nodes, env, version):
    cfg = {"case": collective, "dtype": "float32", "op": "sum", "root": 0, "in_place": True}
    return predict(CASES[collective], cfg, size, topo, n, nodes, "nccl", env, version)[TOTAL]


def _per_algorithm(collective, size, topo, n, nodes, env, version):
    """{algorithm: the model's busbw} for each algorithm NCCL may run here (NCCL_ALGO narrowing)."""
    shape = Shape(n, max(1, n // nodes), nodes)
    if not nccl.covers(topo, "nccl", collective):
        return {"Ring": _predict(collective, size, topo, n, nodes, env, version).busbw_gbps}
    here = [a for a in nccl.ALGORITHMS if nccl.offered(a, collective, shape, topo, env, version)]
    here = nccl.allowed(env.get("NCCL_ALGO"), nccl.COLLECTIVES[collective][0], here) or here
    return {a: _predict(collective, size, topo, n, nodes, {**env, "NCCL_ALGO": a}, version).busbw_gbps for a in here}


def _level(refs, family, model):
    """(low, high, label) of the published range for an algorithm family, else the model's busbw."""
    mine = [r for r in refs if r.kind == "measured" and r.algorithm in family]
    if mine:
        return min(r.low for r in mine), max(r.high for r in mine), "published"
    values = [v for a, v in model.items() if a in family and v]
    return (max(values), max(values), "model") if values else (None, None, None)


def _span(low, high):
    return f"{low:.0f}" if round(low) == round(high) else f"{low:.0f}-{high:.0f}"


def judge_one(collective, size, n, nodes, busbw, topo, env=None, version=None, best=None, ran=None, best_at=None):
    """The Row of one measurement: busbw GB/s of collective at size on n ranks over nodes of topo (best: the highest
    busbw measured at any size there, at size best_at; ran: the algorithm NCCL's own TUNING line says ran, which
    comes before NCCL_ALGO). Its diagnosis ends with which of them named the algorithm."""
    env = env or {}
    named_algo = env.get("NCCL_ALGO")
    if ran:      # what NCCL says it ran stands over what it was asked: every algorithm's ceiling, util over ran's
        env = {k: v for k, v in env.items() if k != "NCCL_ALGO"}
    row = _judge_one(collective, size, n, nodes, busbw, topo, env, version, best, ran, best_at)
    row.algo, row.algo_from = (ran, "evidence") if ran else (named_algo, "NCCL_ALGO") if named_algo else (None, "")
    row.line += (f" [algorithm {ran}: NCCL's own TUNING line]" if ran else
                 f" [algorithm from NCCL_ALGO={named_algo}]" if named_algo else
                 " [algorithm not shown: no TUNING line in the log, no NCCL_ALGO]")
    return row


def _judge_one(collective, size, n, nodes, busbw, topo, env, version, best, ran, best_at):
    pred = _predict(collective, size, topo, n, nodes, env, version)
    ceilings = pred.ceilings or {"Ring": pred.peak_gbps}
    top = ran if ran in ceilings else max(ceilings, key=lambda a: (ceilings[a], a in SWITCH))
    model = _per_algorithm(collective, size, topo, n, nodes, env, version)
    expected = (pred.algo or "Ring").split("/")[0]
    refs = matching(topo, collective, n, nodes, size)
    plateau = _predict(collective, max(size, PLATEAU_SIZE), topo, n, nodes, env, version).busbw_gbps
    base = dict(collective=collective, size_bytes=size, ranks=n, nodes=nodes, busbw=busbw,
                util=busbw / ceilings[top], ceiling=f"{top} {ceilings[top]:.0f}", expected=expected,
                model=" · ".join(f"{a} {v:.0f}" for a, v in model.items() if v),
                published="; ".join(r.label() for r in refs), model_gbps=model, ceiling_gbps=ceilings[top],
                references=tuple(refs), plateau_gbps=plateau, best_gbps=best, best_size=best_at)
    if busbw > ceilings[top] * CEILING_SLACK:
        return Row(**base, klass="impossible", line=(
            f"above every known ceiling ({ceilings[top]:.0f} GB/s, {top} on {topo.name}): check the size, the rank "
            f"count or the bus factor (and that {topo.name} is this system)"))
    if pred.busbw_gbps < PLATEAU * plateau:
        return Row(**base, klass="latency", line=(
            f"latency-bound size (the model's busbw {pred.busbw_gbps:.0f} is under {PLATEAU} of its "
            f"{plateau:.0f} at large sizes): not judged"))
    if best and busbw < RISING * best:
        at = f" at {format_size(best_at)}" if best_at else ""
        return Row(**base, klass="rising", line=(
            f"the busbw still rises here ({busbw:.0f}, {busbw / best:.2f} of the best measured {best:.0f}{at}, under "
            f"{RISING}): judged at the larger sizes"))
    if not nccl.covers(topo, "nccl", collective) and not refs:
        return Row(**base, klass="unjudged", line=(
            f"no published value, and NCCL's tuner model does not cover {collective}: util "
            f"{busbw / ceilings[top]:.2f} of the link ({ceilings[top]:.0f} GB/s), not judged"))
    ring_family = tuple(a for a in nccl.ALGORITHMS if a not in SWITCH)
    ring = _level(refs, ring_family, model)
    switch = _level(refs, SWITCH, model)
    unnamed = [r for r in refs if r.kind == "measured" and r.algorithm is None]
    if ring[0] is None and unnamed:
        ring = (min(r.low for r in unnamed), max(r.high for r in unnamed), "published")
    chosen = env.get("NCCL_ALGO") or env.get("NCCL_NVLS_ENABLE") == "0"     # a pass mark presumes the defaults
    marks = [] if chosen else [r for r in refs if r.kind == "threshold" and busbw < r.low]
    if expected in SWITCH and switch[0] and ring[0] and switch[0] > ring[1] * DISTINCT:
        if busbw >= LEVEL_SHARE * switch[0]:
            if not marks:
                return Row(**base, klass="nvls", line=f"NVLS-level ({busbw:.0f} vs {_span(*switch[:2])} {switch[2]})")
        elif busbw >= LEVEL_SHARE * ring[0]:
            return Row(**base, klass="ring-where-nvls", line=(
                f"ring-level ({busbw:.0f} vs ring {_span(*ring[:2])} {ring[2]}) where NVLS is expected "
                f"({_span(*switch[:2])} {switch[2]}): "
                + (f"NCCL ran {ran}; " if ran and ran not in SWITCH else "NVLS off? ")
                + "check NCCL_NVLS_ENABLE, nvidia-fabricmanager, the driver"))
    elif busbw >= LEVEL_SHARE * (ring[0] or math.inf) and not marks:
        return Row(**base, klass="ring", line=f"ring/tree-level ({busbw:.0f} vs {_span(*ring[:2])} {ring[2]})"
                   + ("" if topo.nvls else f"; {topo.name} has no NVLink SHARP"))
    mark = f"under the pass mark {marks[0].low:g} GB/s of {marks[0].source}" if marks else ""
    if ring[0] and busbw < LEVEL_SHARE * ring[0]:
        what = "published ring value" if ring[2] == "published" else "model's ring value"
        mark = f"below {LEVEL_SHARE} of the {what} ({busbw:.0f} vs {_span(*ring[:2])})" + (f", {mark}" if mark else "")
    return Row(**base, klass="slow", line=f"{mark or f'{busbw:.0f} is slow'}: a slow GPU or link")


def judge(records, topo, ranks=None, nodes=None, env=None, oversubscribed=False):
    """Rows, one per collective, size, ranks and nodes the records measured (their median busbw); records whose
    collective the model does not cover, whose ranks or nodes neither they nor the caller say, or whose ranks and
    nodes cannot be a run on topo (topology.layout_problem), are left out and counted: (rows, {reason: count}).
    ranks and nodes, where given, stand over the records' (a log whose device list shows only some ranks)."""
    groups, skipped = {}, {}
    for rec in records:
        n, m = ranks or rec.get("world_size"), nodes or rec.get("nodes")   # the user's word over a partial rank list
        why = (None if rec.get("collective") in CASES and CASES[rec["collective"]].model else "no model for it")
        why = why or (None if rec.get("backend") in (None, "nccl") else "not an NCCL run (the judge knows GPU systems)")
        why = why or (None if topo.gpus_per_node else f"topology {topo.name} has no GPUs")
        why = why or (None if n and m else "the log says no rank or node count (give --ranks and --nodes)")
        why = why or (None if isinstance(n, int) and isinstance(m, int) and not isinstance(n, bool) and
                       not isinstance(m, bool) else "its rank or node count is not a whole number")
        why = why or layout_problem(topo, n, m, oversubscribed)
        busbw = rec.get("busbw_gbps")
        why = why or (None if isinstance(busbw, (int, float)) and math.isfinite(busbw) else "no busbw")
        if why:
            skipped[why] = skipped.get(why, 0) + 1
            continue
        key = (rec["collective"], rec["size_bytes"], n, m)
        mine = groups.setdefault(key, {"busbw": [], "env": dict(rec.get("env") or {}), "version": version_of(rec),
                                       "causes": []})
        mine["busbw"].append(busbw)
        mine.setdefault("placed", set()).add(rec.get("in_place"))
        mine.setdefault("ran", set()).update(c["algo"] for c in (rec.get("effective") or {}).get("choices") or ())
        mine["causes"] += (rec.get("gpu_health") or {}).get("causes") or []   # the sampler's (commbench/health/)
    medians = {key: statistics.median(g["busbw"]) for key, g in groups.items()}
    best = {}
    for (c, size, n, m), value in medians.items():
        best[c, n, m] = max(best.get((c, n, m), (0.0, 0)), (value, size))
    rows = [replace(named(judge_one(c, size, n, m, medians[c, size, n, m], topo, {**g["env"], **(env or {})},
                                    g["version"], *best[c, n, m][:1], _one(g["ran"]), best[c, n, m][1]), g["causes"]),
                    placement=placement(g["placed"], len(g["busbw"])))
            for (c, size, n, m), g in groups.items()]
    return rows, skipped


PLACEMENTS = {True: "in-place", False: "out-of-place"}


def placement(placed, count):
    """Which records a row's busbw is the median of, in words: 'out-of-place and in-place (2 records: their mean)',
    'in-place', or 'placement not recorded'."""
    words = " and ".join(PLACEMENTS[p] for p in (False, True) if p in placed) + \
        (" and unrecorded placements" if placed - set(PLACEMENTS) and placed & set(PLACEMENTS) else "")
    words = words or "placement not recorded"
    return words + ("" if count == 1 else f" ({count} records: their mean)" if count == 2 else
                    f" ({count} records: their median)")


def named(row, causes):
    """A slow row with the likely cause the GPUs' sampler saw during it instead of 'a slow GPU or link'."""
    if row.klass != "slow" or not causes:
        return row
    return replace(row, line=row.line.replace("a slow GPU or link", "; ".join(dict.fromkeys(causes))))


def _one(algos):
    """The algorithm the evidence names for a group, where it names exactly one."""
    return next(iter(algos)) if len(algos) == 1 else None
