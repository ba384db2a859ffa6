"""Whether each requested setting took effect: one row per variable says how it is proven from a run's `effective`
block (what the transport reported it ran: commbench/evidence/nccl.py, gloo.py, mpi.py) and judges it.

A row is `VARIABLE: (how it is proven, judge)`, judge(effective, requested value) -> (status, evidence) with status
"applied", "not applied" or "unknown" and evidence the line that proves it or the reason nothing does. A variable
with no row is "unknown". Add a row with one line in ROWS.
"""

APPLIED, NOT_APPLIED, UNKNOWN = "applied", "not applied", "unknown"

ROWS = {}


def judge_settings(requested_env, effective):
    """The record's `applied` field: {VAR: {status, evidence}} for each variable of requested_env."""
    out = {}
    for var, value in (requested_env or {}).items():
        row = ROWS.get(var)
        if row is None:
            status, why = UNKNOWN, f"no evidence row for {var}: nothing the transport prints proves it"
        elif not effective:
            status, why = UNKNOWN, "the run reported no evidence"
        else:
            status, why = row[1](effective, str(value))
        out[var] = {"status": status, "evidence": why}
    return out
