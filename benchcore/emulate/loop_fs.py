"""A real XFS or ext4 file system on a loop device, the test stand-in for a local NVMe mount.

The image is a sparse file DIR/disk.img attached with `losetup --direct-io=on`, so
O_DIRECT I/O on the mount reaches the backing file without the page cache twice;
the file system is mounted at DIR/mnt. Standard library only; needs root.
"""
import os
import time

from benchcore.emulate.skeleton import Cli, DirFixture, Fail
from benchcore.files import write_new
from benchcore.processes import procs
from benchcore.units import format_size, parse_size

PROG = "loop-fs"
DEFAULT_DIR = os.environ.get("LOOP_FS_DIR", "/tmp/loop-fs")
DEFAULT_SIZE = 4 << 30
MIN_BYTES = {"xfs": 300 << 20, "ext4": 16 << 20}
MKFS = {"xfs": ["mkfs.xfs", "-q", "-f"],
        # initialise inode tables and journal now, not in a background thread during a benchmark
        "ext4": ["mkfs.ext4", "-q", "-F", "-E", "lazy_itable_init=0,lazy_journal_init=0"]}
PACKAGES = {"mkfs.xfs": "xfsprogs", "mkfs.ext4": "e2fsprogs", "losetup": "util-linux",
            "mount": "mount", "umount": "mount"}
EPILOG = f"""\
examples:
  {PROG} up                          # 4 GiB XFS at {DEFAULT_DIR}/mnt
  {PROG} up --fs ext4 --size 1G --dir /tmp/e4
  {PROG} status --dir /tmp/e4        # exit 0 up, 1 partial, 3 down
  {PROG} down --dir /tmp/e4          # unmount, detach the loop device, remove /tmp/e4

The image is sparse: it takes real disk space only as data is written. A second
`up` reports the running file system; `down` also works after a failed `up`.
The default DIR can be set with LOOP_FS_DIR.
"""


def loops_backed_by(image):
    """Loop devices (/dev/loopN) whose backing file is image (also once it is deleted)."""
    devs = []
    try:
        names = sorted(os.listdir("/sys/block"))
    except OSError:
        return devs
    for name in names:
        try:
            with open(f"/sys/block/{name}/loop/backing_file") as f:
                backing = f.read().strip()
        except OSError:
            continue
        if backing in (str(image), f"{image} (deleted)"):
            devs.append(f"/dev/{name}")
    return devs


def dio_of(dev):
    try:
        with open(f"/sys/block/{os.path.basename(dev)}/loop/dio") as f:
            return f.read().strip() == "1"
    except OSError:
        return False


