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
"""
import datetime
import json
import os
import socket
import threading
import time
from pathlib import Path

BEAT_S = 1.0
STORE_TIMEOUT_S = 5.0
PROBE_TIMEOUT_S = 2.0
STATUS_ENV = "COMMBENCH_STATUS_DIR"       # the launch directory: status files and the record channel
ADDR_ENV = "COMMBENCH_LOCAL_ADDR"
RECORD_NODE_ENV = "COMMBENCH_RECORD_NODE"  # "1" on the node whose local rank 0 hands records back
CHANNEL = "records.jsonl"                  # in the launch directory, appended per record


def hb_key(rank):
    return f"commbench/hb/{rank}"


def info_key(rank):
    return f"commbench/info/{rank}"


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
    def __init__(self, hostname):
        env = os.environ
        self.rank = int(env.get("RANK", "0"))
        self.world = int(env.get("WORLD_SIZE", "1"))
        self.host = hostname
        self.addr = env.get(ADDR_ENV) or "0.0.0.0"
        self.master = env.get("MASTER_ADDR"), int(env.get("MASTER_PORT", "0") or 0)
        self.status = Path(env[STATUS_ENV]) / f"rank{self.rank}.json" if env.get(STATUS_ENV) else None
        self.done = 0
        self.last_ok = time.monotonic()   # last heartbeat the store took
        self.rank0 = None                 # rank 0's info: whom to name when the store is gone
        self._beat_store = self._query_store = None
        self._stopped = threading.Event()
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
        tmp = self.status.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps({"rank": self.rank, "pid": os.getpid(), "host": self.host,
                                       "local_rank": int(os.environ.get("LOCAL_RANK", "0")), "done": self.done,
                                       "exit": exit_code}))
            tmp.replace(self.status)
        except OSError:
            pass  # the launcher's directory is gone: it is ending this run anyway

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
                self._beat_store.check([hb_key(self.rank)])  # set does not wait for the store; check does
                self.last_ok = time.monotonic()
                if self.rank0 is None and self.rank != 0:  # rank 0 publishes before its process group exists
                    self.rank0 = json.loads(self._beat_store.get(info_key(0)))
            except Exception:  # store unreachable or gone: diagnose() reads last_ok
                pass
            self._stopped.wait(BEAT_S)

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

    def close(self, exit_code):
        """Stop beating; tell the launcher how this rank ends (it stops an agent that then hangs)."""
        self._write_status(exit_code)
        self._stopped.set()
        if self.enabled:
            self._thread.join(timeout=2 * BEAT_S)
        self.listener.close()
