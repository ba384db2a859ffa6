"""`iobench model-ckpt` on two nodes writing one checkpoint to shared storage: network-namespace nodes (a real c10d
rendezvous and Gloo over their veth link) with the real CephFS mounted by ceph-fuse, which both see."""
import fcntl
import time
from pathlib import Path

import pytest

from iobench.safety import LOCK_BASE
from tests.conftest import read_records
from tests.netns.conftest import needs_netns, wait_all
from tests.storage_fixtures import cephfs_mount  # noqa: F401

pytestmark = [needs_netns, pytest.mark.root, pytest.mark.slow]


def test_two_nodes_write_and_read_one_checkpoint_on_cephfs(pair, cephfs_mount, tmp_path):  # noqa: F811
    out = tmp_path / "r.jsonl"
    common = ("model-ckpt", cephfs_mount.path, "--model", "llama3-8b", "--scale", "0.0002", "--ranks", "1",
              "--writes", "2", "--reads", "2", "--nodes", "2", "--rdzv-endpoint", f"{pair.addr(0)}:29633")
    started = time.monotonic()
    # both nodes are this host and share its lock directory (on a cluster each node has its own): node 0 takes the
    # mount's lock first (the probe below may hold it for an instant: node 0 waits for that), then node 1 runs beside
    # it with --concurrent
    node0 = pair.commbench(0, *common, "--out", out, "--wait", "60", program="iobench")
    deadline = time.monotonic() + 120
    while not _a_mount_lock_held() and node0.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    node1 = pair.commbench(1, *common, "--node-rank", "1", "--concurrent", program="iobench")
    try:
        (rc0, err0, _), (rc1, err1, _) = wait_all([node0, node1], started, 300)
    finally:
        pair.finish()
    assert rc0 == 0 and rc1 == 0, err0 + err1
    assert "node 1's ranks finished; node 0 makes the records" in err1
    write, read = read_records(out)
    for rec in (write, read):
        assert rec["numjobs"] == 2 and rec["files"] == 16 and rec["wrong"] == 0
        assert set(rec["per_host_mbps"]) == {pair.host(0), pair.host(1)}, rec["per_host_mbps"]
        # every byte went through ceph-fuse: the client both emulated nodes share here, its counter read once
        assert rec["byte_counter"].startswith("ceph-fuse client") and rec["served_by"] == "storage"
        assert 0.9 <= rec["bytes_moved_ratio"] < 1.5   # counted once, though both nodes read that client
        # the aggregate is all bytes over first start to last end: never above the sum of the nodes' own rates
        assert rec["bw_mbps"] <= sum(rec["per_host_mbps"].values()) * 1.0001
    assert read["cache_drop"].startswith("O_DIRECT read")


def _a_mount_lock_held():
    """Whether some process holds one of root's iobench mount locks (a probe: it takes a free one for an instant)."""
    for path in Path(LOCK_BASE).glob("mount-*.lock"):
        with open(path) as f:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
    return False
