"""Which mount a path is on, its fs type, backing device and storage class (from /proc/self/mountinfo)."""
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from benchcore.procs import MountEntry, read_mounts

SYS_DEV_BLOCK = Path("/sys/dev/block")
SYS_BLOCK = Path("/sys/block")

# Storage classes, first match wins: (class, fs types it covers, backing block device name prefixes).
# A class with device prefixes matches a mount whose backing disks all start with one of them.
STORAGE_CLASSES = (
    ("cephfs", {"ceph", "fuse.ceph-fuse"}, None),
    ("nfs", {"nfs", "nfs4"}, None),
    ("lustre", {"lustre"}, None),
    ("tmpfs", {"tmpfs", "ramfs"}, None),
    ("overlay", {"overlay"}, None),
    ("nvme", None, ("nvme",)),
    ("local-disk", None, ("",)),  # any other block device: sd*, vd*, xvd*, md*, loop*
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
    """Whole disks under a block device: a partition's parent, a dm/md device's slaves, recursively."""
    if (sysdir / "partition").exists():
        return _whole_disks(sysdir.parent)
    slaves = sorted((sysdir / "slaves").glob("*")) if (sysdir / "slaves").is_dir() else []
    if slaves:
        return tuple(d for s in slaves for d in _whole_disks(Path(os.path.realpath(s))))
    return (sysdir.name,)


def _describe(disks):
    parts = []
    for disk in disks:
        backing = SYS_BLOCK / disk / "loop" / "backing_file"
        if backing.exists():
            parts.append(f"{disk} (loop device, backing file {backing.read_text().strip()})")
        else:
            parts.append(disk)
    return ", ".join(parts)


def storage_class(fs_type, disks):
    """The first STORAGE_CLASSES row that matches the fs type or every backing disk."""
    for name, fs_types, prefixes in STORAGE_CLASSES:
        if (fs_types and fs_type in fs_types) or (prefixes and disks and all(d.startswith(prefixes) for d in disks)):
            return name
    return "unknown"


def classify(entry):
    """The Mount of a MountEntry: its backing disks, device description and storage class."""
    sysdir = _block_name(entry.dev)
    if sysdir is None and entry.source.startswith("/dev/") and os.path.exists(entry.source):
        rdev = os.stat(entry.source).st_rdev
        sysdir = _block_name(f"{os.major(rdev)}:{os.minor(rdev)}")
    disks = _whole_disks(sysdir) if sysdir else ()
    return Mount(**asdict(entry), disks=disks, device=_describe(disks) if disks else entry.source,
                 storage_class=storage_class(entry.fs_type, disks))


def all_mounts(include_pseudo=False):
    """This machine's mounts, classified; pseudo file systems only with include_pseudo."""
    return [classify(m) for m in read_mounts() if include_pseudo or m.fs_type not in PSEUDO_FS]


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
