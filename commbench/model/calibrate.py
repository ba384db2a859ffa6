"""`commbench topo --calibrate`: this machine's tier ceilings, measured, as a topology file --topology takes.

Utilisation divides busbw by a ceiling: a rate busbw cannot exceed (commbench/model/topology.py CEILINGS).
A CPU machine has no datasheet for its CPU transports' tiers, so they are measured here, each as the most
the path carries:

  shared_memory  (MPI ranks on one node) the fastest single-thread memory copy over buffers of 64 KiB to
                 64 MiB, best of several: a rank's bytes cross shared memory in copies its own core makes,
                 so one rank's busbw cannot beat one core's copy rate.
  intra_node     (Gloo, loopback TCP) the most that 1..K concurrent TCP streams over 127.0.0.1 carry together
                 (K = CPUs, at most 4) in their best 0.1 s of 1.2 s, their ends in processes and in threads:
                 every rank's traffic goes through the one loopback, so the node's ranks together cannot beat
                 it; short windows catch the moments a busy machine leaves the loopback the CPUs (bytes the
                 receive buffer held from before a window count in it: its 1 MiB, 2 MiB as Linux doubles it,
                 adds at most 0.02 GB/s).
                 A tbf-shaped lo: the tc rate's TCP payload.
  inter_node     a tbf-shaped inter-node link (the default route's interface, or --link): its tc rate's TCP
                 payload; else the nodes are emulated on this machine and share the loopback (fabric loopback).
  latency_us     half the fastest 1-byte round trip over loopback TCP (the kernel's floor; Gloo adds its own);
                 shared memory's is left 0, so the model's time there is its bandwidth bound (a flag
                 bounced between two busy-waiting processes took 0.27 us one minute and 5.6 ms the next on
                 a busy 2-core machine: no floor worth the name).
  per_op_us      a CPU backend's own cost per collective call (Gloo's work queue and Python path: 0.2-2 ms on
                 a 2-core machine, 30-300x the loopback's latency; MPI's a few us): the mean time of a
                 1-element all_reduce on 2 ranks, timed by `commbench run` itself (one launch per backend: Gloo
                 always, MPI where mpi4py is installed), less the 2 steps x latency_us the tiers already count.
                 The model adds it once per collective call, and a Gloo all_reduce once per segment its ring sends
                 (min(2 x ranks, elements): a 1-element call sends one, 1 KiB on 2 ranks four; alphabeta.py
                 gloo_segments). That is Gloo's small-message plateau (1 KiB-256 KiB at 3-4x a 1-element call): each
                 segment is a message handed between Gloo's threads, which on 2 cores costs about what a whole
                 1-element call does; the count, not the bytes, sets the time below ~1 MiB.
"""
import importlib.util
import json
import multiprocessing
import os
import socket
import sys
import threading
import time

import yaml

from benchcore.errors import shown
from benchcore.processes import procs
from benchcore.progress import Reporter
from benchcore.results.records import git_revision, hostname, timestamp
from commbench.model import detect, topology

COPY_SIZES = [64 << 10 << (2 * i) for i in range(6)]     # 64K .. 64M
STREAM_CHUNK = 1 << 20
REPEATS = 5
BIN, BINS = 0.1, 12  # loopback streams: their rate per BIN seconds, BINS of them per measurement
RCVBUF = 1 << 20     # a stream's receive buffer: what it can hold from before a BIN
OP_ITERS, OP_WARMUP, OP_TIMEOUT = 1000, 100, 120   # per-op cost: timed calls, warm-up calls, seconds per launch
# backend -> (the launcher that starts its 2 ranks here, what else it needs)
OP_BACKENDS = {"gloo": ("local", None), "mpi": ("mpirun", "mpi4py")}