class LoopFS(DirFixture):
    OWNED = ("disk.img",)
    ROOT_FOR = "losetup, mkfs, mount"

    def __init__(self, d):
        super().__init__(PROG, PACKAGES, d)
        self.image = self.path("disk.img")

    def summary(self):
        m = procs.mount_at(self.mnt)
        loops = loops_backed_by(self.image)
        st = self.state or {}
        dev = st.get("device")
        running = bool(st) and m is not None and dev is not None and m.source == dev \
            and m.fs_type == st.get("fs") and dev in loops
        anything = m is not None or bool(loops) or bool(st)
        return {"dir": self.dir, "mount": self.mnt, "image": self.image,
                "state": "running" if running else ("partial" if anything else "stopped"),
                "fs": st.get("fs"), "size_bytes": st.get("size_bytes"), "device": dev,
                "mounted": {"source": m.source, "fstype": m.fs_type} if m else None,
                "loop_devices": loops, "direct_io": dio_of(dev) if dev else None}

    def describe(self, s):
        m = s["mounted"]
        return [f": {s['fs']} ({format_size(s['size_bytes'] or 0)}) on {s['device'] or 'no loop device'}"
                + (f" (direct-io {'on' if s['direct_io'] else 'off'})" if s["device"] else ""),
                f"mount         {self.mnt}: " + (f"{m['fstype']} from {m['source']}" if m else "not mounted"),
                f"loop devices  {' '.join(s['loop_devices']) or 'none'} (backing file {self.image})"]

    def up(self, args):
        """Set up --fs (default xfs) of --size (default 4 GiB); unasked: what runs, if anything."""
        t0 = time.monotonic()
        fs, size = args.fs, parse_size(args.size, "--size") if args.size is not None else None
        self.need("losetup", "mount", "umount", MKFS[fs or "xfs"][0])
        if size is not None and size < MIN_BYTES[fs or "xfs"]:
            raise Fail(f"--size {format_size(size)} is too small for {fs or 'xfs'} "
                       f"(at least {format_size(MIN_BYTES[fs or 'xfs'])})")
        s = self.running()
        if s:
            fs, size = fs or s["fs"], size or s["size_bytes"]  # unasked: whatever runs
            if (s["fs"], s["size_bytes"]) != (fs, size):
                raise Fail(f"{self.dir} already holds {s['fs']} ({format_size(s['size_bytes'])}) "
                           f"on {s['device']}; run '{PROG} down --dir {self.dir}' first")
            self.log(f"already up: {fs} ({format_size(size)}) on {s['device']} "
                     f"(direct-io {'on' if s['direct_io'] else 'off'}) mounted at {self.mnt}")
            return
        fs, size = fs or "xfs", size or DEFAULT_SIZE
        self.claim(fs=fs, size_bytes=size, device=None)
        write_new(self.image, lambda f: f.truncate(size), "disk image", binary=True, mode=0o600)   # sparse
        dev = self.run(["losetup", "--find", "--show", "--direct-io=on", self.image]).stdout.strip()
        self.state["device"] = dev
        self.save()
        if not dio_of(dev):
            raise Fail(f"{dev} runs without direct I/O: the file system under {self.dir} "
                       "refuses O_DIRECT; choose a --dir on another file system")
        self.run(MKFS[fs] + [dev], timeout=300)
        self.run(["mount", "-t", fs, dev, self.mnt])
        self.log(f"up in {time.monotonic() - t0:.1f} s: {fs} ({format_size(size)}, sparse image "
                 f"{self.image}) on {dev} (direct-io on) mounted at {self.mnt}")

    def teardown(self):
        said = []
        while procs.mount_at(self.mnt):  # mounted more than once after repeated manual mounts
            if self.run(["umount", self.mnt], check=False).returncode != 0:
                self.run(["umount", "-l", self.mnt], timeout=60)
                said.append(f"{self.mnt} was busy: detached lazily")
        devs = loops_backed_by(self.image)
        for dev in devs:
            done = self.run(["losetup", "-d", dev], timeout=60, check=False)
            if done.returncode != 0 and dev in loops_backed_by(self.image):
                raise Fail(f"cannot detach {dev}: {procs.one_line(done.stderr)}")
        if devs:
            said.insert(0, f"detached {', '.join(devs)}")
        # the kernel lets go of a loop device once nothing holds it; that can take a while
        # when another mount namespace kept a copy of the mount, so only wait briefly here
        end = time.monotonic() + 5
        while loops_backed_by(self.image) and time.monotonic() < end:
            time.sleep(0.1)
        if loops_backed_by(self.image):
            said.append(f"{', '.join(loops_backed_by(self.image))} still listed: the kernel "
                        "frees it (autoclear) once the last user lets go")
        return said


def main(argv=None):
    cli = Cli(PROG, "A real XFS/ext4 file system on a loop device attached with --direct-io=on, "
              "mounted at DIR/mnt (a stand-in for local NVMe).", EPILOG,
              "--dir", default=DEFAULT_DIR, help="holds disk.img; mounted at DIR/mnt (default %(default)s)")
    up = cli.command("up", "create, attach, mkfs, mount (a second up reports the running one)")
    up.add_argument("--fs", choices=sorted(MKFS), help="default xfs")
    up.add_argument("--size", help="image size, binary units (default 4G)")
    cli.command("down", "unmount, detach, remove what up created")
    cli.status_command()
    return cli.main(argv, lambda args: LoopFS(args.dir).command(args))
