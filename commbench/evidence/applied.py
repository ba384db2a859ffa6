"""Whether each requested setting took effect: one row per variable says how it is proven from a run's `effective`
block (what the transport reported it ran: commbench/evidence/nccl.py, gloo.py, mpi.py) and judges it.

A row is `VARIABLE: (how it is proven, judge)`, judge(effective, requested value) -> (status, evidence) with status
"applied", "not applied" or "unknown" and evidence the line that proves it or the reason nothing does. A variable
with no row is "unknown". Add a row with one line in ROWS.
"""

from commbench.evidence import gloo, mpi, nccl_rows

APPLIED, NOT_APPLIED, UNKNOWN = "applied", "not applied", "unknown"

ROWS = {
    "NCCL_ALGO": ("every TUNING choice's algorithm is one NCCL_ALGO allows", nccl_rows.judge_algo),
    "NCCL_PROTO": ("every TUNING choice's protocol is one NCCL_PROTO allows", nccl_rows.judge_proto),
    "NCCL_MIN_NCHANNELS": ("'N coll channels' (INIT) at least the value on every rank", nccl_rows.judge_min_channels),
    "NCCL_MAX_NCHANNELS": ("'N coll channels' (INIT) at most the value on every rank", nccl_rows.judge_max_channels),
    "NCCL_NET_GDR_LEVEL": ("/GDRDMA on every NET channel line (none for LOC)", nccl_rows.judge_gdr_level),
    "NCCL_NET_GDR_READ": ("/GDRDMA on every [send] NET channel line (none for 0)", nccl_rows.judge_gdr_read),
    "NCCL_NVLS_ENABLE": ("'N nvls channels' (INIT) non-zero, or zero for 0", nccl_rows.judge_nvls),
    "NCCL_COLLNET_ENABLE": ("'Connected CollNet' / via COLLNET, or NCCL's reason it disabled CollNet",
                            nccl_rows.judge_collnet),
    "NCCL_IB_HCA": ("the NICs of 'NET/IB : Using' all match the list", nccl_rows.judge_ib_hca),
    "NCCL_SOCKET_IFNAME": ("the interfaces of 'NET/Socket : Using' (or 'Bootstrap : Using') match the list",
                           nccl_rows.judge_socket_ifname),
    "NCCL_P2P_DISABLE": ("no 'via P2P/...' connection line (1), or one (0)", nccl_rows.judge_p2p_disable),
    "NCCL_SHM_DISABLE": ("no 'via SHM/...' connection line (1), or one (0)", nccl_rows.judge_shm_disable),
    "NCCL_NET": ("'Using network X' names it", nccl_rows.judge_net),
    "NCCL_NET_PLUGIN": ("'Using network X' is the loaded plugin's, not NCCL's own IB or Socket",
                        nccl_rows.judge_net_plugin),
    "GLOO_SOCKET_IFNAME": ("the interface holding the local address of every rank's Gloo sockets", gloo.judge_ifname),
    "OMPI_MCA_pml": ("Open MPI's 'select: component X selected' (pml_base_verbose)", mpi.judge_pml),
    "OMPI_MCA_btl": ("Open MPI's 'bml: Using X btl for send to' each peer (btl_base_verbose)", mpi.judge_btl),
}


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
