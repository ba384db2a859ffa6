"""The NCCL INFO reader on real logs of several NCCL generations (tests/fixtures/nccl_info/SOURCES.md); every field
below was checked by hand against the log's lines."""
from pathlib import Path

from commbench.evidence import nccl

LOGS = Path(__file__).parents[2] / "fixtures" / "nccl_info"


def read(name):
    eff = nccl.read_text((LOGS / name).read_text())
    eff.pop("lines")
    return eff


def test_before_2_12_old_channel_lines_rank_prefix_ib_nics():
    # NCCL 2.5.6 (issue #302): '[155] host:pid:tid [3] NCCL INFO', five NICs (one RoCE), 'Ring 00 : ... via P2P/IPC'
    eff = read("nccl-2.5.6-ib-p2p-ipc-nccl-302.log")
    assert eff == {"transport": "nccl", "version": "unknown", "bootstrap_if": "eth0",
                   "nics": ["mlx5_1:1/IB", "mlx5_3:1/IB", "mlx5_0:1/IB", "mlx5_2:1/RoCE", "mlx5_4:1/IB"],
                   "nics_of": "IB",
                   "transports": {"P2P/IPC": 3}}
    assert "algorithm unknown" in nccl.summary(eff)
    # issue #707: 'Channel 01 : 2[c7000] -> 0[87000] [receive] via NET/IB/5/GDRDMA', all 12 with GDRDMA
    eff = read("nccl-a100-gdrdma-old-format-nccl-707.log")
    assert (eff["net"], eff["gdr"], eff["gdr_send"], eff["net_devices"], eff["pxn"]) == ("IB", "all", "all",
                                                                                         [0, 2, 4, 5], False)
    assert eff["transports"] == {"NET": 12}


def test_2_22_whole_nccl_tests_log():
    eff = read("nccl-2.22.3-a100-sendrecv-nccl-tests-331.log")
    assert eff == {"transport": "nccl", "version": "2.22.3", "cuda": "12.2", "bootstrap_if": "ib0",
                   "nics": ["mlx5_0:1/IB", "mlx5_1:1/IB", "mlx5_2:1/IB", "mlx5_3:1/IB"], "nics_of": "IB", "net": "IB",
                   "mnnvl": 0,
                   "tuner": "internal", "channels": {"coll": 8, "nvls": 0, "p2p": 8, "p2p_per_peer": 8},
                   "transports": {"P2P/direct pointer": 16},
                   "env_read": {"NCCL_P2P_LEVEL": "NVL", "NCCL_BUFFSIZE": "4194304"}}
    assert nccl.summary(eff) == "NCCL 2.22.3, IB x4, NVLS off, algorithm unknown (no TUNING line)"


def test_2_20_to_2_22_numeric_choices_mapped_to_names():
    # ncclAlgoStr {Tree, Ring, ...}, ncclProtoStr {LL, LL128, Simple} (src/init.cc v2.21.5-1 l.40-41)
    eff = read("nccl-2.2x-h100-2node-numeric-tuning-nccl-1453.log")
    assert eff["choices"] == [{"collective": None, "size_bytes": [262144, 262144], "algo": "Tree", "proto": "LL128"}]
    assert (eff["net"], eff["gdr"], eff["net_devices"]) == ("IBext_v8", "all", [7])
    eff = read("nccl-2.2x-numeric-tuning-nccl-1595.log")
    assert eff["choices"] == [{"collective": None, "size_bytes": [805306368, 805306368], "algo": "Ring",
                               "proto": "Simple"}]


def test_numeric_form_not_read_where_the_version_says_another():
    text = ("h:1:1 [0] NCCL INFO NCCL version 2.27.7+cuda12.9\n"
            "h:1:1 [0] NCCL INFO 1024 Bytes -> Algo 1 proto 2 time 3.0\n")
    assert "choices" not in nccl.read_text(text)
    old = "h:1:1 [0] NCCL INFO NCCL version 2.19.3+cuda12.2\nh:1:1 [0] NCCL INFO 1024 Bytes -> Algo 1 proto 2 time 3\n"
    assert "choices" not in nccl.read_text(old)       # TRACE only before 2.20: never at INFO


def test_2_24_bare_excerpt_nvls_plugin():
    eff = read("nccl-2.24.3-h100-nvls-sharp-bare-nccl-1584.log")
    assert (eff["version"], eff["cuda"], eff["net"], eff["net_plugin"]) == ("2.24.3", "12.2", "IBext_v8",
                                                                            "NCCL RDMA Plugin v8")
    assert eff["nics"][0] == "ibp0:1/IB/SHARP" and len(eff["nics"]) == 8
    assert eff["nvls_multicast"] is True
    assert eff["env_read"] == {"NCCL_SOCKET_IFNAME": "eth0", "NCCL_IB_PCI_RELAXED_ORDERING": "1"}


