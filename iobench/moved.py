"""Proof that the storage moved the bytes: the counter that sees a mount's traffic below the page cache (block
devices, NFS, ceph-fuse, Lustre).

One row per kind of file system (COUNTERS): where its bytes read and written are counted, and how. A figure whose
counter saw less than MIN_MOVED of its payload was served by a cache (or never reached storage) and is reported as
"cache", never as the storage's throughput; a file system with no counter says why, and so does memory (tmpfs).
"""
import json
import os
import re
import subprocess
from pathlib import Path

from iobench.mounts import disk_bytes, mount_of

MIN_MOVED = 0.9
# file systems whose client keeps a cache of its own that posix_fadvise does not drop (ceph-fuse's object cacher):
# reads go around it with O_DIRECT
DIRECT_READ_FS = {"fuse.ceph-fuse", "fuse.ceph"}
MOUNTSTATS = Path("/proc/self/mountstats")
CEPH_TIMEOUT_S = LFS_TIMEOUT_S = 10
# where a Lustre client keeps its stats: /proc on older releases, debugfs on newer ones
LUSTRE_ROOTS = (Path("/proc/fs/lustre"), Path("/sys/kernel/debug/lustre"))


def block(mount):
    """Whole disks' sectors (sysfs stat), what the device itself transferred."""
    return (lambda: disk_bytes(mount.disks)) if mount.disks else None


def nfs(mount):
    """The NFS client's bytes to and from the server (/proc/self/mountstats, `bytes:` fields 5 and 6)."""
    def sample():
        try:
            text = MOUNTSTATS.read_text()
        except OSError:
            return None
        for block_ in text.split("\ndevice ")[1:]:
            if f" mounted on {mount.mount_point} with fstype " in block_.split("\n", 1)[0]:
                m = re.search(r"^\s*bytes:\s+((?:\d+\s+){5}\d+)", block_, re.M)
                if m:
                    fields = [int(x) for x in m.group(1).split()]
                    return fields[4], fields[5]
        return None
    return sample if sample() is not None else None


def ceph_socket(mount_point):
    """The admin socket of the ceph-fuse process serving mount_point: its --admin-socket, else the default
    /var/run/ceph/ceph-client.<id>.<pid>.asok."""
    for proc in Path("/proc").iterdir():
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        words = [a.decode(errors="replace") for a in argv if a]
        if not words or os.path.basename(words[0]) != "ceph-fuse" or mount_point not in words:
            continue
        for i, word in enumerate(words):
            if word.startswith("--admin-socket="):
                return word.split("=", 1)[1]
            if word == "--admin-socket" and i + 1 < len(words):
                return words[i + 1]
        name = next((w.split("=", 1)[1] for w in words if w.startswith(("--id=", "--name="))), "admin")
        found = sorted(Path("/var/run/ceph").glob(f"ceph-client.{name.removeprefix('client.')}.{proc.name}.*asok"))
        return str(found[0]) if found else None
    return None


def ceph_fuse(mount):
    """The ceph-fuse client's own counters (its admin socket's `perf dump`): read, the bytes its messenger received
    (msgr_recv_bytes over the AsyncMessenger workers: the data with its message headers, +0.2 % for 64 MiB read
    here); written, the data its objecter sent to the OSDs (objecter.op_send_bytes: exactly the 64 MiB of a 64 MiB
    write here, where the messenger's send count lagged: 0.85 of the payload right after an fsync)."""
    socket = ceph_socket(mount.mount_point)
    if not socket:
        return None

    def sample():
        try:
            out = subprocess.run(["ceph", "--admin-daemon", socket, "perf", "dump"], capture_output=True, text=True,
                                 timeout=CEPH_TIMEOUT_S, check=False).stdout
            perf = json.loads(out)
        except (OSError, ValueError, subprocess.TimeoutExpired):
            return None
        workers = [v for k, v in perf.items() if k.startswith("AsyncMessenger::Worker")]
        return sum(w.get("msgr_recv_bytes", 0) for w in workers), perf.get("objecter", {}).get("op_send_bytes", 0)
    return sample if sample() is not None else None


