"""Rank liveness, so a failed run names the rank that caused it, not the one that noticed.

Every rank (started by torchrun, before its process group exists):
- beats `commbench/hb/<rank>` (wall time) once a second into the store its job already shares
  (MASTER_ADDR:MASTER_PORT, the rendezvous store on node rank 0), from a daemon thread, and
  publishes `commbench/info/<rank>` = host, address, pid and a probe port;
- listens on that probe port and never accepts: the kernel completes a connection as long as the
  process exists, even while it is stopped; a dead process refuses; an unreachable host is silent;
- keeps $COMMBENCH_STATUS_DIR/rank<R>.json (pid, host, measurements done) up to date for the
  commbench that launched it on this node: stall watchdog, stopped-process check, cleanup.

When a rank fails, `diagnose()` waits a little over two beats, takes the peers whose heartbeat
did not move, and probes each: died / stopped responding / became unreachable.

Hangs: every rank keeps a Position (what it measures, the step, operations entered and left), which
the heartbeat thread publishes to `commbench/where/<rank>` once a beat, outside the timed loop.
Rank 0's heartbeat thread is the watchdog: when its own position has not moved for --hang-timeout,
it reads every rank's, reports who is inside the operation waiting on a peer, who never entered it
(and where it is instead), who stopped beating, and the NCCL/Gloo environment, then ends the run
with EXIT_HANG; the launcher keeps every record measured before.
A peer that died (no heartbeat, its probe port refused, and it never said it ended) ends the run as
soon as rank 0 has waited a few beats on it: Gloo does not always notice a killed peer before its
timeout.
"""
import datetime
import json
import os
import socket
import threading
import time
from pathlib import Path

from benchcore.files import replace_text

BEAT_S = 1.0
DEAD_WAIT_BEATS = 4         # rank 0 stuck this many beats: it looks for a peer that died
STORE_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 2.0
STATUS_ENV = "COMMBENCH_STATUS_DIR"       # the launch directory: status files and the record channel
ADDR_ENV = "COMMBENCH_LOCAL_ADDR"
RECORD_NODE_ENV = "COMMBENCH_RECORD_NODE"  # "1" on the node whose local rank 0 hands records back
CHANNEL = "records.jsonl"                  # in the launch directory, appended per record
REMOTE_STATUS = "hosts"                    # in it: status files of ranks on other hosts (ssh), progress only
WORKER_NAME = "commbench-rank"             # every worker's process name (ps, /proc/<pid>/comm)


EXIT_HANG = 4   # a rank's (and commbench's) exit status after a hang report


class Position:
    """Where this rank is: the measurement, its step, and the timed operations it entered and left."""

    def __init__(self):
        self.what, self.step, self.entered, self.left, self.since = "start-up", "", 0, 0, time.time()

    def at(self, step, what=None):
        self.what = what or self.what
        self.step, self.since = step, time.time()

    def state(self):
        return {"what": self.what, "step": self.step, "entered": self.entered, "left": self.left,
                "since": self.since}


def where_key(rank):
    return f"commbench/where/{rank}"


def hb_key(rank):
    return f"commbench/hb/{rank}"


def info_key(rank):
    return f"commbench/info/{rank}"


def end_key(rank):
    return f"commbench/end/{rank}"


def probe(addr, port, timeout=PROBE_TIMEOUT_S):
    """'alive' (a process holds the port), 'dead' (the host refuses) or 'unreachable' (no answer)."""
    try:
        with socket.create_connection((addr, int(port)), timeout=timeout):
            return "alive"
    except ConnectionRefusedError:
        return "dead"
    except OSError:
        return "unreachable"


def describe(rank, info, verdict):
    """One line naming a peer that stopped beating, phrased alike by every rank that sees it."""
    if not info:
        return f"rank {rank} stopped sending heartbeats and never reported its host"
    who = f"rank {rank} on {info['host']} ({info['addr']}, pid {info['pid']})"
    if verdict == "dead":
        return f"{who} died: its heartbeat stopped and its process is gone"
    if verdict == "alive":
        return f"{who} stopped responding: no heartbeat, but its process still exists (stopped or hung)"
    return (f"rank {rank} on {info['host']} ({info['addr']}) became unreachable: no heartbeat and no answer "
            f"from {info['addr']} (link down or node gone)")