def copy_gbps(repeats=2 * REPEATS):
    """(GB/s, size) of the fastest single-thread copy (numpy) over COPY_SIZES."""
    import numpy as np  # here: only --calibrate needs it
    best = (0.0, 0)
    for size in COPY_SIZES:
        src, dst = np.ones(size, np.uint8), np.zeros(size, np.uint8)
        loops = max(1, (64 << 20) // size)
        for _ in range(repeats):
            start = time.perf_counter()
            for _ in range(loops):
                np.copyto(dst, src)
            rate = size * loops / (time.perf_counter() - start) / 1e9
            best = max(best, (rate, size))
    return best


def _pair():
    """A connected TCP pair over 127.0.0.1 (sender, receiver)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        server.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCVBUF)   # the receiver's, before the handshake
        sender = socket.create_connection(server.getsockname(), timeout=30)
        receiver, _ = server.accept()
        receiver.settimeout(30)
    return sender, receiver


def _send(sock, other, until):
    if other:
        other.close()        # the receiving end's copy: only the receiver's process holds it, so it sees the end
    payload = bytes(STREAM_CHUNK)
    try:
        while time.monotonic() < until:
            sock.sendall(payload)
    except OSError:
        pass
    sock.close()


def _receive(sock, other, start, out):
    """Bytes received per BIN seconds from start (the monotonic clock, which every process shares) -> out."""
    if other:
        other.close()
    buf, counts = memoryview(bytearray(STREAM_CHUNK)), [0] * BINS
    try:
        while True:
            n = sock.recv_into(buf)
            if not n:
                break
            i = int((time.monotonic() - start) / BIN)
            if 0 <= i < BINS:
                counts[i] += n
    except OSError:
        pass
    out(counts)


def streams_gbps(count, processes):
    """GB/s that `count` concurrent TCP streams over 127.0.0.1 carried together in their best BIN seconds of
    BINS (past slow start), each end in its own process (as a rank's is) or its own thread of this one."""
    ctx = multiprocessing.get_context("fork")
    start = time.monotonic() + 0.1
    until = start + BINS * BIN + 0.05
    workers, pipes, results = [], [], []
    for _ in range(count):
        sender, receiver = _pair()
        if processes:
            mine, theirs = ctx.Pipe(duplex=False)
            pipes.append(mine)
            workers += [ctx.Process(target=_send, args=(sender, receiver, until)),
                        ctx.Process(target=_receive, args=(receiver, sender, start, theirs.send))]
        else:
            workers += [threading.Thread(target=_send, args=(sender, None, until)),
                        threading.Thread(target=_receive, args=(receiver, None, start, results.append))]
        for w in workers[-2:]:
            w.start()
        if processes:
            sender.close()
            receiver.close()
    results += [p.recv() for p in pipes if p.poll(BINS * BIN + 30)]
    for w in workers:
        w.join(30)
    return max(map(sum, zip(*results)), default=0) / BIN / 1e9


def loopback_gbps():
    """(GB/s, streams, how) of the most 1..K concurrent loopback TCP streams carried together in any BIN."""
    most = min(os.cpu_count() or 1, 4)
    return max((streams_gbps(k, how == "processes"), k, how) for k in range(1, most + 1)
               for how in ("processes", "threads"))


def latency_us(trips=300):
    """Half the fastest 1-byte round trip over loopback TCP, in microseconds."""
    a, b = _pair()
    for s in (a, b):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    best = float("inf")
    with a, b:
        for _ in range(trips):
            start = time.perf_counter()
            a.sendall(b"x")
            b.recv(1)
            b.sendall(b"x")
            a.recv(1)
            best = min(best, time.perf_counter() - start)
    return best / 2 * 1e6


def per_op_us(backend):
    """(mean us of a 1-element all_reduce on 2 ranks of backend on this machine, None), or (None, why not): one
    `commbench run`, so the call is timed as every measurement is (warm-up, the timed loop, the mean over ranks)."""
    launcher, needs = OP_BACKENDS[backend]
    if needs and importlib.util.find_spec(needs) is None:
        return None, f"{needs} is not installed"
    argv = [sys.executable, "-m", "commbench.commands.cli", "run", "--collective", "all_reduce", "-b", "4", "-e", "4",
            "--nodes", "1", "--nproc-per-node", "2", "--launcher", launcher, "--backend", backend, "--place", "in",
            "-n", str(OP_ITERS), "-w", str(OP_WARMUP), "--topology", "localhost", "--format", "json"]
    done = procs.run(argv, OP_TIMEOUT)
    times = [json.loads(line).get("time_us") for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or done.timed_out or not times or not times[0]:
        why = [ln for ln in done.stderr.splitlines() if ln.startswith("error:")] or [procs.one_line(done.stderr, 200)]
        return None, "timed out" if done.timed_out else shown(why[-1], 200)
    return times[0], None


def measure(link=None):
    """{"data": the topology file's fields, "notes": [how each rate was found]} for this machine."""
    found = detect.detect(link)
    nets = {n["name"]: n for n in found["net"]}
    lo = next((n for n in found["net"] if n["loopback"]), {"name": "lo", "mtu": 65536, "shaped_bits": None})
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    if load > cpus:
        print(f"warning: this machine is busy (load {load:.1f} on {cpus} CPUs): ceilings measured now may be low, "
              "and util above 1 later; calibrate on a quiet machine", file=sys.stderr)
    streams = 0 if lo["shaped_bits"] else 2 * min(cpus, 4)
    # each step's weight: its rough seconds on a 2-core VM (the whole took 18 s at load 5.7, 2026-12-06), so that
    # a time left is told from the start
    steps = [(2.0, "shared_memory ceiling: single-thread copies, 64 KiB-64 MiB"),
             (0.5, "latency_us: 1-byte loopback TCP round trips"),
             (max(0.1, streams * BIN * BINS * 1.2), f"intra_node ceiling: loopback TCP, 1-{min(cpus, 4)} concurrent "
              "streams in processes and in threads" if streams else "intra_node ceiling: lo's tc rate (no "
              "measurement)"),
             *[(6.0, f"per_op_us.{b}: a 1-element all_reduce on 2 ranks of {b} (one commbench run)")
               for b in ("gloo", "mpi")]]
    print(f"topo --calibrate: measuring this machine's ceilings: {'; '.join(t for _, t in steps)}", file=sys.stderr)
    with Reporter("topo --calibrate", [w for w, _ in steps], expect_s=sum(w for w, _ in steps)) as shown:
        return _measure(found, nets, lo, cpus, lambda i: shown.step(i, steps[i][1]))


def _measure(found, nets, lo, cpus, step):
    step(0)
    shm, shm_size = copy_gbps()
    step(1)
    lat = round(latency_us(), 3)
    step(2)
    notes = [f"shared_memory: fastest single-thread copy {shm:.2f} GB/s (at {shm_size >> 10} KiB; sizes 64 KiB-64 "
             f"MiB, best of {2 * REPEATS}); its latency is left 0 (not measured)",
             f"latency_us: half the fastest 1-byte loopback TCP round trip, {lat:.1f} us"]
    if lo["shaped_bits"]:
        loop, loop_kind = _tc_payload(lo), "tc"
        notes.append(f"intra_node: lo is shaped by tc to {lo['shaped_bits'] / 1e6:g} Mbit/s: {loop:.4f} GB/s of TCP "
                     "payload")
    else:
        (loop, streams, how), loop_kind = loopback_gbps(), "calibrated"
        notes.append(f"intra_node: loopback TCP, the most 1-{min(cpus, 4)} concurrent streams carried together in "
                     f"any {BIN:g} s: {loop:.3f} GB/s ({streams} stream(s), ends in {how})")
    loop = round(loop, 6)
    per_op = {}
    for i, (backend, link_us) in enumerate((("gloo", lat), ("mpi", 0.0))):   # the tiers' latency: loopback, shm
        step(3 + i)
        took, why = per_op_us(backend)
        if took is None:
            notes.append(f"per_op_us.{backend}: not measured ({why}): the model's time on {backend} is n/a")
            continue
        per_op[backend] = round(max(0.0, took - 2 * link_us), 3)
        notes.append(f"per_op_us.{backend}: a 1-element all_reduce on 2 ranks took {took:.1f} us (mean of "
                     f"{OP_ITERS} calls, commbench run); less the 2 steps x {link_us:g} us the tiers count: "
                     f"{per_op[backend]:.1f} us of {topology.OWN_COST_BACKENDS[backend]}'s own per call")
    chosen = nets.get(found["link"]) if found["link"] else None
    if chosen and not chosen["loopback"] and chosen["shaped_bits"]:
        inter = {"nic": chosen["name"], "per_nic_gbps": round(chosen["shaped_bits"] / 8e9, 6), "latency_us": lat,
                 "rank_to_nic": "shared", "payload_fraction": round(detect._tcp_fraction(chosen["mtu"], True), 6),
                 "fabric": "network", "ceiling": "tc"}
        notes.append(f"inter_node: {chosen['name']} is shaped by tc to {chosen['shaped_bits'] / 1e6:g} Mbit/s")
    else:
        inter = {"nic": "lo (nodes emulated on this machine)", "per_nic_gbps": loop, "latency_us": lat,
                 "rank_to_nic": "shared", "fabric": "loopback", "ceiling": loop_kind}
        notes.append("inter_node: no tc-shaped inter-node link here: emulated nodes share the loopback (intra_node)")
    data = {"name": f"{hostname()}-calibrated", "gpus_per_node": 0, "gpu": "none (CPU transports: Gloo, MPI)",
            "intra_node": {"fabric": "loopback", "link": "lo", "per_gpu_gbps": loop, "latency_us": lat,
                           "ceiling": loop_kind},
            "inter_node": {"nics_per_node": 1, **inter},
            "shared_memory": {"per_rank_gbps": round(shm, 6), "latency_us": 0, "ceiling": "calibrated"},
            **({"per_op_us": per_op} if per_op else {})}
    topology.validate(data, "calibrated topology")      # what --topology will accept
    return {"data": data, "notes": notes}


def _tc_payload(net):
    return net["shaped_bits"] / 8e9 * detect._tcp_fraction(net["mtu"], True)


def file_text(found):
    """The topology file: how each rate was measured, in comments (each one line: a host name holding a newline
    cannot start a line of YAML), then the fields (yaml.safe_dump quotes what needs it)."""
    head = [f"# Calibrated by `commbench topo --calibrate` on {shown(hostname(), 100)} at {timestamp()} "
            f"(suite {shown(git_revision(), 60)}).",
            "# Every rate is a ceiling busbw cannot exceed (commbench/model/calibrate.py says why each is one):"]
    head += [f"#   {shown(n, 400)}" for n in found["notes"]]
    head.append("# Use: commbench run --topology THIS_FILE (util = busbw / these ceilings; MPI uses shared_memory).")
    return "\n".join(head) + "\n" + yaml.safe_dump(found["data"], sort_keys=False)
