"""What NCCL reports it ran, read from its INFO lines (NCCL_DEBUG=INFO): the `effective` block of a record.

Every pattern below is one of NCCL's own format strings (NVIDIA/nccl, tags v2.18.5-1 .. v2.30.7-1; the file each
comes from is named beside it). A line no pattern knows is ignored; a field no line shows is left out (the summary
and the applied rows then say `unknown`), never guessed. Any prefix is accepted: NCCL's `host:pid:tid [dev] `, an
mpirun tag `[1,0]<stdout>:`, an srun label `0: `, a `[rank]` or a timestamp: the message starts after `NCCL INFO `
(or `NCCL WARN `). A text with no `NCCL INFO` at all (an excerpt pasted without NCCL's prefix) is read line by line
as messages.

The per-collective choice (NCCL_DEBUG_SUBSYS=TUNING, rank 0 only) changed form, and the `NCCL version X.Y.Z+cudaA.B`
line (src/init.cc VERSION_STRING) says which form a log has:
- before 2.20 it is TRACE only (src/enqueue.cc v2.19.3-1 l.1202 is commented out): no choice is ever read;
- 2.20-2.22: `%ld Bytes -> Algo %d proto %d time %f` (enqueue.cc v2.20.5-1 l.1498, v2.21.5-1 l.1534, v2.22.3-1
  l.1613), numbers that index ncclAlgoStr {Tree, Ring, CollNetDirect, CollNetChain, NVLS, NVLSTree} and ncclProtoStr
  {LL, LL128, Simple} (src/init.cc l.40-41 of those tags);
- 2.23: `%s: %ld Bytes -> Algo %d proto %d time %f` (enqueue.cc v2.23.4-1 l.1855), ncclAlgoStr gained PAT
  (init.cc l.40);
- 2.24 on: `%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}` (enqueue.cc v2.24.3-1 l.678, v2.27.7-1
  l.745, v2.30.7-1 l.822), names from ncclAlgoToString/ncclProtoToString (src/collectives.cc: TREE, RING,
  COLLNET_DIRECT, COLLNET_CHAIN, NVLS, NVLS_TREE, PAT; LL, LL128, SIMPLE).
Names are given as NCCL_ALGO/NCCL_PROTO spell them (Tree, Ring, CollNetDirect, ..., Simple). A log without a
version line is read by the form of the line itself: each form belongs to one version range above.

A launch collects it (debug_env): NCCL_DEBUG=INFO, NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING,GRAPH,NET and NCCL_DEBUG_FILE=
<launch directory>/nccl.%h.%p (one file per rank, removed with the directory), each kept where the user set their
own. Rank 0 follows its node's files (Follower) and each record carries what they said so far.

Cost: Follower reads at most MAX_BYTES of each file (NCCL_DEBUG_FILE is per rank) and READ_TOTAL in all, import
MAX_BYTES of a log; lines
are cut at MAX_LINE characters.
"""
import bisect
import glob
import json
import os
import re

MAX_BYTES = 16 << 20        # a rank's NCCL log read at most (the rest is left: "evidence_cut")
READ_TOTAL = 64 << 20       # all ranks' logs together
MAX_LINE = 4096
MAX_SIZES = 4096            # distinct (collective, size) choices kept
EVIDENCE_CHARS = 200        # an evidence line kept in a record

ALGOS = ("Tree", "Ring", "CollNetDirect", "CollNetChain", "NVLS", "NVLSTree", "PAT")   # ncclAlgoStr, v2.23.4-1 on
PROTOS = ("LL", "LL128", "Simple")                                                   # ncclProtoStr
_BY_NAME = {a.upper().replace("_", ""): a for a in ALGOS + PROTOS}