def test_2_27_whole_multinode_log_and_named_choices():
    eff = read("nccl-2.27.3-g6e-4node-libfabric.log")
    assert (eff["version"], eff["cuda"], eff["net"], eff["net_plugin"], eff["tuner"]) == (
        "2.27.3", "12.9", "Libfabric", "Libfabric", "nccl_ofi_tuner")
    assert (eff["gdr"], eff["pxn"], eff["transports"]) == ("none", False, {"NET": 24})
    assert eff["channels"] == {"coll": 2, "nvls": 0, "p2p": 2, "p2p_per_peer": 2}
    assert eff["env_read"]["NCCL_PROTO"] == "simple" and eff["env_read"]["NCCL_NET_PLUGIN"] == "libnccl-net.so"
    assert nccl.summary(eff) == "NCCL 2.27.3, Libfabric x1 no GDRDMA, NVLS off, algorithm unknown (no TUNING line)"
    eff = read("nccl-2.27-tuning-from-format-strings.log")
    assert eff["choices"] == [
        {"collective": "AllReduce", "size_bytes": [4096, 4096], "algo": "Tree", "proto": "LL", "channels": [0, 1]},
        {"collective": "AllReduce", "size_bytes": [8388608, 8388608], "algo": "Ring", "proto": "LL128",
         "channels": [0, 15]},
        {"collective": "AllReduce", "size_bytes": [67108864, 268435456], "algo": "NVLS", "proto": "Simple",
         "channels": [0, 15]}]
    assert nccl.summary(eff) == "NCCL 2.27.7, NVLS on, AllReduce Algo NVLS/Simple from 64M"


def test_unknown_lines_mpirun_srun_prefixes_and_bounds(tmp_path):
    text = ("[1,0]<stdout>:h:1:1 [0] NCCL INFO NCCL version 2.21.5+cuda12.4\n"
            "0: h:1:1 [0] NCCL INFO Using network Socket\n"
            "h:1:1 [0] NCCL INFO something NCCL never printed -> Algo x proto y\n"
            "h:1:1 [0] NCCL INFO 4096 Bytes -> Algo 9 proto 7 time 1.0\n"       # out of the tables: ignored
            "plain text\n")
    eff = nccl.read_text(text)
    assert (eff["version"], eff["net"]) == ("2.21.5", "Socket") and "choices" not in eff
    assert nccl.read_text("no nccl here\n") == {}
    big = tmp_path / "nccl.h.1"                        # a rank's log past the cap: its first MAX_BYTES are read
    big.write_bytes(b"h:1:1 [0] NCCL INFO Using network IB\n" + b"x" * nccl.MAX_BYTES
                    + b"\nh:1:1 [0] NCCL INFO NCCL version 2.27.7+cuda12.9\n")
    follower = nccl.Follower({"NCCL_DEBUG": "INFO", "NCCL_DEBUG_FILE": str(tmp_path / "nccl.%h.%p")})
    eff = follower.effective()
    assert eff["net"] == "IB" and eff["version"] == "unknown" and follower.offsets[str(big)] <= nccl.MAX_BYTES
    assert "1 log file(s) read only in part" in eff["evidence_cut"]


def test_2_27_net_plugin_that_failed_and_nvls_unavailable():
    # the Libfabric plugin loaded, its init failed, NCCL used Socket; 'NVLS multicast support is not available'
    eff = read("nccl-2.27.7-p4d-net-plugin-fails-socket.log")
    assert (eff["version"], eff["cuda"], eff["net"], eff["net_plugin"], eff["nics"]) == (
        "2.27.7", "13.0", "Socket", "Libfabric", ["ens32"])
    assert eff["nvls_multicast"] is False and eff["channels"] == {"coll": 24, "nvls": 0, "p2p": 32, "p2p_per_peer": 32}
    assert (eff["tuner"], eff["pxn"], eff["mnnvl"], eff["transports"]) == ("nccl_ofi_tuner", False, 0,
                                                                           {"P2P/CUMEM": 192})
    assert eff["env_read"] == {"NCCL_NET_PLUGIN": "libnccl-net.so", "NCCL_IB_DISABLE": "1"}
    assert nccl.summary(eff) == "NCCL 2.27.7, Socket x1, NVLS off, algorithm unknown (no TUNING line)"
