"""Mount detection and storage classes: mountinfo parsing, then real tmpfs, XFS-on-loop and the root fs."""
import json
import os
from pathlib import Path

import pytest

from benchcore.processes.procs import parse_mountinfo
from iobench import mounts
from iobench.mounts import classify, mount_of

# mountinfo lines as the kernel writes them for mounts this machine does not have
# (CephFS kernel client and ceph-fuse, NFS, Lustre, overlay); parsing them needs no hardware.
REMOTE = """\
61 27 0:50 / /mnt/cephfs rw,relatime - ceph 10.0.0.1:6789:/ rw,name=admin
62 27 0:51 / /mnt/ceph\\040fuse rw,nosuid,nodev,relatime - fuse.ceph-fuse ceph-fuse rw,user_id=0
63 27 0:52 / /mnt/nfs rw,relatime shared:7 - nfs4 srv:/export rw,vers=4.2
64 27 0:53 / /lustre rw - lustre 10.0.0.2@tcp:/fs rw
65 27 0:54 / /var/lib/docker/overlay2/x/merged rw - overlay overlay rw,lowerdir=/a
66 27 0:55 / /scratch rw - tmpfs tmpfs rw,size=1g
67 27 0:56 / /mnt/fuse ro - fuse.sshfs host:/ ro
"""

# One synthetic mountinfo line per file-system storage class (fs type as the kernel or the FUSE daemon
# names it), and the class iobench must give it.
FS_LINES = [
    ("ceph", "10.0.0.1:6789:/", "cephfs"), ("fuse.ceph-fuse", "ceph-fuse", "cephfs"),
    ("nfs", "srv:/export", "nfs"), ("nfs4", "srv:/export", "nfs"), ("cifs", "//srv/share", "smb"),
    ("smb3", "//srv/share", "smb"), ("lustre", "10.0.0.2@tcp:/fs", "lustre"), ("gpfs", "gpfs0", "gpfs"),
    ("beegfs", "beegfs_nodev", "beegfs"), ("wekafs", "default", "wekafs"),
    ("fuse.glusterfs", "srv:/vol", "glusterfs"), ("fuse.juicefs", "redis://srv/1", "juicefs"),
    ("fuse.dfuse", "dfuse", "daos"), ("virtiofs", "myfs", "virtiofs"), ("9p", "hostshare", "9p"),
    ("zfs", "tank/ckpt", "zfs"), ("tmpfs", "tmpfs", "tmpfs"), ("overlay", "overlay", "overlay"),
    ("fuse.s3fs", "s3fs", "object-store"), ("fuse.gcsfuse", "my-bucket", "object-store"),
    ("fuse.goofys", "my-bucket", "object-store"), ("fuse.geesefs", "my-bucket", "object-store"),
    ("fuse.rclone", "s3remote:bucket", "object-store"), ("fuse.blobfuse2", "blobfuse2", "object-store"),
    ("fuse", "blobfuse2", "object-store"), ("fuse", "mountpoint-s3", "object-store"),
    ("fuse.mountpoint-s3", "mountpoint-s3", "object-store"),
]


@pytest.mark.parametrize("fs_type,source,expected", FS_LINES)
def test_file_system_storage_classes(fs_type, source, expected):
    (entry,) = parse_mountinfo(f"70 27 0:60 / /mnt/x rw,relatime - {fs_type} {source} rw\n")
    assert classify(entry).storage_class == expected


# Where each kind of mount's data lives, as drain judges it: object stores through FUSE are shared (a bucket, never
# the node's own); a FUSE file system no table knows is of unknown locality (never drained for); block and memory
# file systems are the node's own.
LOCALITY = [("fuse.mountpoint-s3", "mountpoint-s3", "shared"), ("fuse", "mountpoint-s3", "shared"),
            ("fuse.s3fs", "s3fs", "shared"), ("fuse.gcsfuse", "bkt", "shared"),
            ("fuse.blobfuse2", "blobfuse2", "shared"),
            ("fuse.rclone", "remote:bkt", "shared"), ("fuse.goofys", "bkt", "shared"), ("nfs4", "srv:/x", "shared"),
            ("fuse.sshfs", "host:/", "shared"), ("fuse.ceph-fuse", "ceph-fuse", "shared"),
            ("fuse.bindfs", "/tmp/src", "unknown"), ("fuse.someday-s3", "bkt", "unknown"), ("fuse", "x", "unknown"),
            ("xfs", "/dev/nvme0n1", "local"), ("tmpfs", "tmpfs", "local"), ("fuseblk", "/dev/sdb1", "local")]


@pytest.mark.parametrize("fs_type,source,expected", LOCALITY)
def test_locality_of_object_stores_unknown_fuse_and_local_storage(fs_type, source, expected):
    assert mounts.locality(fs_type, source) == expected


def test_parse_and_classify_remote_lines():
    found = {m.mount_point: classify(m) for m in parse_mountinfo(REMOTE)}
    assert {mp: m.storage_class for mp, m in found.items()} == {
        "/mnt/cephfs": "cephfs", "/mnt/ceph fuse": "cephfs", "/mnt/nfs": "nfs", "/lustre": "lustre",
        "/var/lib/docker/overlay2/x/merged": "overlay", "/scratch": "tmpfs", "/mnt/fuse": "unknown"}
    assert found["/mnt/nfs"].fs_type == "nfs4" and found["/mnt/nfs"].source == "srv:/export"
    assert found["/mnt/fuse"].read_only and not found["/scratch"].read_only