def lustre_instance(mount_point):
    """The Lustre client instance of a mount (`lfs getname MOUNT`: 'fsname-ffff8d2c4f6e5000 /mnt/lustre'), or None."""
    try:
        out = subprocess.run(["lfs", "getname", mount_point], capture_output=True, text=True, timeout=LFS_TIMEOUT_S,
                             check=False).stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out[0] if out and "-" in out[0] else None


def lustre(mount):
    """The Lustre client's bytes in its RPCs to the OSTs: `read_bytes` and `write_bytes` sums of every OSC of this
    mount's client instance (osc.FSNAME-OSTxxxx-osc-INSTANCE/stats). llite's own read_bytes counts the read() calls,
    page-cache hits included, so it proves nothing."""
    instance = lustre_instance(mount.mount_point)
    if not instance:
        return None
    fsname, _, tag = instance.rpartition("-")
    files = [f for base in LUSTRE_ROOTS for f in sorted(base.glob(f"osc/{fsname}-OST*-osc-{tag}/stats"))]
    if not files:
        return None

    def sample():
        total = {"read_bytes": 0, "write_bytes": 0}
        for stats in files:
            try:
                lines = stats.read_text().splitlines()
            except OSError:
                return None
            for line in lines:
                words = line.split()
                if words and words[0] in total and "[bytes]" in words:
                    total[words[0]] += int(words[-1])    # NAME COUNT samples [bytes] MIN MAX SUM
        return total["read_bytes"], total["write_bytes"]
    return sample if sample() is not None else None


# (the counter's name, its factory: the mount -> a sampler or None); the first that finds a counter is used
COUNTERS = (
    ("block device (sysfs diskstats)", lambda m: block(m)),
    ("NFS client (mountstats)", lambda m: nfs(m) if m.storage_class == "nfs" else None),
    ("ceph-fuse client (admin socket: objecter bytes sent, messenger bytes received)",
     lambda m: ceph_fuse(m) if m.fs_type in ("fuse.ceph-fuse", "fuse.ceph") else None),
    ("Lustre client (its OSCs' RPC bytes)", lambda m: lustre(m) if m.fs_type == "lustre" else None),
)
BOOT_ID = Path("/proc/sys/kernel/random/boot_id")


class Counter:
    """The bytes a mount moved, or why nothing can say."""

    def __init__(self, mount, name=None, sample=None, reason=None, memory=False):
        self.mount, self.name, self._sample, self.reason, self.memory = mount, name, sample, reason, memory

    def sample(self):
        return self._sample() if self._sample else None

    def moved(self, before, after, direction):
        """{'bytes': moved in that direction, 'counter': its name}, or {'reason': why none}."""
        if self.memory:
            return {"memory": self.reason}
        if before is None or after is None:
            return {"reason": self.reason or f"{self.name} could not be read"}
        index = 0 if direction == "read" else 1
        return {"bytes": after[index] - before[index], "counter": self.name}

    def describe(self):
        return self.name or self.reason

    def key(self):
        """Which counter this is, across nodes: the machine (its boot id) and the mount. Nodes emulated on one
        machine share its counters, which must be counted once."""
        try:
            boot = BOOT_ID.read_text().strip()
        except OSError:
            boot = os.uname().nodename
        return f"{boot}:{self.mount.mount_point}"


def counter_for(path):
    mount = mount_of(path)
    if mount.storage_class == "tmpfs":
        return Counter(mount, reason=f"{mount.fs_type} is memory: no storage moves its bytes", memory=True)
    for name, factory in COUNTERS:
        sample = factory(mount)
        if sample:
            return Counter(mount, name, sample)
    return Counter(mount, reason=f"no byte counter for {mount.fs_type} ({mount.storage_class}) is known to iobench")


def verdict(moved_bytes, payload, memory=False):
    """('storage' | 'cache' | 'memory' | 'unproven', bytes moved / payload or None): below MIN_MOVED a cache
    served it; a memory file system is never storage; without a counter nothing is proven either way."""
    if memory:
        return "memory", None
    if moved_bytes is None or not payload:
        return "unproven", None
    ratio = moved_bytes / payload
    return ("storage" if ratio >= MIN_MOVED else "cache"), ratio
