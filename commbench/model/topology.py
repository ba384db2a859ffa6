"""Topology files (topologies/*.yaml): what a system's links can do, validated on load.

A file describes one kind of node and how nodes are joined:

  name            the name records carry and --topology NAME finds
  gpus_per_node   GPUs in one node (0: CPU ranks); a "node" is one intra-node fabric domain
                  (an NVL72 rack is one node of 72 GPUs)
  gpu             free text
  intra_node      fabric: nvswitch | nvlink | pcie | loopback; link (free text);
                  per_gpu_gbps: GB/s one direction into or out of one GPU (loopback: of the node's one
                  loopback queue, which every local rank shares); latency_us: per-step latency;
                  optional: nvlink_gen and nvlink_links (NVLink generation, links per GPU: NCCL's own per-link
                  rate, commbench/model/nccl.py), nvswitch_gen, nvls (true: NVLink SHARP, NCCL's NVLS and
                  NVLSTree algorithms; needs an NVSwitch of generation 3 or later)
  inter_node      nics_per_node; nic (free text); per_nic_gbps: GB/s one direction; latency_us;
                  rank_to_nic: rail (local rank i uses NIC i, NIC i of every node on rail switch i) |
                  shared (the node's NICs serve every local rank); payload_fraction: the share of the
                  line rate a transfer's payload gets (default 1; TCP at MTU 1500: 1448/1514);
                  fabric: network (default) | loopback (nodes emulated on one machine: their traffic shares the
                  intra-node loopback, and the model treats them as one node); sharp: true where the switches
                  reduce in the network (InfiniBand SHARP: NCCL's CollNet algorithms, and NVLS across nodes)
  shared_memory   optional: the tier MPI ranks on one node use: per_rank_gbps (one rank's copy rate),
                  latency_us (default 0: the model's time is then its bandwidth bound)
  per_op_us       optional: a CPU backend's own cost per collective call beyond the tiers' per-step latency, us,
                  per backend (gloo, mpi); `commbench topo --calibrate` measures it, and the model adds it per call
  copy_engine     optional: published copy-engine bandwidth as nvbandwidth measures it (h2d_gbps, d2h_gbps per GPU;
                  d2d_read_gbps, d2d_write_gbps per GPU pair) and its source; `commbench node --level full` sets its own
                  measurement beside them
  ceiling         per tier (intra_node, inter_node, shared_memory): what its rate is (CEILINGS); utilisation and
                  the model need a ceiling, so a tier whose rate is `none` (a reference measurement) gives n/a.
                  Default: datasheet; loopback and shared memory have no datasheet rate, so `none` there.
  references      optional: published measurements of this system (commbench/model/references.py), each with
                  its source; `commbench judge` and `accept --init` start from them

Every file cites its source (a vendor datasheet) in a comment. A malformed file is refused with
one line naming the file and the field. GB/s = 1e9 B/s.
"""
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from benchcore import inputs
from benchcore.errors import UserError
from commbench.model import references

DIR = Path(__file__).resolve().parents[2] / "topologies"
FABRICS = ("nvswitch", "nvlink", "pcie", "loopback")
RANK_TO_NIC = ("rail", "shared")
INTER_FABRICS = ("network", "loopback")
# What a tier's rate is. Every kind but `none` is a ceiling: busbw cannot exceed it.
CEILINGS = {"datasheet": "a vendor datasheet's rate (the file cites it)",
            "reported": "the rate the device reports (NVML, sysfs)",
            "tc": "the rate tc shapes the link to",
            "calibrated": "measured here by commbench topo --calibrate",
            "none": "a reference measurement, not a ceiling"}


def _text(v):
    return isinstance(v, str) and v.strip() != ""


MAX_COUNT = 1 << 16         # GPUs or NICs in one node (an NVL72 rack is 72)
# A number with an exponent (1e3, 1.5e3, 2E-6) is text to PyYAML (YAML 1.1 wants a dot and a signed exponent), a
# number to YAML 1.2 and to people: read as one in the fields that hold numbers (their names end so)
EXPONENT = re.compile(r"[-+]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)[eE][-+]?[0-9]+")
NUMBER_FIELDS = ("_gbps", "_us", "_fraction")
OWN_COST_BACKENDS = {"gloo": "Gloo", "mpi": "MPI"}   # backends whose own per-call cost a topology may hold (per_op_us)
# Copy-engine bandwidth measured as nvbandwidth's CE cases measure it (copy_engine: published per-GPU H2D/D2H and
# per-pair D2D GB/s, with their source): `commbench node --level full` sets its own measurement beside them
COPY_KINDS = ("h2d_gbps", "d2h_gbps", "d2d_read_gbps", "d2d_write_gbps")


