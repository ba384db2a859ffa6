"""Open MPI: which PML the rank selected and which BTL carries its messages to each peer, from Open MPI's own
selection output. Before MPI_Init the rank asks for the PML and BTL frameworks' verbose output
(OMPI_MCA_pml_base_verbose, OMPI_MCA_btl_base_verbose) and points Open MPI's output stream at a private unlinked
file (OPAL_OUTPUT_STDERR_FD, read by opal_output at initialisation), never the tables or the rank's stderr; after the
first collective it reads "select: component ob1 selected" and "mca: bml: Using sm btl for send to [[job,1],1]"
from it. A user who set either verbose variable or that descriptor keeps their output where they put it; the
evidence is then `unknown`, as it is under any MPI that is not Open MPI.
"""
import os
import re
import tempfile
import time

APPLIED, NOT_APPLIED, UNKNOWN = "applied", "not applied", "unknown"   # applied.py's statuses (it imports this)
VERBOSE = {"OMPI_MCA_pml_base_verbose": "100", "OMPI_MCA_btl_base_verbose": "100"}
FD_ENV = "OPAL_OUTPUT_STDERR_FD"
MAX_BYTES = 1 << 20   # read at most this much (2 ranks here: about 100 lines, 5.8 KB per rank at start-up)
# the lines' formats: Open MPI's ompi/mca/pml/base/pml_base_select.c ("select: component %s selected") and
# ompi/mca/bml/r2/bml_r2.c ("mca: bml: Using %s btl for send to %s on node %s", the peer as [[job,family],rank]),
# the bml line alike in the 4.x and 5.0 sources; both lines seen here from the 5.0.11 wheel
_PML = re.compile(r"select: component (\S+) selected")
_BTL = re.compile(r"mca: bml: Using (\S+) btl for send to \[\[\d+,\d+\],(\d+)\]")
_capture = {}         # the open file of this process's capture (it must stay open: Open MPI writes to it)


def capture():
    """Before MPI_Init: Open MPI's selection output into a private unlinked file; False (nothing changed) where the
    user set their own verbose output."""
    if any(k in os.environ for k in (*VERBOSE, FD_ENV)):
        return False
    f = tempfile.TemporaryFile(prefix="commbench-mpi-")   # unlinked at once (O_TMPFILE where the kernel has it)
    _capture["file"] = f
    os.environ.update(VERBOSE, **{FD_ENV: str(f.fileno())})
    return True


def rank_evidence():
    """This rank's selection: {"pml": name or None, "btl": {peer rank: btl}, "read": bool, "read_bytes": the
    capture's size}."""
    f = _capture.get("file")
    if f is None:
        return {"pml": None, "btl": {}, "read": False, "read_bytes": 0}
    raw = os.pread(f.fileno(), MAX_BYTES, 0)
    text = raw.decode(errors="replace")
    pml = _PML.findall(text)
    return {"pml": pml[-1] if pml else None, "btl": {int(p): b for b, p in _BTL.findall(text)}, "read": True,
            "read_bytes": len(raw)}


def effective(per_rank):
    """The record's `effective` block from every rank's rank_evidence (index = rank): the PML (one name, or per
    rank where they differ), the BTLs that carry messages between ranks, each rank's BTL per peer."""
    pmls = {ev["pml"] for ev in per_rank}
    links = {str(r): {str(p): b for p, b in sorted(ev["btl"].items()) if p != r} for r, ev in enumerate(per_rank)}
    used = sorted({b for peers in links.values() for b in peers.values()})
    shown = [f"rank {r} to {p}: {b}" for r, peers in links.items() for p, b in peers.items()][:4]
    return {"transport": "mpi",
            "pml": pmls.pop() if len(pmls) == 1 else {str(r): ev["pml"] for r, ev in enumerate(per_rank)},
            "btl": used, "links": links, "read": all(ev["read"] for ev in per_rank),
            "read_bytes": {str(r): ev.get("read_bytes", 0) for r, ev in enumerate(per_rank)},
            "evidence": "; ".join(shown)}


def collect(comm):
    """Every rank's evidence gathered (after the first collective: Open MPI adds its peers by then), as
    `effective`; collect_s: the slowest rank's seconds reading and gathering it."""
    t0 = time.perf_counter()
    found = comm.gather_object(rank_evidence())
    return {**effective(found), "collect_s": round(max(comm.gather_object(time.perf_counter() - t0)), 6)}


def _allows(value, name):
    """Whether an MCA component list ('self,tcp' or the exclusion '^sm,ofi') lets component `name` run."""
    names = [v.strip() for v in value.lstrip("^").split(",") if v.strip()]
    return (name not in names) if value.startswith("^") else (name in names)


def _unread(eff):
    if eff.get("transport") != "mpi":
        return f"not an MPI run ({eff.get('transport')}): Open MPI's selection was not read"
    if not eff.get("read"):
        return "Open MPI's selection output was not captured (the user's own *_base_verbose or OPAL_OUTPUT_STDERR_FD)"
    return None


def judge_pml(eff, value):
    """OMPI_MCA_pml: applied when the PML every rank selected is one the value allows."""
    why = _unread(eff)
    if why:
        return UNKNOWN, why
    pml = eff.get("pml")
    if not isinstance(pml, str):
        return UNKNOWN, f"no rank's selection line was seen ({pml})" if pml is None else f"ranks differ: {pml}"
    ok = _allows(value, pml)
    return (APPLIED if ok else NOT_APPLIED), f"Open MPI selected pml {pml} on every rank"


def judge_btl(eff, value):
    """OMPI_MCA_btl: applied when every BTL that carries messages between ranks is one the value allows (self,
    a rank's messages to itself, is not judged)."""
    why = _unread(eff)
    if why:
        return UNKNOWN, why
    pml = eff.get("pml")
    if isinstance(pml, str) and pml != "ob1":
        return NOT_APPLIED, f"Open MPI selected pml {pml}, which carries messages without a BTL"
    if not eff.get("btl"):
        return UNKNOWN, "no rank said which BTL reaches a peer (one rank, or none was added yet)"
    off = [b for b in eff["btl"] if not _allows(value, b)]
    links = eff.get("evidence") or ""
    if off:
        return NOT_APPLIED, f"btl {','.join(off)} carried messages between ranks ({links})"
    return APPLIED, f"only btl {','.join(eff['btl'])} carried messages between ranks ({links})"
