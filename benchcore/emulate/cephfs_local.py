"""A real single-node Ceph cluster with CephFS mounted by ceph-fuse, for tests and demos.

One monitor, one manager, one BlueStore OSD on a sparse file, one MDS, all bound to
127.0.0.1 and started from Debian's packages (ceph, ceph-fuse, ceph-mds); CephFS is
mounted with ceph-fuse at DIR/mnt. Every file the cluster writes lives under DIR.
Standard library only.
"""
import json
import os
import signal
import socket
import time
import uuid

from benchcore.emulate.skeleton import Cli, DirFixture, Fail, alive, live_pids
from benchcore.files import open_append, write_new_text
from benchcore.processes import procs

PROG = "cephfs-local"
DEFAULT_DIR = os.environ.get("CEPHFS_LOCAL_DIR", "/tmp/cephfs-local")
FS_NAME = "cephfs"
DATA_POOL = "cephfs_data"
META_POOL = "cephfs_metadata"
PG_NUM = 8
OSD_BLOCK_BYTES = 8 << 30  # sparse; real disk use stays well under 1 GB
MON_PORTS = range(3300, 3400)
PACKAGES = {"ceph": "ceph", "ceph-mon": "ceph", "ceph-osd": "ceph", "ceph-mgr": "ceph", "monmaptool": "ceph",
            "ceph-mds": "ceph-mds", "ceph-fuse": "ceph-fuse", "fusermount": "fuse3"}
EPILOG = f"""\
examples:
  {PROG} up                        # cluster in {DEFAULT_DIR}, CephFS at {DEFAULT_DIR}/mnt
  {PROG} up --dir /tmp/c1          # a second, independent cluster
  {PROG} status --dir /tmp/c1      # what runs (exit 0 running, 1 partial, 3 stopped)
  ceph -c /tmp/c1/ceph.conf -s           # talk to it with the ordinary tools
  {PROG} down --dir /tmp/c1        # kill its daemons, unmount, remove /tmp/c1

Single replica, no authentication: a disposable cluster for tests, not for data.
`down` also works after a failed or interrupted `up`. The default DIR can be set
with CEPHFS_LOCAL_DIR.
"""


def last_log_line(path):
    try:
        with open(path, errors="replace") as f:
            lines = [ln.strip() for ln in f if ln.strip()]
        return lines[-1][:300] if lines else "(empty log)"
    except OSError:
        return "(no log)"


