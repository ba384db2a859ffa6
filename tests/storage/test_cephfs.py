"""scripts/cephfs-local: the CephFS really is Ceph (mon, mgr, OSD, MDS, ceph-fuse), and it cleans up.

One cluster serves the whole session (`cephfs_mount`, ~12 s to bring up); the interrupted-up
test runs a second, short-lived one in its own directory.
"""
import json
import mmap
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from benchcore.emulate.skeleton import live_pids
from benchcore.processes.procs import mount_at, spawn
from tests.storage_fixtures import CEPHFS_LOCAL, assert_cephfs_gone, assert_direct_read_back, run_script

pytestmark = [pytest.mark.root, pytest.mark.slow]

# The only health check a healthy single-node cluster may raise: its pools have size 1 by
# design (one OSD), and Ceph says so. Anything else (OSD down, PGs inactive, MDS damaged,
# low disk, slow ops, crashes, ...) fails the test.
ACCEPTED_WARNINGS = {"POOL_NO_REDUNDANCY"}


def ceph_json(fs, *args):
    p = fs.ceph(*args, "-f", "json")
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def status_json(d):
    p = run_script(CEPHFS_LOCAL, "status", "--json", "--dir", d)
    return p.returncode, json.loads(p.stdout)


def test_ceph_status_is_healthy(cephfs_mount):
    deadline = time.monotonic() + 60
    while True:  # PG states reach the mgr a few seconds after the MDS is active
        s = ceph_json(cephfs_mount, "status")
        pgs = {x["state_name"]: x["count"] for x in s["pgmap"]["pgs_by_state"]}
        if pgs == {"active+clean": s["pgmap"]["num_pgs"]} or time.monotonic() > deadline:
            break
        time.sleep(1)
    assert pgs == {"active+clean": s["pgmap"]["num_pgs"]} and s["pgmap"]["num_pgs"] > 0, pgs
    health = s["health"]
    assert health["status"] in ("HEALTH_OK", "HEALTH_WARN"), health
    if health["status"] == "HEALTH_WARN":
        assert set(health["checks"]) <= ACCEPTED_WARNINGS, health["checks"]
    assert s["osdmap"]["num_osds"] == s["osdmap"]["num_up_osds"] == s["osdmap"]["num_in_osds"] == 1
    assert [r["status"] for r in s["fsmap"]["by_rank"]] == ["up:active"]
    assert s["mgrmap"]["available"] is True
    assert s["quorum_names"] == ["a"]
    assert mount_at(cephfs_mount.path).fs_type == "fuse.ceph-fuse"
    pools = {p["pool_name"] for p in ceph_json(cephfs_mount, "osd", "pool", "ls", "detail")}
    assert cephfs_mount.data_pool in pools
    fs = ceph_json(cephfs_mount, "fs", "ls")
    assert [f["data_pools"] for f in fs] == [[cephfs_mount.data_pool]]


