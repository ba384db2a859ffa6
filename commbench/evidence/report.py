"""The evidence of each run, one line per run, for the report's notes: what the transport reported it ran (NCCL's
summary line; Gloo's and MPI's transport) and each requested setting applied or not. Records imported from nccl-tests
logs get their log's NCCL lines first (nccl.attach)."""
from benchcore.results import schema
from commbench.evidence import nccl

MAX_RUNS = 50          # runs named one by one; the rest counted


def run_line(recs):
    """One run's evidence line (None where its records carry none)."""
    effs = [r.get("effective") for r in recs if r.get("effective")]
    if not effs:
        return None
    line = nccl.run_summary(effs) or f"{effs[-1].get('transport', 'transport')} evidence"
    applied = {}
    for rec in recs:
        applied.update(rec.get("applied") or {})
    if applied:
        line += "; settings: " + ", ".join(f"{var} {v.get('status')}" + (
            f" ({v.get('evidence')})" if v.get("status") == "not applied" else "") for var, v in applied.items())
    return line


def evidence_events(records):
    """Events ('evidence', one per run that has some) for the report's notes."""
    records = nccl.attach([dict(r) for r in records])
    runs = {}
    for rec in records:
        if not rec.get("event"):
            runs.setdefault(rec.get("run_id") or rec.get("source_file") or "?", []).append(rec)
    out = []
    for run, recs in list(runs.items())[:MAX_RUNS]:
        line = run_line(recs)
        if line:
            out.append(schema.event("commbench", "evidence", f"run {run}: {line}", run_id=recs[0].get("run_id")))
    if len(runs) > MAX_RUNS:
        out.append(schema.event("commbench", "evidence", f"{len(runs) - MAX_RUNS} more runs not shown"))
    return out