INFO = re.compile(r"NCCL (?:INFO|WARN) ")
VERSION = re.compile(r"^NCCL version (\d+)\.(\d+)\.(\d+)\S*?\+cuda(\d+)\.(\d+)")                   # init.cc
NETWORK = re.compile(r"^Using network (\S+)")                                                      # init.cc
NET_PLUGIN = re.compile(r"^NET/Plugin: Loaded net plugin (.+?) \(v\d+\)")                         # net.cc, plugin/net
IB_NICS = re.compile(r"^NET/IB : Using((?: \[\d+\]\S+)+)")                                         # net_ib.cc
SOCKET_NICS = re.compile(r"^NET/Socket : Using((?: \[\d+\]\S+)+)")                                 # net_socket.cc
NIC_ITEM = re.compile(r"\[(\d+)\]([^:\s]+)(?::(\d+)/([\w/]+))?")
BOOTSTRAP = re.compile(r"^Bootstrap ?: Using (?:\[\d+\])?([^:\s]+):")                               # bootstrap.cc
# net.cc: "Channel %02d/%d : %d[%d] -> %d[%d] [send] via NET/%s/%d%s%s%s" (PXN: "/%d(%d)"; suffixes /GDRDMA, (PCI),
# /Shared); before 2.12 "Channel %02d : ..." or "Ring %02d : ..."
NET_CHANNEL = re.compile(r"\[(send|receive)\] via NET/([^/\s]+)/(\d+)(\(\d+\))?(/GDRDMA)?")
TRANSPORT = re.compile(r" via (P2P/(?:direct pointer|IPC|CUMEM|indirect)|P2P|SHM|NET|COLLNET)")    # p2p.cc, shm.cc
CHANNELS = re.compile(r"^(\d+) coll channels, (?:(\d+) collnet channels, )?(\d+) nvls channels, (\d+) p2p channels, "
                      r"(\d+) p2p channels per peer")                                              # init.cc
NVLS = re.compile(r"^NVLS multicast support is (not )?available on dev (\d+)")                     # nvls.cc
COLLNET_UP = re.compile(r"^rank \d+ Connected CollNet|^CollNet \d+/\d+ : \d+ \[(?:send|receive)\] via COLLNET/")
COLLNET_OFF = re.compile(r"^(Communicator has \d+ nodes which is less than CollNet node threshold \d+, disabling "
                         r"CollNet|Cannot initialize CollNet, using point-to-point network instead)")  # init, transport
MNNVL = re.compile(r"(?:^|nNodes \d+ localRanks \d+ localRank \d+ )MNNVL (\d+)")                  # init.cc, mnnvl.cc
RINGS = re.compile(r"^Connected all rings, use ring PXN (\d) GDR (\d)")                             # generic.cc
TUNER = re.compile(r"^TUNER/Plugin: Using tuner plugin (\S+)")                                     # tuner_v*.cc
TUNER_INTERNAL = re.compile(r"^TUNER/Plugin: .*Using internal tuner plugin")
ENV = re.compile(r"^(NCCL_\w+) set (?:by environment )?to (.*?)$")                                 # param.cc and others
ENV_PLUGIN = re.compile(r"^NET/Plugin: Plugin name set by env to (\S+)")                           # plugin/net.cc
TUNING_NAMED = re.compile(r"^(\w+):\s+(\d+) Bytes -> Algo (\w+) proto (\w+) channel\{Lo\.\.Hi\}=\{(\d+)\.\.(\d+)\}")
TUNING_FUNC = re.compile(r"^(\w+): (\d+) Bytes -> Algo (\d+) proto (\d+) time ")
TUNING_BARE = re.compile(r"^(\d+) Bytes -> Algo (\d+) proto (\d+) time ")


# every message read() knows starts with or holds one of these: any other message is left at one search
KNOWN = re.compile(r"NCCL version|Bytes -> Algo| via |^Using network|^NET/(?:Plugin: Loaded net|Plugin: Plugin name|"
                   r"IB : Using|Socket : Using)|^Bootstrap|coll channels|^NVLS multicast|CollNet|^Connected all rings|"
                   r"^TUNER/Plugin|^NCCL_\w+ set |MNNVL \d")


