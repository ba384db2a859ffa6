"""Which mount a path is on, its fs type, backing device and storage class (from /proc/self/mountinfo)."""
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path

from benchcore.processes.procs import MountEntry, read_mounts

SYS_DEV_BLOCK = Path("/sys/dev/block")
SYS_CLASS_BLOCK = Path("/sys/class/block")

# Storage classes by file-system type: network, parallel and memory file systems.
FS_CLASSES = {
    "cephfs": {"ceph", "fuse.ceph-fuse", "fuse.ceph"},
    "nfs": {"nfs", "nfs4"},
    "smb": {"cifs", "smb3", "smbfs"},
    "lustre": {"lustre"},
    "gpfs": {"gpfs"},
    "beegfs": {"beegfs"},
    "wekafs": {"wekafs", "fuse.wekafs"},
    "glusterfs": {"glusterfs", "fuse.glusterfs"},
    "juicefs": {"juicefs", "fuse.juicefs"},
    "daos": {"fuse.dfuse", "fuse.daos", "daos"},
    "virtiofs": {"virtiofs"},
    "9p": {"9p"},
    "zfs": {"zfs"},
    "tmpfs": {"tmpfs", "ramfs"},
    "overlay": {"overlay"},
    "object-store": {"fuse.s3fs", "fuse.gcsfuse", "fuse.goofys", "fuse.geesefs", "fuse.rclone", "fuse.blobfuse2",
                     "fuse.mountpoint-s3"},
}
FS_CLASS = {fs: name for name, types in FS_CLASSES.items() for fs in types}
# Object storage through FUSE (a bucket of S3, GCS, Azure Blob or an rclone remote: every node reaches it over the
# network) shows in mountinfo as fuse.SUBTYPE where its client sets a FUSE subtype, else as plain "fuse" with the
# client's fsname as the source. As each client mounts (its source, read where named):
#   fuse.s3fs         s3fs-fuse: libfuse's fuse_main, whose default subtype is the program's name ("s3fs BUCKET DIR")
#   fuse.gcsfuse      gcsfuse: its mount helper's type (docs/mounting.md: "my-bucket /mnt gcsfuse rw,..." in fstab)
#   fuse.goofys       goofys: its jacobsa/fuse MountConfig{FSName: bucket, Subtype: "goofys"}; geesefs, its fork,
#                     the same as fuse.geesefs
#   fuse.rclone       rclone mount: cmd/mount/mount.go, fuse.Subtype("rclone"), FSName the remote ("remote:path")
#   fuse.blobfuse2    blobfuse2: component/libfuse/libfuse_handler.go runs libfuse as "blobfuse2 ... -ofsname=
#                     blobfuse2" (fuse / blobfuse2 where libfuse sets no default subtype)
#   fuse / mountpoint-s3   Mountpoint for Amazon S3: mountpoint-s3-fs/src/fuse/config.rs, FSName("mountpoint-s3") and
#                     no subtype; fuse.mountpoint-s3 where a mount helper adds one
FUSE_SOURCES = {"mountpoint-s3": "object-store", "blobfuse2": "object-store", "s3fs": "object-store"}
# Storage other machines share: network, parallel and object storage by class, and any file system (a FUSE one such
# as sshfs) mounted from another host: host:/path, [v6 address]:/path, //server/share.
SHARED_CLASSES = {"cephfs", "nfs", "smb", "lustre", "gpfs", "beegfs", "wekafs", "glusterfs", "juicefs", "daos",
                  "object-store"}
NETWORK_SOURCE = re.compile(r"(//[^/\s]+/|[^/\s]+:/)")

# Block-backed file systems: the class of each backing whole disk, first match wins:
# (class, disk-name prefixes, rotational as sysfs says (None: either)). dm/md resolve to their members.
DISK_CLASSES = (
    ("nvme", ("nvme",), None),
    ("loop", ("loop",), None),
    ("virtio", ("vd",), None),
    ("xen", ("xvd",), None),
    ("zram", ("zram",), None),
    ("hdd", ("sd", "hd"), True),
    ("ssd", ("sd", "hd", "mmcblk"), False),
)
# File systems that hold no user data; `iobench mounts` hides them unless --all.
PSEUDO_FS = {"proc", "sysfs", "devtmpfs", "devpts", "cgroup", "cgroup2", "securityfs", "debugfs",
             "tracefs", "bpf", "pstore", "mqueue", "hugetlbfs", "configfs", "fusectl", "binfmt_misc",
             "autofs", "nsfs", "rpc_pipefs", "efivarfs", "selinuxfs"}


@dataclass
class Mount(MountEntry):
    """A mountinfo entry plus what iobench derives from it."""
    disks: tuple = ()         # backing whole disks, e.g. ("nvme0n1",) or ("loop3",)
    device: str = ""          # human description of the backing device
    storage_class: str = "unknown"


