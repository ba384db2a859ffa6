"""Which mount a path is on, its fs type, backing device and storage class (from /proc/self/mountinfo)."""
import os
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = "/proc/self/mountinfo"
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
class Mount:
    """One line of mountinfo, plus what iobench derives from it."""
    mount_point: str
    fs_type: str
    source: str
    dev: str                  # "major:minor"
    options: str
    disks: tuple = ()         # backing whole disks, e.g. ("nvme0n1",) or ("loop3",)
    device: str = ""          # human description of the backing device
    storage_class: str = "unknown"

    @property
    def read_only(self):
        return "ro" in self.options.split(",")


def _unescape(field):
    """mountinfo escapes space, tab, newline and backslash as octal (\\040)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text):
    """Mount objects (no device resolution) from mountinfo text, in kernel order."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 6 or len(tail) < 2:
            continue
        mounts.append(Mount(mount_point=_unescape(fields[4]), fs_type=tail[0], source=_unescape(tail[1]),
                            dev=fields[2], options=fields[5]))
    return mounts


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


def classify(mount):
    """Fill in disks, device and storage_class from the STORAGE_CLASSES table."""
    sysdir = _block_name(mount.dev)
    if sysdir is None and mount.source.startswith("/dev/") and os.path.exists(mount.source):
        rdev = os.stat(mount.source).st_rdev
        sysdir = _block_name(f"{os.major(rdev)}:{os.minor(rdev)}")
    mount.disks = _whole_disks(sysdir) if sysdir else ()
    mount.device = _describe(mount.disks) if mount.disks else mount.source
    for name, fs_types, prefixes in STORAGE_CLASSES:
        if fs_types and mount.fs_type in fs_types:
            mount.storage_class = name
            return mount
        if prefixes and mount.disks and all(d.startswith(prefixes) for d in mount.disks):
            mount.storage_class = name
            return mount
    mount.storage_class = "unknown"
    return mount


def all_mounts(include_pseudo=False):
    """This machine's mounts, classified; pseudo file systems only with include_pseudo."""
    mounts = parse_mountinfo(Path(MOUNTINFO).read_text())
    return [classify(m) for m in mounts if include_pseudo or m.fs_type not in PSEUDO_FS]


def mount_of(path):
    """The mount that holds the resolved path: the longest mount point above it, the last one stacked."""
    real = os.path.realpath(path)
    best = None
    for mount in parse_mountinfo(Path(MOUNTINFO).read_text()):
        mp = mount.mount_point
        if real == mp or real.startswith(mp.rstrip("/") + "/"):
            if best is None or len(mp) >= len(best.mount_point):
                best = mount
    return classify(best)