def messages(text):
    """NCCL's messages in text (each line's part after `NCCL INFO `/`NCCL WARN `), cut at MAX_LINE."""
    lines = text.splitlines()
    prefixed = "NCCL INFO " in text
    for line in lines:
        line = line[:MAX_LINE]
        if prefixed:
            m = INFO.search(line)
            if m:
                yield line[m.end():].strip()
        elif line.strip():
            yield line.strip()


def _version(v):
    return tuple(int(x) for x in v.split(".")) if v and v != "unknown" else None


def _tuning(msg, version):
    """(collective, size, algo, proto, channels or None) of a TUNING line in the form of NCCL `version`."""
    if version is None or version >= (2, 24):
        m = TUNING_NAMED.match(msg)
        if m:
            algo, proto = _BY_NAME.get(m[3].upper().replace("_", "")), _BY_NAME.get(m[4].upper())
            if algo and proto:
                return m[1], int(m[2]), algo, proto, [int(m[5]), int(m[6])]
    if version is None or version[:2] == (2, 23):
        m = TUNING_FUNC.match(msg)
        if m and int(m[3]) < len(ALGOS) and int(m[4]) < len(PROTOS):
            return m[1], int(m[2]), ALGOS[int(m[3])], PROTOS[int(m[4])], None
    if version is None or (2, 20) <= version < (2, 23):
        m = TUNING_BARE.match(msg)
        if m and int(m[2]) < 6 and int(m[3]) < len(PROTOS):        # no PAT before 2.23
            return None, int(m[1]), ALGOS[int(m[2])], PROTOS[int(m[3])], None
    return None


