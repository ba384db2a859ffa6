"""applied.py's NCCL rows: for each variable a log that proves it applied and one that proves it did not. Logs are the
real ones of tests/fixtures/nccl_info where one shows the case; otherwise lines in NCCL's own formats (the source
file named beside each) read through the same reader."""
from pathlib import Path

import pytest

from commbench.evidence import nccl
from commbench.evidence.applied import ROWS, judge_settings

LOGS = Path(__file__).parents[2] / "fixtures" / "nccl_info"


def log(name):
    return nccl.read_text((LOGS / name).read_text())


def lines(*msgs):
    return nccl.read_text("".join(f"h:1:1 [0] NCCL INFO {m}\n" for m in msgs))


V27 = "NCCL version 2.27.7+cuda12.9"
NVLS_ON = "24 coll channels, 24 collnet channels, 16 nvls channels, 32 p2p channels, 32 p2p channels per peer"
NVLS_OFF = "24 coll channels, 24 collnet channels, 0 nvls channels, 32 p2p channels, 32 p2p channels per peer"
SEND = "Channel 00/0 : 0[0] -> 8[0] [send] via NET/IB/0"           # src/transport/net.cc l.218 (v2.27.7-1)
RECV = "Channel 00/0 : 8[0] -> 0[0] [receive] via NET/IB/0"

CASES = [  # variable, value, effective, status
    ("NCCL_ALGO", "NVLS,Ring", "nccl-2.27-tuning-from-format-strings.log", "not applied"),   # 4K ran Tree
    ("NCCL_ALGO", "Tree", "nccl-2.2x-h100-2node-numeric-tuning-nccl-1453.log", "applied"),
    ("NCCL_ALGO", "^Tree", "nccl-2.2x-h100-2node-numeric-tuning-nccl-1453.log", "not applied"),
    ("NCCL_ALGO", "Ring", "nccl-2.22.3-a100-sendrecv-nccl-tests-331.log", "unknown"),       # no TUNING line
    ("NCCL_PROTO", "Simple", "nccl-2.2x-numeric-tuning-nccl-1595.log", "applied"),
    ("NCCL_PROTO", "LL,LL128", "nccl-2.2x-numeric-tuning-nccl-1595.log", "not applied"),
    ("NCCL_MIN_NCHANNELS", "8", "nccl-2.22.3-a100-sendrecv-nccl-tests-331.log", "applied"),
    ("NCCL_MIN_NCHANNELS", "16", "nccl-2.22.3-a100-sendrecv-nccl-tests-331.log", "not applied"),
    ("NCCL_MAX_NCHANNELS", "2", "nccl-2.27.3-g6e-4node-libfabric.log", "applied"),
    ("NCCL_MAX_NCHANNELS", "1", "nccl-2.27.3-g6e-4node-libfabric.log", "not applied"),
    ("NCCL_NET_GDR_LEVEL", "PHB", "nccl-a100-gdrdma-old-format-nccl-707.log", "applied"),
    ("NCCL_NET_GDR_LEVEL", "SYS", "nccl-2.27.3-g6e-4node-libfabric.log", "not applied"),     # no /GDRDMA
    ("NCCL_NET_GDR_LEVEL", "LOC", "nccl-2.27.3-g6e-4node-libfabric.log", "applied"),
    ("NCCL_NET_GDR_READ", "1", "nccl-a100-gdrdma-old-format-nccl-707.log", "applied"),
    ("NCCL_NET_GDR_READ", "1", [V27, SEND + "", RECV + "/GDRDMA"], "not applied"),
    ("NCCL_NVLS_ENABLE", "1", "nccl-2.27-tuning-from-format-strings.log", "applied"),
    ("NCCL_NVLS_ENABLE", "1", "nccl-2.22.3-a100-sendrecv-nccl-tests-331.log", "not applied"),
    ("NCCL_NVLS_ENABLE", "0", [V27, NVLS_OFF], "applied"),
    # init.cc l.1078 (v2.24.3-1), coll_net.cc l.1440 (v2.27.7-1)
    ("NCCL_COLLNET_ENABLE", "1", [V27, NVLS_OFF, "Communicator has 1 nodes which is less than CollNet node threshold "
                                               "2, disabling CollNet"], "not applied"),
    ("NCCL_COLLNET_ENABLE", "1", [V27, NVLS_OFF, "rank 0 Connected CollNet"], "applied"),
    ("NCCL_IB_HCA", "mlx5_2:1,mlx5_0:1", "nccl-ib-hca-two-nics-nccl-tests-228.log", "applied"),
    ("NCCL_IB_HCA", "mlx5_0", "nccl-ib-hca-two-nics-nccl-tests-228.log", "not applied"),
    ("NCCL_IB_HCA", "^mlx5_2", "nccl-2.5.6-ib-p2p-ipc-nccl-302.log", "not applied"),
    ("NCCL_SOCKET_IFNAME", "eth", "nccl-2.24.3-h100-nvls-sharp-bare-nccl-1584.log", "applied"),
    ("NCCL_SOCKET_IFNAME", "=enp1", "nccl-2.24.3-h100-nvls-sharp-bare-nccl-1584.log", "not applied"),
    ("NCCL_P2P_DISABLE", "1", "nccl-2.22.3-a100-sendrecv-nccl-tests-331.log", "not applied"),
    # shm.cc l.128 (v2.27.7-1)
    ("NCCL_P2P_DISABLE", "1", [V27, "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct"], "applied"),
    ("NCCL_SHM_DISABLE", "1", [V27, "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct"], "not applied"),
    ("NCCL_SHM_DISABLE", "1", "nccl-2.22.3-a100-sendrecv-nccl-tests-331.log", "applied"),
    ("NCCL_NET", "IB", "nccl-2.22.3-a100-sendrecv-nccl-tests-331.log", "applied"),
    ("NCCL_NET", "Socket", "nccl-2.22.3-a100-sendrecv-nccl-tests-331.log", "not applied"),
    ("NCCL_NET_PLUGIN", "libnccl-net.so", "nccl-2.27.3-g6e-4node-libfabric.log", "applied"),
    ("NCCL_NET_PLUGIN", "aws-ofi-nccl", "nccl-2.22.3-a100-sendrecv-nccl-tests-331.log", "not applied"),
    ("NCCL_NET_PLUGIN", "libnccl-net.so", "nccl-2.27.7-p4d-net-plugin-fails-socket.log", "not applied"),  # fell back
    ("NCCL_NVLS_ENABLE", "1", "nccl-2.27.7-p4d-net-plugin-fails-socket.log", "not applied"),
    ("NCCL_P2P_DISABLE", "0", "nccl-2.27.7-p4d-net-plugin-fails-socket.log", "applied"),
]


@pytest.mark.parametrize("var,value,source,status", CASES)
def test_each_nccl_row(var, value, source, status):
    eff = log(source) if isinstance(source, str) else lines(*source)
    out = judge_settings({var: value}, eff)[var]
    assert out["status"] == status, out
    assert out["evidence"]


def test_every_nccl_row_has_an_applied_and_a_not_applied_case():
    rows = [v for v in ROWS if v.startswith("NCCL_")]
    for var in rows:
        seen = {status for v, _, _, status in CASES if v == var}
        assert {"applied", "not applied"} <= seen, var


def test_no_row_and_no_evidence_are_unknown():
    out = judge_settings({"NCCL_BUFFSIZE": "1", "NCCL_ALGO": "Ring"}, {})
    assert out["NCCL_BUFFSIZE"]["status"] == out["NCCL_ALGO"]["status"] == "unknown"
