"""Gloo's evidence from a process's own sockets (commbench/evidence/gloo.py): real sockets of this test process on
loopback (a listener among them, which is no connection); the cross-node case (two interfaces, GLOO_SOCKET_IFNAME applied or not) runs in tests/netns/test_evidence.py.
"""
import socket

from commbench.evidence import gloo
from commbench.evidence.applied import judge_settings


def test_addresses_as_the_kernel_lists_them():
    assert gloo._plain("::ffff:127.0.0.1") == "127.0.0.1" and gloo._plain("fe80::1%eth0") == "fe80::1"
    names = gloo.interface_of({"127.0.0.1", "::1"})
    assert names["127.0.0.1"] == "lo" and names["::1"] == "lo"


def test_a_connection_opened_after_the_snapshot_is_found_with_its_interface(monkeypatch):
    """A real TCP connection on loopback: both ends belong to this process; the one to the 'store' is left out."""
    monkeypatch.delenv("MASTER_ADDR", raising=False)
    before = gloo.socket_inodes()
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        accepted, _ = server.accept()
        try:
            mine = gloo.rank_evidence(before)
            ports = {c[1] for c in mine["connections"]}
            assert ports == {server.getsockname()[1], client.getsockname()[1]}, mine
            assert all(c[0] == "127.0.0.1" and c[2] == "lo" and c[3] == "127.0.0.1" for c in mine["connections"])
            assert mine["interfaces_read"]
            monkeypatch.setenv("MASTER_ADDR", "localhost")   # the server plays the rendezvous store
            monkeypatch.setenv("MASTER_PORT", str(server.getsockname()[1]))
            [left] = gloo.rank_evidence(before)["connections"]
            assert left[1] == server.getsockname()[1]   # the accepted end; the client's, to the store, is not Gloo's
            assert not gloo.rank_evidence(gloo.socket_inodes())["connections"]   # nothing new since now
        finally:
            client.close()
            accepted.close()
    eff = gloo.effective([mine, mine])
    assert eff["interfaces"] == {"0": "lo", "1": "lo"} and eff["connections"] == {"0": 2, "1": 2}
    assert gloo.judge_ifname(eff, "lo")[0] == "applied"
    assert gloo.judge_ifname(eff, "eth9,lo")[0] == "applied"   # a list: any of them
    status, why = gloo.judge_ifname(eff, "eth9")
    assert status == "not applied" and "rank 0 from 127.0.0.1 (lo)" in why and "not from eth9" in why
    assert judge_settings({"GLOO_SOCKET_IFNAME": "eth9"}, eff)["GLOO_SOCKET_IFNAME"]["status"] == "not applied"


def test_nothing_seen_is_unknown_never_applied():
    lone = gloo.effective([{"connections": [], "interfaces_read": True}])
    assert gloo.judge_ifname(lone, "lo")[0] == "unknown"
    unread = gloo.effective([{"connections": [["10.0.0.1", 5, None, "10.0.0.2", 6]], "interfaces_read": False}] * 2)
    assert gloo.judge_ifname(unread, "eth0")[0] == "unknown"
    assert gloo.judge_ifname({"transport": "mpi"}, "eth0")[0] == "unknown"