class _Reader:
    def __init__(self):
        self.eff, self.lines = {}, {}
        self.nvls, self.net, self.sends, self.channels = [], [], [], []
        self.transports, self.choices, self.env = {}, {}, {}
        self.version, self.collnet_channels = None, set()

    def note(self, field, msg):
        self.lines.setdefault(field, msg[:EVIDENCE_CHARS])

    def read(self, msg):
        if not KNOWN.search(msg):
            return
        eff = self.eff
        m = VERSION.match(msg)
        if m:
            if "version" not in eff:
                eff["version"], eff["cuda"] = f"{m[1]}.{m[2]}.{m[3]}", f"{m[4]}.{m[5]}"
                self.version = (int(m[1]), int(m[2]), int(m[3]))
                self.note("version", msg)
            return
        if "Bytes -> Algo" in msg:
            t = _tuning(msg, self.version)
            if t and (t[0], t[1]) not in self.choices and len(self.choices) < MAX_SIZES:
                self.choices[(t[0], t[1])] = t[2:]
                self.note("choices", msg)
            return
        if " via " in msg:
            t = TRANSPORT.search(msg)
            if t:
                kind = t[1]
                self.transports[kind] = self.transports.get(kind, 0) + 1
                self.note(f"via {kind}", msg)
            n = NET_CHANNEL.search(msg)
            if n:
                self.net.append((n[2], int(n[3]), bool(n[5]), bool(n[4])))
                if n[1] == "send":
                    self.sends.append(bool(n[5]))
                self.note("gdr" if n[5] else "no gdr", msg)
                if n[4]:
                    self.note("pxn", msg)
            if "COLLNET/" in msg:
                eff["collnet"] = "connected"
                self.note("collnet", msg)
                if msg.startswith("CollNet "):
                    self.collnet_channels.add(msg.split()[1].split("/")[0])
            return
        for pattern, field in ((NETWORK, "net"), (NET_PLUGIN, "net_plugin"), (TUNER, "tuner"),
                               (BOOTSTRAP, "bootstrap_if")):
            m = pattern.match(msg)
            if m:
                if field == "tuner" and eff.get("tuner") == "internal":
                    del eff["tuner"], self.lines["tuner"]     # a plugin found after 'internal' (2.27 tries twice)
                eff.setdefault(field, m[1])
                self.note(field, msg)
                return
        m = IB_NICS.match(msg) or SOCKET_NICS.match(msg)
        if m and "nics" not in eff:
            items = NIC_ITEM.findall(m[1])
            eff["nics"] = [f"{name}:{port}/{link}" if port else name for _, name, port, link in items]
            eff["nics_of"] = "IB" if m.re is IB_NICS else "Socket"
            self.note("nics", msg)
            return
        m = CHANNELS.match(msg)
        if m:
            self.channels.append((int(m[1]), int(m[3]), int(m[4]), int(m[5])))
            self.note("channels", msg)
            return
        m = NVLS.match(msg)
        if m:
            self.nvls.append(not m[1])
            self.note("nvls_multicast", msg)
            return
        if COLLNET_UP.match(msg):
            eff["collnet"] = "connected"
            self.note("collnet", msg)
            return
        m = COLLNET_OFF.match(msg)
        if m:
            if eff.get("collnet") != "connected":
                eff["collnet"] = f"disabled: {m[1]}"
                self.note("collnet", msg)
            return
        m = RINGS.match(msg)
        if m:
            eff.setdefault("pxn_ring", m[1] == "1")
            self.note("pxn_ring", msg)
            return
        if TUNER_INTERNAL.match(msg):
            eff.setdefault("tuner", "internal")
            self.note("tuner", msg)
            return
        m = ENV.match(msg) or ENV_PLUGIN.match(msg)
        if m:
            var, value = (m[1], m[2]) if m.re is ENV else ("NCCL_NET_PLUGIN", m[1])
            if re.fullmatch(r"-?\d+\.", value):
                value = value[:-1]                 # param.cc's integers end with "."
            self.env.setdefault(var, value.rstrip(".") if var == "NCCL_COLLNET_ENABLE" else value)
            self.note(f"env {var}", msg)
            return
        m = MNNVL.search(msg)
        if m:
            eff.setdefault("mnnvl", int(m[1]))
            self.note("mnnvl", msg)

    def result(self):
        eff = dict(self.eff)
        if self.channels:
            cols = list(zip(*self.channels))
            names = ("coll", "nvls", "p2p", "p2p_per_peer")
            eff["channels"] = {n: (min(c) if min(c) == max(c) else [min(c), max(c)]) for n, c in zip(names, cols)}
            if self.collnet_channels:     # "%d collnet channels" is comm->nChannels (init.cc 2.21-2.30): not CollNet's
                eff["channels"]["collnet"] = len(self.collnet_channels)
        if self.nvls:
            eff["nvls_multicast"] = True if all(self.nvls) else False if not any(self.nvls) else "some devices"
        if self.net:
            gdr = [g for *_, g, _ in self.net]
            eff["gdr"] = "all" if all(gdr) else "none" if not any(gdr) else "some"
            if self.sends:
                eff["gdr_send"] = "all" if all(self.sends) else "none" if not any(self.sends) else "some"
            eff.setdefault("net", self.net[0][0])      # the channel lines name the network too
            eff["net_devices"] = sorted({dev for _, dev, _, _ in self.net})
            nics = eff.get("nics") or []
            eff["nics_used"] = [nics[d] if d < len(nics) else f"#{d}" for d in eff["net_devices"]]
            eff["pxn"] = any(p for *_, p in self.net) or bool(eff.get("pxn_ring"))
        elif "pxn_ring" in eff:
            eff["pxn"] = eff["pxn_ring"]
        eff.pop("pxn_ring", None)
        if self.transports:
            eff["transports"] = self.transports
        if self.env:
            eff["env_read"] = self.env
        if self.choices:
            eff["choices"] = _ranges(self.choices)
        if eff:
            eff = {"transport": "nccl", "version": "unknown", **eff, "lines": self.lines}
        return eff