def _count(lo):
    return lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= MAX_COUNT


# What a link can physically be (a finite number > 0 is not enough: a rate of 1e-320 GB/s made the model's time
# inf): a rate per direction from 8 Mbit/s (1e-3 GB/s; tc-shaped test links are 400 Mbit/s and up) to 100 TB/s (an
# NVLink 5 GPU moves 0.9 TB/s), a latency or per-call cost up to 1 s, a payload share from 1 % (TCP at MTU 1500: 96 %)
RATE_GBPS = (1e-3, 1e5)
LATENCY_US = (0.0, 1e6)
FRACTION = (0.01, 1.0)


def _number(bounds):
    """A finite number (.inf and .nan are refused) within bounds (lo, hi), both included."""
    lo, hi = bounds
    return lambda v: (isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and lo <= v <= hi)


RATE = (_number(RATE_GBPS), f"a GB/s in {RATE_GBPS[0]:g}..{RATE_GBPS[1]:g} (one direction)")
LATENCY = (_number(LATENCY_US), f"microseconds in {LATENCY_US[0]:g}..{LATENCY_US[1]:g}")


def _choice(options):
    return lambda v: v in options


def _flag(v):
    return isinstance(v, bool)


# field -> (required, valid(value), what a valid value is)
SCHEMA = {
    "name": (True, _text, "a name"),
    "gpus_per_node": (True, _count(0), f"a whole number in 0..{MAX_COUNT}"),
    "gpu": (False, _text, "text"),
    "intra_node.fabric": (True, _choice(FABRICS), "one of " + ", ".join(FABRICS)),
    "intra_node.link": (False, _text, "text"),
    "intra_node.per_gpu_gbps": (True, *RATE),
    "intra_node.latency_us": (True, *LATENCY),
    "intra_node.nvlink_gen": (False, lambda v: _count(1)(v) and v <= 9, "a whole number in 1..9"),
    "intra_node.nvlink_links": (False, _count(1), f"a whole number in 1..{MAX_COUNT}"),
    "intra_node.nvswitch_gen": (False, lambda v: _count(1)(v) and v <= 9, "a whole number in 1..9"),
    "intra_node.nvls": (False, _flag, "true or false"),
    "inter_node.nics_per_node": (True, _count(1), f"a whole number in 1..{MAX_COUNT}"),
    "inter_node.nic": (False, _text, "text"),
    "inter_node.per_nic_gbps": (True, *RATE),
    "inter_node.latency_us": (True, *LATENCY),
    "inter_node.rank_to_nic": (True, _choice(RANK_TO_NIC), "one of " + ", ".join(RANK_TO_NIC)),
    "inter_node.payload_fraction": (False, _number(FRACTION), f"a fraction in {FRACTION[0]:g}..{FRACTION[1]:g}"),
    "inter_node.fabric": (False, _choice(INTER_FABRICS), "one of " + ", ".join(INTER_FABRICS)),
    "inter_node.sharp": (False, _flag, "true or false"),
    "shared_memory.per_rank_gbps": (False, *RATE),
    "shared_memory.latency_us": (False, *LATENCY),
    **{f"{s}.ceiling": (False, _choice(CEILINGS), "one of " + ", ".join(CEILINGS))
       for s in ("intra_node", "inter_node", "shared_memory")},
    **{f"per_op_us.{b}": (False, *LATENCY) for b in OWN_COST_BACKENDS},
    **{f"copy_engine.{k}": (False, *RATE) for k in COPY_KINDS},
    "copy_engine.source": (False, _text, "text: where the copy-engine numbers were published"),
}
SECTIONS = ("intra_node", "inter_node", "shared_memory", "per_op_us", "copy_engine")


