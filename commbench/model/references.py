"""Published reference numbers in a topology file (`references:`): what this kind of system measured, with its source.

Each entry is a mapping:

  collective  an nccl-tests collective (all_reduce, all_gather, ...)
  size        the message size the number was taken at (8G, 16G; nccl-tests' size column)
  nodes       how many of the file's nodes ran it; ranks: how many GPUs in all (default nodes x gpus_per_node)
  algorithm   what NCCL ran, where the source says (Ring, Tree, NVLS, NVLSTree, CollNetDirect, CollNetChain, PAT);
              left out: not said
  busbw       GB/s: one number, or [low, high] where the source gives a range (several runs or systems)
  kind        measured (default) | threshold: a provider's pass mark (at least this much), not a measurement
  nccl        the NCCL version, where the source says
  source      where it was published (a URL; an issue, a page, a health check's configuration file)
  date        when (YYYY-MM or YYYY-MM-DD)
  note        optional free text

A malformed entry is refused in one line naming the file and the entry.
"""
import datetime
import math
import re
from dataclasses import dataclass
from typing import Optional

from benchcore.errors import UserError
from benchcore.inputs import key as key_of
from benchcore.units import format_size, parse_size

ALGORITHMS = ("Ring", "Tree", "NVLS", "NVLSTree", "CollNetDirect", "CollNetChain", "PAT")   # NCCL's spellings
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "alltoall", "sendrecv")
KINDS = ("measured", "threshold")
DATE = re.compile(r"(19|20)\d\d-(0[1-9]|1[0-2])(-(0[1-9]|[12]\d|3[01]))?")
FIELDS = ("collective", "size", "nodes", "ranks", "algorithm", "busbw", "kind", "nccl", "source", "date", "note")
MIN_GBPS, MAX_GBPS = 1e-3, 1e5   # 8 Mbit/s to 100 TB/s: a rate outside is a typo (topology.RATE_GBPS)
MAX_ENTRIES = 200


@dataclass(frozen=True)
class Reference:
    collective: str
    size_bytes: int
    nodes: int
    low: float                # GB/s busbw; low == high for one number
    high: float
    source: str
    date: str
    algorithm: Optional[str] = None
    ranks: Optional[int] = None
    kind: str = "measured"
    nccl: Optional[str] = None
    note: Optional[str] = None

    def label(self):
        """'NVLS 473-482 GB/s at 16G (NCCL 2.27)' as the judge shows it."""
        value = f"{self.low:g}" if self.low == self.high else f"{self.low:g}-{self.high:g}"
        what = "threshold >= " if self.kind == "threshold" else ""
        return (f"{self.algorithm + ' ' if self.algorithm else ''}{what}{value} GB/s at {format_size(self.size_bytes)}"
                + (f" (NCCL {self.nccl})" if self.nccl else ""))


def _number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and MIN_GBPS <= v <= MAX_GBPS


def _whole(v):
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 1 << 20


def _text(v):
    return isinstance(v, str) and v.strip() != "" and len(v) <= 500


def _one(entry, where):
    if not isinstance(entry, dict):
        raise UserError(f"{where}: not a mapping of fields")
    for key in entry:
        if key not in FIELDS:
            raise UserError(f"{where}: unknown field {key_of(key)} (known: {', '.join(FIELDS)})")
    if isinstance(entry.get("date"), datetime.date):      # YAML reads 2024-05-06 as a date
        entry = {**entry, "date": entry["date"].isoformat()}
    busbw = entry.get("busbw")
    pair = busbw if isinstance(busbw, list) else [busbw]
    checks = [
        ("collective", entry.get("collective") in COLLECTIVES, "one of " + ", ".join(COLLECTIVES)),
        ("size", isinstance(entry.get("size"), (str, int)) and not isinstance(entry.get("size"), bool),
         "a size (8G, 16G)"),
        ("nodes", _whole(entry.get("nodes")), "a whole number >= 1"),
        ("ranks", entry.get("ranks") is None or _whole(entry.get("ranks")), "a whole number >= 1"),
        ("algorithm", entry.get("algorithm") in (None,) + ALGORITHMS, "one of " + ", ".join(ALGORITHMS)),
        ("busbw", len(pair) in (1, 2) and all(_number(x) for x in pair) and pair[0] <= pair[-1],
         f"GB/s in {MIN_GBPS:g}..{MAX_GBPS:g}, or [low, high]"),
        ("kind", entry.get("kind", "measured") in KINDS, "one of " + ", ".join(KINDS)),
        ("nccl", entry.get("nccl") is None or _text(str(entry.get("nccl"))), "a version"),
        ("source", _text(entry.get("source")) and entry["source"].startswith(("https://", "http://")),
         "the URL it was published at"),
        ("date", isinstance(entry.get("date"), str) and bool(DATE.fullmatch(entry["date"])), "YYYY-MM or YYYY-MM-DD"),
        ("note", entry.get("note") is None or _text(entry.get("note")), "text"),
    ]
    for key, ok, what in checks:
        if not ok:
            raise UserError(f"{where}: field {key}: expected {what}")     # never the value: the file may be anything
    try:
        size = parse_size(str(entry["size"]))
    except (UserError, ValueError):
        raise UserError(f"{where}: field size: expected a size (8G, 16G)") from None
    return Reference(collective=entry["collective"], size_bytes=size, nodes=entry["nodes"], low=float(pair[0]),
                     high=float(pair[-1]), source=entry["source"], date=entry["date"],
                     algorithm=entry.get("algorithm"), ranks=entry.get("ranks"), kind=entry.get("kind", "measured"),
                     nccl=None if entry.get("nccl") is None else str(entry["nccl"]), note=entry.get("note"))


def parse(data, where):
    """The Reference rows of a topology file's `references:` (None: none)."""
    if data is None:
        return ()
    if not isinstance(data, list) or len(data) > MAX_ENTRIES:
        raise UserError(f"{where}: field references must be a list (at most {MAX_ENTRIES} entries)")
    return tuple(_one(entry, f"{where}: references[{i}]") for i, entry in enumerate(data))


def matching(topo, collective, ranks, nodes, size_bytes=None, algorithm=None):
    """The topology's references for this collective on as many ranks and nodes (at size_bytes, if given, within a
    factor of 2: busbw is flat there at large sizes), measurements before thresholds."""
    out = [r for r in topo.references if r.collective == collective and r.nodes == nodes
           and (r.ranks or r.nodes * topo.gpus_per_node) == ranks
           and (size_bytes is None or r.size_bytes / 2 <= size_bytes <= r.size_bytes * 2)
           and (algorithm is None or r.algorithm == algorithm)]
    return sorted(out, key=lambda r: (r.kind != "measured", r.size_bytes))