def _ranges(choices):
    """[{collective, size_bytes: [lo, hi], algo, proto, channels}] over sizes in order, a run per same choice."""
    out = []
    for (coll, size), (algo, proto, ch) in sorted(choices.items(), key=lambda kv: (kv[0][0] or "", kv[0][1])):
        last = out[-1] if out else None
        if last and last["collective"] == coll and (last["algo"], last["proto"], last.get("channels")) == (
                algo, proto, ch):
            last["size_bytes"][1] = size
            continue
        row = {"collective": coll, "size_bytes": [size, size], "algo": algo, "proto": proto}
        if ch is not None:
            row["channels"] = ch
        out.append(row)
    return out


def read_text(text):
    """The effective block of NCCL log text ({} when it holds no NCCL line this reader knows)."""
    r = _Reader()
    for msg in messages(text):
        r.read(msg)
    return r.result()


def _size(n):
    for unit, shift in (("G", 30), ("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def summary(eff):
    """One short line: 'NCCL 2.27.7, IB x8 GDRDMA all channels, NVLS on, AllReduce Ring/Simple from 64M'."""
    if not eff:
        return "NCCL evidence: none (no NCCL INFO line read)"
    parts = [f"NCCL {eff.get('version', 'unknown')}".replace("NCCL unknown", "NCCL version unknown")]
    if eff.get("net"):
        used = eff.get("nics_used") or eff.get("nics") or []
        net = f"{eff['net']} x{len(used)}" if used else eff["net"]
        if "gdr" in eff:
            net += f" GDRDMA {eff['gdr']} channels" if eff["gdr"] != "none" else " no GDRDMA"
        parts.append(net)
    ch = eff.get("channels") or {}
    if "nvls_multicast" in eff or "nvls" in ch:
        on = eff.get("nvls_multicast") is True and ch.get("nvls", 1) != 0
        parts.append("NVLS on" if on else "NVLS off")
    choices = eff.get("choices") or []
    if choices:
        top = max(choices, key=lambda c: c["size_bytes"][1])
        coll = f"{top['collective']} " if top["collective"] else ""
        parts.append(f"{coll}Algo {top['algo']}/{top['proto']} from {_size(top['size_bytes'][0])}")
    else:
        parts.append("algorithm unknown (no TUNING line)")
    return ", ".join(parts)


DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING,GRAPH,NET"}
LOG_NAME = "nccl.%h.%p"     # NCCL expands %h (host) and %p (pid): src/debug.cc
NEEDED_SUBSYS = ("INIT", "ENV", "TUNING", "NET")
MAX_FILES = 1024            # a node's rank logs followed at most


def debug_env(environ, logdir):
    """What an NCCL launch adds to its ranks' environment so that they write the evidence into logdir, one file
    per rank; a variable the user set (environ) is left as it is."""
    env = {k: v for k, v in DEBUG_ENV.items() if k not in environ}
    if "NCCL_DEBUG_FILE" not in environ:
        env["NCCL_DEBUG_FILE"] = os.path.join(str(logdir), LOG_NAME)
    return env


def partial(environ):
    """Why NCCL's output may hold less than the evidence needs, from the variables the ranks see (None: it holds it)."""
    level = environ.get("NCCL_DEBUG", "").upper()
    subsys = {s.strip().upper() for s in environ.get("NCCL_DEBUG_SUBSYS", "INIT,ENV").split(",")}
    if level not in ("INFO", "TRACE"):
        return f"NCCL_DEBUG={level or 'unset'}: NCCL printed no INFO line"
    if "ALL" not in subsys and not subsys.issuperset(NEEDED_SUBSYS):
        return f"evidence may be partial: NCCL_DEBUG_SUBSYS={environ.get('NCCL_DEBUG_SUBSYS')} lacks " \
               f"{','.join(s for s in NEEDED_SUBSYS if s not in subsys)}"
    return None


class Follower:
    """Rank 0's view of its node's NCCL logs, read on as they grow (NCCL line-buffers them: src/debug.cc)."""

    def __init__(self, environ):
        self.reader, self.offsets, self.left, self.cut = _Reader(), {}, READ_TOTAL, set()
        path = environ.get("NCCL_DEBUG_FILE")
        self.pattern = path and (path.replace("%h", "*").replace("%p", "*") if os.path.basename(path) == LOG_NAME
                                 else path.replace("%h", "*").replace("%p", str(os.getpid())))
        self.note = partial(environ) or (None if path else "NCCL_DEBUG_FILE unset: NCCL's lines went to the ranks' "
                                                             "output, not read")

    def effective(self):
        """What the logs said so far (a note where they may not say everything)."""
        for path in sorted(glob.glob(self.pattern))[:MAX_FILES] if self.pattern else []:
            at = self.offsets.get(path, 0)
            if at >= MAX_BYTES or self.left <= 0:
                continue
            try:
                with open(path, "rb") as f:
                    f.seek(at)
                    limit = min(MAX_BYTES - at, self.left)
                    data = f.read(limit)
                    size = os.fstat(f.fileno()).st_size
            except OSError:
                continue
            whole = data[:data.rfind(b"\n") + 1]         # a line being written is read next time
            if len(data) == limit and size > at + limit and (not whole or at + limit >= MAX_BYTES or
                                                             self.left <= limit):
                self.cut.add(path)                    # the cap reached: this file is read no further
                self.offsets[path], self.left = MAX_BYTES, self.left - len(whole)
            else:
                self.offsets[path], self.left = at + len(whole), self.left - len(whole)
            data = whole
            for msg in messages(data.decode("utf-8", "replace")):
                self.reader.read(msg)
        eff = self.reader.result()
        if eff and self.cut:
            eff["evidence_cut"] = f"{len(self.cut)} log file(s) read only in part (at most {MAX_BYTES >> 20} MiB " \
                                  f"each, {READ_TOTAL >> 20} MiB in all)"
        if self.note:
            eff = {**(eff or {"transport": "nccl"}), "evidence_note": self.note}
        return eff


COLLECTIVES = {"all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
               "broadcast": "Broadcast", "reduce": "Reduce"}     # ncclFuncToString's names (src/collectives.cc)


def for_record(eff, collective, size_bytes, world_size=1):
    """eff as a record keeps it: the TUNING choices of that collective and size only, no evidence lines. NCCL's
    size is count x type size of the call: per rank for AllGather (sendcount) and ReduceScatter (recvcount),
    where nccl-tests' size is the whole buffer (src/collectives.cc)."""
    if not eff:
        return eff
    name = COLLECTIVES.get(collective)
    if size_bytes is not None and name in ("AllGather", "ReduceScatter"):
        size_bytes //= max(world_size, 1)
    out = {k: v for k, v in eff.items() if k not in ("lines", "choices")}
    rows = [c for c in eff.get("choices") or () if c["collective"] in (name, None)
            and size_bytes is not None and c["size_bytes"][0] <= size_bytes <= c["size_bytes"][1]]
    if rows:
        out["choices"] = rows
    return out


def run_summary(effs):
    """summary() of a run's records' effective blocks (each holding its own size's choice): the last block, with
    the choices of all of them."""
    effs = [e for e in effs if e and e.get("transport") == "nccl"]
    if not effs:
        return None
    merged = {}
    for eff in effs:
        for c in eff.get("choices") or ():
            for size in c["size_bytes"]:
                merged[(c["collective"], size)] = (c["algo"], c["proto"], c.get("channels"))
    return summary({**effs[-1], "choices": _ranges(merged)}) + (f" ({effs[-1]['evidence_note']})"
                                                                 if effs[-1].get("evidence_note") else "")


HEADER = re.compile(r"# nThread \d+|# Collective test starting")    # where an nccl-tests run's output begins


def by_table(lines):
    """([(first line, effective)], lines read) of an nccl-tests log given as byte lines: one block per run (from its
    '# nThread' header to the next; what comes before the first header is the first run's) with that run's NCCL
    lines, read up to MAX_BYTES (a line cut there is not counted)."""
    out, reader, start, n, headed, size, prefixed = [], _Reader(), 1, 0, False, 0, None
    for raw in lines:
        size += len(raw)
        if size > MAX_BYTES or not raw.endswith(b"\n") and size == MAX_BYTES:
            break
        n += 1
        if b"# nThread" in raw or b"# Collective test starting" in raw:
            if headed:
                out.append((start, reader.result()))     # lines left out below: a record keeps none
                reader, start = _Reader(), n
            headed = True
        if b"CCL " in raw:
            line = raw[:MAX_LINE].decode("utf-8", "replace")
            m = INFO.search(line)
            if m:
                prefixed = True
                reader.read(line[m.end():].strip())
    out.append((start, reader.result()))
    return [(s, {k: v for k, v in e.items() if k != "lines"}) for s, e in out if e], n


def _tables(path):
    from benchcore.inputs import regular_file      # on first use: a rank never imports it
    try:
        regular_file(path)
        with open(path, "rb") as f:
            return by_table(f)
    except OSError:
        return [], 0


def _run_of(rec, tables, read_lines):
    """The index in tables of the run rec's table belongs to (None: its line is in no run read)."""
    line = rec.get("source_line") or 0
    at = bisect.bisect_right(tables, line, key=lambda t: t[0]) - 1     # the last run that starts at or before it
    return None if at < 0 or line > read_lines else at    # a row past what was read: not the last run's


def _attach_one(rec, tables, read_lines):
    """rec's effective block (None where its line is in no run read)."""
    at = _run_of(rec, tables, read_lines)
    return None if at is None else for_record(tables[at][1], rec.get("collective"), rec.get("size_bytes"),
                                              rec.get("world_size") or 1)


def attach(records):
    """records, those imported from an nccl-tests text log (source_format nccl-tests) given the effective block of
    the run their table belongs to (each file read up to MAX_BYTES); a record that has one keeps it."""
    tables = {}
    for rec in records:
        path = rec.get("source_file")
        if rec.get("effective") or rec.get("event") or rec.get("source_format") != "nccl-tests" or not path:
            continue
        if path not in tables:
            tables[path] = _tables(path)
        eff = _attach_one(rec, *tables[path])
        if eff:
            rec["effective"] = eff
    return records


def import_evidence(path, fmt):
    """For `import`: None where path (of format fmt) holds no NCCL line, else a function that gives each record
    read from it (a dict, or a table row's JSON line) the effective block of its run."""
    if fmt != "nccl-tests":
        return None
    tables, read_lines = _tables(path)
    if not tables:
        return None
    from benchcore.results.records import dumps
    shown = {}      # (run, collective, size, ranks): the field and its JSON text, made once

    def add(rec):
        line = json.loads(rec) if isinstance(rec, str) else rec
        if line.get("event") or line.get("effective"):
            return rec
        at = _run_of(line, tables, read_lines)
        if at is None:
            return rec
        key = (at, line.get("collective"), line.get("size_bytes"), line.get("world_size"))
        if key not in shown:
            if len(shown) > 4096:       # rows come in the file's order: the runs before are done
                shown.clear()
            eff = for_record(tables[at][1], key[1], key[2], key[3] or 1)
            shown[key] = (eff, dumps({"effective": eff})[1:-1])
        if not isinstance(rec, str):
            return {**rec, "effective": shown[key][0]}
        return f"{rec[:-1]}, {shown[key][1]}}}" if rec.endswith("}") else rec
    return add