def test_nvme_behind_partition_and_lvm(tmp_path, monkeypatch):
    """A fake /sys tree: dm-0 on nvme0n1p2 (a partition of nvme0n1) is nvme; dm-1 on sda1 + nvme is mixed."""
    devices = tmp_path / "devices"
    for disk, part in (("nvme0n1", "nvme0n1p2"), ("sda", "sda1")):
        (devices / disk / part).mkdir(parents=True)
        (devices / disk / part / "partition").write_text("1\n")
    for dm, slaves in (("dm-0", ["nvme0n1/nvme0n1p2"]), ("dm-1", ["sda/sda1", "nvme0n1/nvme0n1p2"])):
        (devices / dm / "slaves").mkdir(parents=True)
        for slave in slaves:
            (devices / dm / "slaves" / slave.split("/")[1]).symlink_to(devices / slave)
    dev_block = tmp_path / "dev-block"
    dev_block.mkdir()
    (dev_block / "253:0").symlink_to(devices / "dm-0")
    (dev_block / "253:1").symlink_to(devices / "dm-1")
    monkeypatch.setattr(mounts, "SYS_DEV_BLOCK", dev_block)
    a, b = map(classify, parse_mountinfo("1 0 253:0 / /a rw - xfs /dev/mapper/a rw\n"
                                         "2 0 253:1 / /b rw - ext4 /dev/mapper/b rw\n"))
    assert (a.storage_class, a.disks) == ("nvme", ("nvme0n1",))
    assert (b.storage_class, b.disks) == ("mixed", ("nvme0n1", "sda"))
    assert a.device == "dm-0 over nvme0n1 (nvme)" and b.device == "dm-1 over nvme0n1 (nvme), sda (local-disk)"


@pytest.mark.parametrize("disk,rotational,expected", [
    ("sda", "1", "hdd"), ("sdb", "0", "ssd"), ("vdb", "1", "virtio"), ("nvme1n1", "0", "nvme"),
    ("loop7", "0", "loop"), ("xvda", "0", "xen"), ("mmcblk0", "0", "ssd")])
def test_block_storage_classes_from_sysfs(tmp_path, monkeypatch, disk, rotational, expected):
    """A fake /sys tree: the disk's name (its transport) and queue/rotational (SSD vs HDD)."""
    (tmp_path / "devices" / disk / "queue").mkdir(parents=True)
    (tmp_path / "devices" / disk / "queue" / "rotational").write_text(rotational + "\n")
    (tmp_path / "dev-block").mkdir()
    (tmp_path / "dev-block" / "8:0").symlink_to(tmp_path / "devices" / disk)
    monkeypatch.setattr(mounts, "SYS_DEV_BLOCK", tmp_path / "dev-block")
    (entry,) = parse_mountinfo(f"1 0 8:0 / /data rw - ext4 /dev/{disk} rw\n")
    assert classify(entry).storage_class == expected


def test_root_fs_is_a_local_block_device():
    root = mount_of("/")
    assert root.mount_point == "/" and root.disks
    name = root.disks[0]
    rotational = Path(f"/sys/block/{name}/queue/rotational").read_text().strip() == "1"
    prefix = next((p for p in ("nvme", "loop", "vd", "xvd", "zram") if name.startswith(p)), None)
    expected = {"nvme": "nvme", "loop": "loop", "vd": "virtio", "xvd": "xen", "zram": "zram"}.get(
        prefix, "hdd" if rotational else "ssd")
    assert root.storage_class == expected


@pytest.mark.root
def test_real_tmpfs_and_loop_xfs(tmpfs, loop_xfs):
    scratch = tmpfs("scratch")
    (scratch / "deep" / "er").mkdir(parents=True)
    m = mount_of(scratch / "deep" / "er")
    assert (m.mount_point, m.fs_type, m.storage_class) == (str(scratch), "tmpfs", "tmpfs")
    mnt, device = loop_xfs
    x = mount_of(mnt)
    name = os.path.basename(device)
    assert (x.fs_type, x.storage_class, x.disks) == ("xfs", "loop", (name,))
    assert f"{name} (loop device, backing file" in x.device and "disk.img" in x.device


@pytest.mark.root
def test_mounts_command_lists_them(tool, tmpfs, loop_xfs):
    ro = tmpfs("ro-scratch", ro=True)
    proc = tool("iobench", "mounts", "--format", "json")
    assert proc.returncode == 0, proc.stderr
    rows = {r["mount_point"]: r for r in map(json.loads, proc.stdout.splitlines())}
    xfs = rows[str(loop_xfs[0])]
    assert (xfs["fs_type"], xfs["storage_class"], xfs["mode"]) == ("xfs", "loop", "rw")
    assert os.path.basename(loop_xfs[1]) in xfs["device"] and xfs["free_bytes"] > 200 << 20
    assert (rows[str(ro)]["storage_class"], rows[str(ro)]["mode"]) == ("tmpfs", "ro")
    assert "/proc" not in rows
    listed = [json.loads(ln)["mount_point"] for ln in proc.stdout.splitlines()]
    assert len(listed) == len(set(listed)) and "/dev/shm" in listed  # once, though mountinfo has it twice
    table = tool("iobench", "mounts", "--all")
    assert table.returncode == 0 and "proc" in table.stdout
    assert "storage" in table.stdout   # piped at 100 columns, the header may wrap ("storage / class")
    # within them, though the loop device's backing-file path is longer (it was 104-519 wide): paths wrap
    assert max(len(line) for line in table.stdout.splitlines()) <= 100, table.stdout