class Cluster(DirFixture):
    # What `up` creates inside DIR besides mnt; `down` removes these names and nothing else.
    OWNED = ("ceph.conf", "monmap", "mon", "mgr", "osd", "mds", "run", "log", "crash")
    ROOT_FOR = "ceph-fuse mounts; /dev/fuse is root-only here"

    def __init__(self, d):
        super().__init__(PROG, PACKAGES, d)
        self.conf = self.path("ceph.conf")

    def ceph(self, *args, timeout=30, check=True):
        return self.run(["ceph", "-c", self.conf, "--connect-timeout", str(int(max(1, timeout))), *args],
                        timeout=timeout + 5, check=check).stdout

    def ceph_json(self, *args, timeout=30):
        return json.loads(self.ceph(*args, "-f", "json", timeout=timeout))

    # -- state --------------------------------------------------------------
    def daemons(self):
        """[(name, pid, alive)] for every process `up` recorded."""
        if not self.state:
            return []
        return [(n, pid, alive(pid) and self.conf in (procs.proc_cmdline(pid) or []))
                for n, pid in self.state.get("daemons", {}).items()]

    def mounted(self):
        m = procs.mount_at(self.mnt)
        return m.fs_type if m else None

    def summary(self):
        ds = self.daemons()
        mount = self.mounted()
        want = self.state.get("want", []) if self.state else []
        up = {n for n, _, a in ds if a}
        running = bool(self.state) and bool(want) and set(want) <= up and mount == "fuse.ceph-fuse"
        anything = bool(up) or mount is not None or bool(live_pids(self.conf))
        return {
            "dir": self.dir, "conf": self.conf, "mount": self.mnt,
            "state": "running" if running else ("partial" if (anything or self.state) else "stopped"),
            "mounted": mount, "fs_name": FS_NAME, "data_pool": DATA_POOL, "metadata_pool": META_POOL,
            "mon_addr": f"127.0.0.1:{self.state['mon_port']}"
            if self.state and self.state.get("mon_port") else None,
            "daemons": {n: {"pid": pid, "alive": a} for n, pid, a in ds},
        }

    def report(self):
        s = self.summary()
        if s["state"] == "running":
            try:
                h = self.ceph_json("health", timeout=10)
                s["health"] = {"status": h.get("status"), "checks": sorted(h.get("checks", {}))}
            except Fail as e:
                s["health"] = {"status": "unknown", "error": str(e)}
        return s

    def describe(self, s):
        lines = [f" (conf {self.conf}, mon {s['mon_addr']})"]
        lines += [f"{n:<10} pid {d['pid']:<8} {'running' if d['alive'] else 'not running'}"
                  for n, d in s["daemons"].items()]
        lines += [f"mount      {self.mnt}: " + (s["mounted"] or "not mounted"),
                  f"fs {FS_NAME}: data pool {DATA_POOL}, metadata pool {META_POOL}"]
        if "health" in s:
            lines.append(f"health     {s['health']['status']} {' '.join(s['health'].get('checks', []))}".rstrip())
        return lines

    # -- up -----------------------------------------------------------------
    def up(self, args):
        """Start mon, mgr (unless --no-mgr), OSD, MDS and ceph-fuse within --timeout seconds."""
        with_mgr = not args.no_mgr
        t0 = time.monotonic()
        self.deadline = t0 + args.timeout

        self.need("ceph", "ceph-mon", "ceph-osd", "ceph-mds", "ceph-fuse", "monmaptool", "fusermount",
                  *(["ceph-mgr"] if with_mgr else []))
        s = self.running()
        if s:
            self.log(f"already running in {self.dir}: CephFS at {self.mnt} "
                     f"(data pool {DATA_POOL}, mon {s['mon_addr']})")
            return
        if len(self.path("run", "ceph-client.admin.4194304.asok")) > 107:
            raise Fail(f"{self.dir} is too long a path for the daemons' Unix sockets "
                       "(108 bytes); choose a shorter --dir")
        fsid = str(uuid.uuid4())
        self.claim(fsid=fsid, mon_port=None,
                   want=["mon.a", "osd.0", "mds.a", "ceph-fuse"] + (["mgr.x"] if with_mgr else []),
                   daemons={})
        for sub in ("run", "log", "crash", "mon/ceph-a", "mgr/ceph-x", "mds/ceph-a"):
            os.makedirs(self.path(sub), exist_ok=True)
        port = free_port()
        self.state["mon_port"] = port
        self.save()
        self.write_conf(fsid, port)

        # monitor
        self.run(["monmaptool", "--create", "--clobber", "--fsid", fsid, "--addv", "a",
                  f"[v2:127.0.0.1:{port}]", self.path("monmap")], timeout=self.left())
        self.run(["ceph-mon", "-c", self.conf, "--mkfs", "-i", "a", "--monmap", self.path("monmap")],
                 timeout=self.left())
        self.spawn("mon.a", ["ceph-mon", "-c", self.conf, "-f", "-i", "a"])
        self.wait(lambda: port_open(port), "mon.a to listen", ["mon.a"])
        if with_mgr:
            self.spawn("mgr.x", ["ceph-mgr", "-c", self.conf, "-f", "-i", "x"])

        # one BlueStore OSD on a sparse file created by mkfs
        osd_uuid = str(uuid.uuid4())
        osd_id = self.ceph("osd", "new", osd_uuid, timeout=self.left()).strip()
        if osd_id != "0":
            raise Fail(f"ceph osd new returned id {osd_id!r}, expected 0")
        os.makedirs(self.path("osd", "ceph-0"), exist_ok=True)
        self.run(["ceph-osd", "-c", self.conf, "-i", "0", "--mkfs", "--osd-uuid", osd_uuid], timeout=self.left())
        self.spawn("osd.0", ["ceph-osd", "-c", self.conf, "-f", "-i", "0"])

        # pools and the file system (the monitor alone does this; no need to wait for the OSD)
        for pool in (META_POOL, DATA_POOL):
            self.ceph("osd", "pool", "create", pool, str(PG_NUM), str(PG_NUM), timeout=self.left())
        self.ceph("fs", "new", FS_NAME, META_POOL, DATA_POOL, timeout=self.left())
        self.ceph("fs", "set", FS_NAME, "standby_count_wanted", "0", timeout=self.left())
        self.spawn("mds.a", ["ceph-mds", "-c", self.conf, "-f", "-i", "a"])
        # ceph-fuse gives up at once when no MDS is active: wait for up:active first
        self.wait(self.mds_active, "mds.a to become up:active", self.state["want"][:3])

        self.spawn("ceph-fuse", ["ceph-fuse", "-c", self.conf, "-f", "--id", "admin",
                                 "--log-to-file=true",
                                 f"--log-file={self.path('log', 'ceph-fuse.log')}",
                                 f"--admin-socket={self.path('run', 'ceph-fuse.asok')}",
                                 self.mnt])
        self.wait(lambda: self.mounted() == "fuse.ceph-fuse",
                  f"CephFS to be mounted at {self.mnt}", self.state["want"])
        health = self.ceph_json("health", timeout=min(30, self.left()))
        checks = ",".join(sorted(health.get("checks", {}))) or "-"
        self.log(f"up in {time.monotonic() - t0:.1f} s: CephFS mounted at {self.mnt} "
                 f"(data pool {DATA_POOL}, mon 127.0.0.1:{port}, {health.get('status')} [{checks}])")
        self.log(f"use: ceph -c {self.conf} -s")

    def left(self):
        """Seconds left of --timeout; Fail when none."""
        r = self.deadline - time.monotonic()
        if r <= 0:
            raise Fail("up did not finish within its --timeout")
        return r

    def mds_active(self):
        """Ask the MDS through its admin socket (local, no monitor round trip)."""
        asok = self.path("run", "mds.a.asok")
        if not os.path.exists(asok):
            return False
        try:
            out = self.run(["ceph", "--admin-daemon", asok, "status"], timeout=10, check=False).stdout
            return json.loads(out or "{}").get("state") == "up:active"
        except (Fail, ValueError):
            return False

    def write_conf(self, fsid, port):
        d = self.dir
        conf = f"""\
# written by {PROG}; disposable single-node cluster, everything under {d}
[global]
fsid = {fsid}
mon host = [v2:127.0.0.1:{port}]
public addr = 127.0.0.1
cluster addr = 127.0.0.1
public network = 127.0.0.0/8
ms bind ipv4 = true
ms bind ipv6 = false
ms bind msgr1 = false
auth cluster required = none
auth service required = none
auth client required = none
auth allow insecure global id reclaim = false
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
osd pool default pg num = {PG_NUM}
osd pool default pgp num = {PG_NUM}
osd pool default pg autoscale mode = off
osd crush chooseleaf type = 0
mon data avail warn = 2
mon data avail crit = 1
run dir = {d}/run
crash dir = {d}/crash
admin socket = {d}/run/$name.asok
log file = {d}/log/$name.log
mon cluster log file = {d}/log/cluster.log
keyring = /dev/null

[mon]
mon data = {d}/mon/$cluster-$id

[mgr]
mgr data = {d}/mgr/$cluster-$id

[osd]
osd data = {d}/osd/$cluster-$id
osd objectstore = bluestore
bluestore block create = true
bluestore block size = {OSD_BLOCK_BYTES}
osd memory target = 939524096

[mds]
mds data = {d}/mds/$cluster-$id
mds cache memory limit = 268435456

[client]
# the ceph CLI and ceph-fuse are both client.admin: a $pid keeps their sockets apart
admin socket = {d}/run/$cluster-$name.$pid.asok
log to file = false
"""
        write_new_text(self.conf, conf, "conf")

    def spawn(self, name, cmd):
        """Start a daemon in a session of its own that outlives this script; record its PID."""
        with open_append(self.path("log", f"{name}.out"), "daemon log") as out:
            p = procs.spawn(cmd, stdout=out, stderr=out, die_with_parent=False)
        self.state["daemons"][name] = p.pid
        self.save()

    def wait(self, ready, what, watch):
        """Until ready(); Fail when a daemon in watch exits first or the --timeout is spent."""
        while not ready():
            for n, pid, up in self.daemons():
                if n in watch and not up:
                    logf = self.path("log", "ceph-fuse.log" if n == "ceph-fuse" else f"{n}.log")
                    out = self.path("log", f"{n}.out")
                    why = last_log_line(out) if os.path.getsize(out) else last_log_line(logf)
                    raise Fail(f"{n} exited while waiting for {what}: {why}")
            if time.monotonic() >= self.deadline:
                raise Fail(f"gave up waiting for {what} (--timeout)")
            time.sleep(0.2)

    def teardown(self):
        """Unmount, then SIGKILL by PID what up started and whatever else runs with our ceph.conf."""
        said = []
        if self.mounted():  # unmount first, while the MDS still answers; lazily when something holds it
            said.append(f"unmounted {self.mnt}")
            if self.run(["fusermount", "-u", self.mnt], timeout=20, check=False).returncode and self.mounted():
                self.run(["umount", "-l", self.mnt], timeout=20, check=False)
        # the recorded daemons, then anything else with our config (a CLI call or mkfs cut off by
        # an interrupted `up`)
        pids = {pid for _, pid, up in self.daemons() if up} | set(live_pids(self.conf))
        for pid in pids:
            procs.kill(pid, signal.SIGKILL)
        end = time.monotonic() + 30
        while any(alive(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.05)
        still = [p for p in pids if alive(p)]
        if still:
            raise Fail(f"processes {still} survived SIGKILL; state kept in {self.dir}")
        # dead; give init a moment to reap them so they vanish from the process table
        end = time.monotonic() + 10
        while any(procs.proc_stat(p) for p in pids) and time.monotonic() < end:
            time.sleep(0.1)
        if self.mounted():
            self.run(["umount", "-l", self.mnt], timeout=20, check=False)
        return [f"killed {len(pids)} process(es)"] + said


def port_open(port):
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def free_port():
    for port in MON_PORTS:
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise Fail(f"no free monitor port in {MON_PORTS.start}-{MON_PORTS.stop - 1}")


def main(argv=None):
    cli = Cli(PROG, "A real single-node Ceph cluster (mon, mgr, BlueStore OSD on a file, MDS; 127.0.0.1 only) "
              "with CephFS mounted by ceph-fuse at DIR/mnt.", EPILOG,
              "--dir", default=DEFAULT_DIR, help="state directory; CephFS is mounted at DIR/mnt (default %(default)s)")
    up = cli.command("up", "start the cluster and mount CephFS (a second up reports the running cluster)")
    up.add_argument("--timeout", type=float, default=180, help="give up after this many seconds (default 180)")
    up.add_argument("--no-mgr", action="store_true", help="skip ceph-mgr (0.3 GB less memory; no PG states in ceph -s)")
    cli.command("down", "unmount, kill the daemons it started (by PID), remove the state")
    cli.status_command("say what runs (exit 0 running, 1 partial, 3 stopped)")
    return cli.main(argv, lambda args: Cluster(args.dir).command(args))