def _listening_addrs(pid):
    """Local addresses of the TCP sockets pid listens on (IPv4 and IPv6)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    addrs = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            f = line.split()
            if f[3] == "0A" and f[9] in inodes:  # LISTEN
                host, port = f[1].split(":")
                if table == "tcp":
                    ip = ".".join(str(int(host[i:i + 2], 16)) for i in (6, 4, 2, 0))
                else:
                    ip = "ipv6:" + host
                addrs.append((ip, int(port, 16)))
    return addrs


def test_every_daemon_listens_on_loopback_only(cephfs_mount):
    _, st = status_json(cephfs_mount.dir)
    seen = {}
    for name, d in st["daemons"].items():
        assert d["alive"], name
        seen[name] = _listening_addrs(d["pid"])
    assert seen["mon.a"] and seen["osd.0"] and seen["mds.a"] and seen["mgr.x"], seen
    for name, addrs in seen.items():
        assert all(ip == "127.0.0.1" for ip, _ in addrs), (name, addrs)


def test_file_written_through_the_mount_is_objects_in_the_data_pool(cephfs_mount, tmp_path):
    path = cephfs_mount.path / "visible-in-rados.bin"
    data = os.urandom(5 << 20)  # two RADOS objects with CephFS's default 4 MiB layout
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    ino = os.stat(path).st_ino
    try:
        ls = cephfs_mount.rados("-p", cephfs_mount.data_pool, "ls")
        assert ls.returncode == 0, ls.stderr
        objects = set(ls.stdout.split())
        first, second = f"{ino:x}.00000000", f"{ino:x}.00000001"
        assert {first, second} <= objects, (first, sorted(objects))
        # read the first object straight from RADOS: it is the file's first 4 MiB
        got = tmp_path / "obj"
        get = cephfs_mount.rados("-p", cephfs_mount.data_pool, "get", first, got)
        assert get.returncode == 0, get.stderr
        assert got.read_bytes() == data[:4 << 20]
    finally:
        path.unlink()


def test_o_direct_through_ceph_fuse(cephfs_mount):
    path = cephfs_mount.path / "odirect.bin"
    data = os.urandom(1 << 20)
    buf = mmap.mmap(-1, len(data))
    buf[:] = data
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o644)
    try:
        assert os.write(fd, buf) == len(data)
    finally:
        os.close(fd)
    assert_direct_read_back(path, data)


def test_status_and_second_up_report_the_running_cluster(cephfs_mount):
    d = cephfs_mount.dir
    rc, st = status_json(d)
    assert rc == 0 and st["state"] == "running", st
    assert set(st["daemons"]) == {"mon.a", "mgr.x", "osd.0", "mds.a", "ceph-fuse"}
    assert st["mounted"] == "fuse.ceph-fuse" and st["mon_addr"].startswith("127.0.0.1:")
    assert st["health"]["status"] in ("HEALTH_OK", "HEALTH_WARN")
    assert set(st["health"]["checks"]) <= ACCEPTED_WARNINGS
    text = run_script(CEPHFS_LOCAL, "status", "--dir", d)
    assert text.returncode == 0 and text.stdout.startswith(f"cephfs-local: running in {d}")
    for name in st["daemons"]:
        assert f"{name} " in text.stdout
    assert "fuse.ceph-fuse" in text.stdout and "data pool cephfs_data" in text.stdout
    again = run_script(CEPHFS_LOCAL, "up", "--dir", d)
    assert again.returncode == 0, again.stderr
    assert again.stdout.startswith(f"cephfs-local: already running in {d}")
    assert status_json(d)[1]["daemons"] == st["daemons"]  # same PIDs: nothing restarted


def test_down_cleans_up_after_an_interrupted_up(tmp_path):
    """SIGKILL `up` once the OSD started: status says partial, down removes every trace."""
    d = tmp_path / "half"
    up = spawn([CEPHFS_LOCAL, "up", "--dir", d], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and up.poll() is None:
            if (d / "state.json").exists():
                rc, st = status_json(d)
                if st["daemons"].get("osd.0", {}).get("alive"):
                    break
            time.sleep(0.2)
        assert up.poll() is None, "up ended before it could be interrupted"
        os.kill(up.pid, signal.SIGKILL)
        up.wait(10)
        rc, st = status_json(d)
        assert rc == 1 and st["state"] == "partial", st
        assert st["daemons"]["mon.a"]["alive"] and st["daemons"]["osd.0"]["alive"]
        assert live_pids(str(d / "ceph.conf"))
        down = run_script(CEPHFS_LOCAL, "down", "--dir", d, timeout=120)
        assert down.returncode == 0, down.stderr
        assert_cephfs_gone(d)
        assert run_script(CEPHFS_LOCAL, "status", "--dir", d).returncode == 3
    finally:
        if up.poll() is None:
            up.kill()
        run_script(CEPHFS_LOCAL, "down", "--dir", d, timeout=120)


def test_refusals_are_one_line_and_touch_nothing(tmp_path):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "keep.txt").write_text("user data")
    for cmd in ("up", "down"):
        p = run_script(CEPHFS_LOCAL, cmd, "--dir", mine)
        assert p.returncode == 1 and "Traceback" not in p.stderr, p.stderr
        lines = p.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("cephfs-local: error:"), lines
    assert os.listdir(mine) == ["keep.txt"] and (mine / "keep.txt").read_text() == "user data"
    assert live_pids(str(mine)) == []
    h = run_script(CEPHFS_LOCAL, "--help")
    assert h.returncode == 0 and "examples:" in h.stdout


def test_down_leaves_nothing_and_up_works_again(cephfs_mount):
    """Runs last in this file: takes the session cluster down, checks, brings it back."""
    d = cephfs_mount.dir
    try:
        down = run_script(CEPHFS_LOCAL, "down", "--dir", d, timeout=120)
        assert down.returncode == 0, down.stderr
        assert_cephfs_gone(d)
        rc, st = status_json(d)
        assert rc == 3 and st["state"] == "stopped"
    finally:  # later tests in the session share this cluster
        up = run_script(CEPHFS_LOCAL, "up", "--dir", d, timeout=300)
    assert up.returncode == 0, up.stderr
    assert mount_at(cephfs_mount.path).fs_type == "fuse.ceph-fuse"