class Liveness:
    def __init__(self, hostname, hang_timeout=None, on_hang=None, on_dead=None):
        env = os.environ
        self.rank = int(env.get("RANK", "0"))
        self.world = int(env.get("WORLD_SIZE", "1"))
        self.host = hostname
        self.addr = env.get(ADDR_ENV) or "0.0.0.0"
        self.master = env.get("MASTER_ADDR"), int(env.get("MASTER_PORT", "0") or 0)
        self.status = Path(env[STATUS_ENV]) / f"rank{self.rank}.json" if env.get(STATUS_ENV) else None
        self.done, self.step, self.repeats = 0, None, None   # records handed back; the step under way (announce)
        self.last_ok = time.monotonic()   # last heartbeat the store took
        self.rank0 = None                 # rank 0's info: whom to name when the store is gone
        self.position = Position()
        self.hang_timeout, self.on_hang, self.on_dead = hang_timeout, on_hang, on_dead   # the watchdog (rank 0)
        self._moved = (None, time.monotonic())
        self._probed = {}                 # rank: the last beat at which the watchdog probed it
        self._beat_store = self._query_store = None
        self._stopped = threading.Event()
        self.ending = threading.Event()   # the watchdog is ending the run: it writes its record and exits
        self.listener = socket.socket()
        try:
            self.listener.bind((self.addr, 0))
        except OSError:  # not an address of this host after all: any will do for the probe
            self.listener.bind(("", 0))
        self.listener.listen(64)
        self.info = {"host": hostname, "addr": self.addr, "pid": os.getpid(),
                     "port": self.listener.getsockname()[1]}
        self._write_status()
        self.enabled = self.world > 1 and bool(self.master[0]) and self.master[1] > 0
        if self.enabled:
            self._thread = threading.Thread(target=self._beat, name="commbench-heartbeat", daemon=True)
            self._thread.start()

    def _write_status(self, exit_code=None):
        if not self.status or not self.status.parent.is_dir():
            return
        try:
            replace_text(self.status, json.dumps({"rank": self.rank, "pid": os.getpid(), "host": self.host,
                                                  "local_rank": int(os.environ.get("LOCAL_RANK", "0")),
                                                  "done": self.done, "exit": exit_code, "step": self.step,
                                                  **({"repeats": self.repeats} if self.repeats else {})}))
        except OSError:
            pass  # the launcher's directory is gone: it is ending this run anyway

    def announce(self, step, repeats=None):
        """Step `step` of the plan (Plan.steps; -1: the time budget's calibration) begins: the launcher shows it.
        Between timed loops only (a small file replaced); repeats: those a time budget chose."""
        self.step = step
        if repeats is not None:
            self.repeats = repeats
        self._write_status()

    def progress(self, records=1):
        self.done += records
        self._write_status()

    def _connect(self):
        import torch.distributed as dist
        timeout = datetime.timedelta(seconds=STORE_TIMEOUT_S)
        return dist.TCPStore(self.master[0], self.master[1], is_master=False, timeout=timeout)

    def _beat(self):
        while not self._stopped.is_set():
            try:
                if self._beat_store is None:
                    self._beat_store, self._query_store = self._connect(), self._connect()
                    self._beat_store.set(info_key(self.rank), json.dumps(self.info))
                self._beat_store.set(hb_key(self.rank), f"{time.time():.3f}")
                self._beat_store.set(where_key(self.rank), json.dumps(self.position.state()))
                self._beat_store.check([hb_key(self.rank)])  # set does not wait for the store; check does
                self.last_ok = time.monotonic()
                self._watch()
                if self.rank0 is None and self.rank != 0:  # rank 0 publishes before its process group exists
                    self.rank0 = json.loads(self._beat_store.get(info_key(0)))
            except Exception:  # store unreachable or gone: diagnose() reads last_ok
                pass
            self._stopped.wait(BEAT_S)

    def _watch(self):
        """Rank 0: end the run once it has waited DEAD_WAIT_BEATS on a peer that died, report a hang once its
        position has not moved for hang_timeout."""
        if self.rank != 0 or not self.on_hang or not self.hang_timeout:
            return
        state = self.position.state()
        key = (state["what"], state["step"], state["entered"], state["left"])
        if key != self._moved[0]:
            self._moved = (key, time.monotonic())
            return
        stuck = time.monotonic() - self._moved[1]
        if stuck > self.hang_timeout:
            self.ending.set()          # before the report: its probes take seconds, a timeout may come meanwhile
            self.on_hang(self.hang_report(stuck))
        elif stuck > DEAD_WAIT_BEATS * BEAT_S and self.on_dead:
            dead = self.dead_peers()
            if dead:
                self.ending.set()
                self.on_dead(dead)

    def wait_for_watchdog(self):
        """The main thread, ending too (a timeout beside a hang the watchdog reports): let the watchdog write its
        record and end the process first; go on after a bound (its probes: PROBE_TIMEOUT_S per rank at most)."""
        if self.ending.is_set():
            time.sleep(self.world * PROBE_TIMEOUT_S + 2 * STORE_TIMEOUT_S)

    def dead_peers(self):
        """Lines naming the peers that stopped beating without saying they ended, and whose process is gone. A peer
        that answers the probe, or does not (unreachable: up to PROBE_TIMEOUT_S), is probed once per last beat."""
        store, now, lines = self._query_store, time.time(), []
        for r in range(1, self.world):
            if not store.check([hb_key(r)]) or store.check([end_key(r)]):
                continue
            beat = float(store.get(hb_key(r)))
            if now - beat <= 3 * BEAT_S or self._probed.get(r) == beat:
                continue
            self._probed[r] = beat
            info = json.loads(store.get(info_key(r)))
            if probe(info["addr"], info["port"]) == "dead":
                lines.append(describe(r, info, "dead"))
        return lines

    def hang_report(self, stuck_s):
        """(lines, per-rank states): where every rank is, told apart: inside the operation (waiting on a peer),
        never entered it (and where it is), or no longer beating (probed: died / stopped / unreachable)."""
        store, now, mine = self._query_store, time.time(), self.position.state()
        op = mine["entered"]
        lines = [f"hang: no progress for {stuck_s:.0f} s (--hang-timeout) in {mine['what']}, {mine['step']}"
                 + (f", timed operation {op}" if mine["entered"] > mine["left"] else "")]
        ranks = []
        for r in range(self.world):
            info = json.loads(store.get(info_key(r))) if store.check([info_key(r)]) else {}
            where = json.loads(store.get(where_key(r))) if store.check([where_key(r)]) else None
            beat = float(store.get(hb_key(r))) if store.check([hb_key(r)]) else None
            who = f"rank {r} on {info.get('host', '?')}"
            if beat is None or now - beat > 3 * BEAT_S:
                state, text = "silent", describe(r, info or None, probe(info["addr"], info["port"]) if info else None)
            elif where and where["entered"] > where["left"]:
                state = "inside"
                text = f"{who}: inside timed operation {where['entered']} of {where['what']}, waiting on a peer"
            else:
                state = "outside"
                text = (f"{who}: never entered {'operation ' + str(op) if op else 'it'}: alive, at "
                        f"{where['what']}, {where['step']} for {now - where['since']:.0f} s" if where else
                        f"{who}: alive, never reported a position")
            ranks.append({"rank": r, "host": info.get("host"), "state": state, **(where or {})})
            lines.append(text)
        return lines, ranks

    def _peers(self, store):
        """{rank: last beat (wall time)} of every other rank that has beaten."""
        keys = {r: hb_key(r) for r in range(self.world) if r != self.rank}
        present = {r: k for r, k in keys.items() if store.check([k])}
        return {r: float(store.get(k)) for r, k in present.items()}, set(keys) - set(present)

    def _stale(self, out):
        store = self._query_store
        first, never = self._peers(store)
        time.sleep(2.5 * BEAT_S)
        second, never2 = self._peers(store)
        stale = sorted((r for r in first if second.get(r) == first[r]), key=lambda r: first[r])
        lines = []
        for r in stale[:4] + sorted(never & never2)[:4]:  # first to stop first: the cause, not the echoes
            info = json.loads(store.get(info_key(r))) if store.check([info_key(r)]) else None
            lines.append(describe(r, info, probe(info["addr"], info["port"]) if info else None))
        out.extend(lines)

    def diagnose(self):
        """Lines naming the peers behind a failure (empty when every peer still beats)."""
        if not self.enabled or self._query_store is None:
            return []
        if time.monotonic() - self.last_ok > 3 * BEAT_S:  # our own heartbeats no longer arrive
            return [self._store_lost()]
        out = []
        worker = threading.Thread(target=self._stale, args=(out,), daemon=True)
        worker.start()
        worker.join(2.5 * BEAT_S + 2 * STORE_TIMEOUT_S)
        if worker.is_alive() or time.monotonic() - self.last_ok > 3 * BEAT_S:
            return [self._store_lost()]
        return out

    def _store_lost(self):
        addr, port = self.master
        who = f"rank 0 on {self.rank0['host']} ({addr})" if self.rank0 else f"node rank 0 ({addr})"
        if probe(addr, port) == "unreachable":
            return (f"{who}, which holds the rendezvous store, became unreachable from {self.host} "
                    "(link down or node gone)")
        return f"the rendezvous store at {addr}:{port} ({who}) stopped answering: its launcher ended"

    def end(self, exit_code):
        """From any thread, this one included: the launcher learns how this rank ends."""
        self._write_status(exit_code)

    def close(self, exit_code):
        """Stop beating; tell the launcher how this rank ends (it stops an agent that then hangs)."""
        self._write_status(exit_code)
        self._stopped.set()
        if self.enabled:
            self._thread.join(timeout=2 * BEAT_S)
            if self._beat_store is not None and not self._thread.is_alive():
                try:  # before the probe port closes: rank 0's watchdog must not take this end for a death
                    self._beat_store.set(end_key(self.rank), str(exit_code))
                except Exception:
                    pass  # the store is gone: nobody is left to watch
        self.listener.close()