def _block_name(dev):
    """'259:1' -> the /sys/class/block directory of that device, or None."""
    link = SYS_DEV_BLOCK / dev
    return Path(os.path.realpath(link)) if link.exists() else None


def _whole_disks(sysdir):
    """Whole-disk sysfs dirs under a block device: a partition's parent, a dm/md device's members, recursively."""
    if (sysdir / "partition").exists():
        return _whole_disks(sysdir.parent)
    slaves = sorted((sysdir / "slaves").glob("*")) if (sysdir / "slaves").is_dir() else []
    if slaves:
        return tuple(d for s in slaves for d in _whole_disks(Path(os.path.realpath(s))))
    return (sysdir,)


def disk_bytes(disks):
    """(bytes read, bytes written) so far by the whole disks named (sysfs stat: sectors of 512 bytes), summed;
    None when there are none or one cannot be read (a network or memory file system has none)."""
    total = [0, 0]
    for disk in disks or ():
        try:
            fields = (SYS_CLASS_BLOCK / disk / "stat").read_text().split()
            total[0] += int(fields[2]) * 512
            total[1] += int(fields[6]) * 512
        except (OSError, ValueError, IndexError):
            return None
    return tuple(total) if disks else None


def _rotational(disk):
    try:
        return (disk / "queue" / "rotational").read_text().strip() == "1"
    except OSError:
        return None


def disk_class(disk):
    """The DISK_CLASSES class of one whole disk's sysfs dir, else 'local-disk'."""
    for name, prefixes, rotational in DISK_CLASSES:
        if disk.name.startswith(prefixes) and (rotational is None or _rotational(disk) is rotational):
            return name
    return "local-disk"


def _describe(top, disks):
    parts = []
    for disk in disks:
        backing = disk / "loop" / "backing_file"
        if backing.exists():
            parts.append(f"{disk.name} (loop device, backing file {backing.read_text().strip()})")
        else:
            parts.append(f"{disk.name} ({disk_class(disk)})")
    members = ", ".join(parts)
    return members if top is None or top in disks else f"{top.name} over {members}"


def storage_class(fs_type, disks, source=""):
    """By fs type (FS_CLASSES) first, a plain FUSE mount by its source (FUSE_SOURCES); else the class its backing
    disks share ('mixed' when they differ)."""
    if fs_type in FS_CLASS:
        return FS_CLASS[fs_type]
    if fs_type == "fuse" and source in FUSE_SOURCES:
        return FUSE_SOURCES[source]
    classes = {disk_class(d) for d in disks}
    return classes.pop() if len(classes) == 1 else ("mixed" if classes else "unknown")


def locality(fs_type, source):
    """Where a mount's data lives (its fs type, its source): 'shared' (storage other machines reach too: a network,
    parallel or object store, or a host:/path source), 'unknown' (any other FUSE file system: its data may be
    anywhere, so it is never called this node's own) or 'local' (this node's disks or memory)."""
    if storage_class(fs_type or "", (), source or "") in SHARED_CLASSES or NETWORK_SOURCE.match(source or ""):
        return "shared"
    return "unknown" if fs_type == "fuse" or (fs_type or "").startswith("fuse.") else "local"


def classify(entry):
    """The Mount of a MountEntry: its backing disks, device description and storage class."""
    sysdir = _block_name(entry.dev)
    if sysdir is None and entry.source.startswith("/dev/") and os.path.exists(entry.source):
        rdev = os.stat(entry.source).st_rdev
        sysdir = _block_name(f"{os.major(rdev)}:{os.minor(rdev)}")
    disks = _whole_disks(sysdir) if sysdir else ()
    return Mount(**asdict(entry), disks=tuple(d.name for d in disks),
                 device=_describe(sysdir, disks) if disks else entry.source,
                 storage_class=storage_class(entry.fs_type, disks, entry.source))


def all_mounts(include_pseudo=False):
    """This machine's mounts, classified, each mount point once (the mount on top); pseudo file systems only
    with include_pseudo."""
    top = {m.mount_point: m for m in read_mounts()}  # later lines are stacked on earlier ones
    return [classify(m) for m in top.values() if include_pseudo or m.fs_type not in PSEUDO_FS]


def mount_of(path):
    """The mount that holds the resolved path: the longest mount point above it, the last one stacked."""
    real = os.path.realpath(path)
    best = None
    for mount in read_mounts():
        mp = mount.mount_point
        if real == mp or real.startswith(mp.rstrip("/") + "/"):
            if best is None or len(mp) >= len(best.mount_point):
                best = mount
    return classify(best)