@dataclass(frozen=True)
class Topology:
    name: str
    gpus_per_node: int
    fabric: str
    intra_gbps: float
    intra_latency_us: float
    nics_per_node: int
    nic_gbps: float
    inter_latency_us: float
    rank_to_nic: str
    payload_fraction: float = 1.0
    gpu: Optional[str] = None
    link: Optional[str] = None
    nic: Optional[str] = None
    source: Optional[str] = None     # the file it came from, or "detected"
    inter_fabric: str = "network"
    shm_gbps: Optional[float] = None
    shm_latency_us: Optional[float] = None
    intra_ceiling: str = "datasheet"
    inter_ceiling: str = "datasheet"
    shm_ceiling: str = "none"
    nvlink_gen: Optional[int] = None
    nvlink_links: Optional[int] = None
    nvswitch_gen: Optional[int] = None
    nvls: bool = False
    sharp: bool = False
    references: tuple = ()           # commbench/model/references.py: Reference rows
    per_op_us: tuple = ()            # ((backend, us), ...): a CPU backend's own cost per collective call
    copy_engine: tuple = ()          # ((kind, GB/s), ..., ("source", text)): published copy-engine bandwidth

    def own_cost_us(self, backend):
        """The backend's own cost per collective call (per_op_us), or None where the topology has none."""
        return dict(self.per_op_us).get(backend)

    def as_dict(self):
        """The file's layout (what --json and the plan carry)."""
        return {"name": self.name, "gpus_per_node": self.gpus_per_node, "gpu": self.gpu,
                "intra_node": {"fabric": self.fabric, "link": self.link, "per_gpu_gbps": self.intra_gbps,
                               "latency_us": self.intra_latency_us, "ceiling": self.intra_ceiling,
                               "nvlink_gen": self.nvlink_gen, "nvlink_links": self.nvlink_links,
                               "nvswitch_gen": self.nvswitch_gen, "nvls": self.nvls},
                "inter_node": {"nics_per_node": self.nics_per_node, "nic": self.nic, "per_nic_gbps": self.nic_gbps,
                               "latency_us": self.inter_latency_us, "rank_to_nic": self.rank_to_nic,
                               "payload_fraction": self.payload_fraction, "fabric": self.inter_fabric,
                               "ceiling": self.inter_ceiling, "sharp": self.sharp},
                **({"shared_memory": {"per_rank_gbps": self.shm_gbps, "latency_us": self.shm_latency_us,
                                      "ceiling": self.shm_ceiling}} if self.shm_gbps else {}),
                **({"per_op_us": dict(self.per_op_us)} if self.per_op_us else {}),
                **({"copy_engine": dict(self.copy_engine)} if self.copy_engine else {}),
                "source": self.source}


MAX_RANKS = 1 << 20         # ranks of one job: ten times the largest clusters (100,000 GPUs)
OVERSUBSCRIBE = "--oversubscribe"


def layout_problem(topo, ranks, nodes, oversubscribed=False):
    """Why `ranks` over `nodes` cannot be a run on topo (None where it can): 2..MAX_RANKS ranks, at least one per
    node, and on a GPU system at most its GPUs per node unless the ranks share GPUs (oversubscribed)."""
    if ranks < 2:
        return "one rank moves no data: the model needs 2 or more ranks"
    if ranks > MAX_RANKS:
        return f"more than {MAX_RANKS:,} ranks, which no job has"
    if not 1 <= nodes <= ranks:
        return f"{nodes:,} nodes for {ranks:,} ranks: every node holds one rank or more"
    per_node = -(-ranks // nodes)
    if topo.gpus_per_node and per_node > topo.gpus_per_node and not oversubscribed:
        return (f"{per_node:,} ranks per node, but a {topo.name} node has {topo.gpus_per_node} GPUs (give "
                f"{OVERSUBSCRIBE} where ranks share GPUs)")
    return None


def known_fields(key):
    """The fields a topology may have where `key` was found: that section's, or the top level's and the sections
    (the whole list would be a screen long)."""
    section = key.split(".", 1)[0] if "." in key else None
    if section in SECTIONS:
        return ", ".join(k for k in SCHEMA if k.startswith(f"{section}."))
    return ", ".join([k for k in SCHEMA if "." not in k] + [f"{s}.*" for s in SECTIONS])


def validate(data, where):
    """A Topology from a file's parsed YAML; UserError naming `where` and the field otherwise."""
    if not isinstance(data, dict):
        raise UserError(f"{where}: not a topology (a mapping of fields)")
    for section in SECTIONS:
        if section in data and not isinstance(data[section], dict):
            raise UserError(f"{where}: field {section} must be a mapping")
    flat = {k: v for k, v in data.items() if k not in SECTIONS + ("source", "references")}
    flat.update((f"{s}.{k}", v) for s in SECTIONS for k, v in (data.get(s) or {}).items())
    flat = {k: float(v) if (k.endswith(NUMBER_FIELDS) or k.startswith("per_op_us.")) and isinstance(v, str)
            and EXPONENT.fullmatch(v) else v
            for k, v in flat.items()}
    for key in flat:
        if key not in SCHEMA:
            raise UserError(f"{where}: unknown field {inputs.key(key)} (known: {known_fields(key)})")
    for key, (required, valid, what) in SCHEMA.items():
        if key not in flat or flat[key] is None:
            if required:
                raise UserError(f"{where}: missing field {key} ({what})")
        elif not valid(flat[key]):
            raise UserError(f"{where}: field {key}: expected {what}")     # never the value: the file may be anything
    if data.get("shared_memory") and flat.get("shared_memory.per_rank_gbps") is None:
        raise UserError(f"{where}: missing field shared_memory.per_rank_gbps ({RATE[1]})")
    if flat.get("intra_node.nvls") and not (flat.get("intra_node.fabric") == "nvswitch"
                                            and (flat.get("intra_node.nvswitch_gen") or 0) >= 3):
        raise UserError(f"{where}: field intra_node.nvls is true, which needs fabric nvswitch and nvswitch_gen >= 3 "
                        "(NVLink SHARP came with the third NVSwitch)")
    inter_fabric = flat.get("inter_node.fabric") or "network"
    return Topology(name=flat["name"], gpus_per_node=flat["gpus_per_node"], fabric=flat["intra_node.fabric"],
                    intra_gbps=float(flat["intra_node.per_gpu_gbps"]),
                    intra_latency_us=float(flat["intra_node.latency_us"]),
                    nics_per_node=flat["inter_node.nics_per_node"], nic_gbps=float(flat["inter_node.per_nic_gbps"]),
                    inter_latency_us=float(flat["inter_node.latency_us"]), rank_to_nic=flat["inter_node.rank_to_nic"],
                    payload_fraction=float(flat.get("inter_node.payload_fraction") or 1.0), gpu=flat.get("gpu"),
                    link=flat.get("intra_node.link"), nic=flat.get("inter_node.nic"),
                    source=data.get("source") or where, inter_fabric=inter_fabric,
                    shm_gbps=_float(flat.get("shared_memory.per_rank_gbps")),
                    shm_latency_us=float(flat.get("shared_memory.latency_us") or 0.0),
                    intra_ceiling=flat.get("intra_node.ceiling") or _no_datasheet(flat["intra_node.fabric"]),
                    inter_ceiling=flat.get("inter_node.ceiling") or _no_datasheet(inter_fabric),
                    shm_ceiling=flat.get("shared_memory.ceiling") or "none",
                    nvlink_gen=flat.get("intra_node.nvlink_gen"), nvlink_links=flat.get("intra_node.nvlink_links"),
                    nvswitch_gen=flat.get("intra_node.nvswitch_gen"), nvls=bool(flat.get("intra_node.nvls")),
                    sharp=bool(flat.get("inter_node.sharp")),
                    references=references.parse(data.get("references"), where),
                    per_op_us=tuple((b, float(flat[f"per_op_us.{b}"])) for b in OWN_COST_BACKENDS
                                    if flat.get(f"per_op_us.{b}") is not None),
                    copy_engine=tuple((k, flat[f"copy_engine.{k}"]) for k in COPY_KINDS + ("source",)
                                      if flat.get(f"copy_engine.{k}") is not None))


def _float(v):
    return None if v is None else float(v)


def _no_datasheet(fabric):
    """The default ceiling kind of a tier: datasheet, except loopback, which has no line rate."""
    return "none" if fabric == "loopback" else "datasheet"


def load(path):
    """The Topology of a file: a regular UTF-8 YAML file of bounded size, aliases and nesting (benchcore.inputs);
    anything else is refused in one line naming the file, without its content."""
    return validate(inputs.load_yaml(path, "topology file"), f"topology file {inputs.name(path)}")


def known():
    """{name: Topology} of every file in topologies/."""
    out = {}
    for path in sorted(DIR.glob("*.yaml")):
        topo = load(path)
        out[topo.name] = topo
    return out


def resolve(text):
    """--topology FILE|NAME -> Topology: a path when one exists (or it names a .yaml), else a known name."""
    if os.path.exists(text) or text.endswith((".yaml", ".yml")):
        return load(text)
    topos = known()
    if text not in topos:
        raise UserError(f"--topology {inputs.shown(repr(text), 100)}: no such file, and no topology of that name "
                        f"(known: {', '.join(topos)})")
    return topos[text]


def from_dict(data):
    """A Topology back from as_dict() (the plan carries it to the workers)."""
    return None if data is None else validate(data, "plan topology")
