"""Gloo: the local address and interface of every connection a rank's process group opened, read from the rank's
own sockets: the TCP rows of /proc/self/net/tcp and tcp6 whose inode is one of the sockets in /proc/self/fd, opened
since just before init_process_group, less those to the rendezvous store (MASTER_ADDR:MASTER_PORT); each local address
named by the interface that holds it in the kernel's address list (`ip -j addr`). Nothing is guessed: a rank whose
connections cannot be read or whose address no interface holds says so, and GLOO_SOCKET_IFNAME is then `unknown`.
"""
import ipaddress
import json
import os
import socket
import time

from benchcore.processes import procs

APPLIED, NOT_APPLIED, UNKNOWN = "applied", "not applied", "unknown"   # applied.py's statuses (it imports this)
ESTABLISHED = "01"   # the kernel's TCP state code in /proc/net/tcp (include/net/tcp_states.h: TCP_ESTABLISHED)


def socket_inodes():
    """The inodes of this process's open sockets (/proc/self/fd links 'socket:[N]')."""
    out = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:   # closed meanwhile (the listing's own fd among them)
            continue
        if link.startswith("socket:["):
            out.add(link[8:-1])
    return out


def _endpoint(text):
    """'0100007F:AC41' or a 32-digit IPv6 form -> ('127.0.0.1', 44097); an IPv4-mapped IPv6 address as IPv4."""
    addr, port = text.split(":")
    raw = bytes.fromhex(addr)
    raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))   # each 32-bit word in host (little) order
    ip = ipaddress.ip_address(raw)
    if ip.version == 6 and ip.ipv4_mapped:
        ip = ip.ipv4_mapped
    return str(ip), int(port, 16)


def connections(inodes, read=None):
    """[(local (addr, port), remote (addr, port))] of the established TCP sockets among inodes; read: a list the
    bytes read are appended to."""
    out = []
    for table in ("tcp", "tcp6"):
        try:
            with open(f"/proc/self/net/{table}") as f:
                text = f.read()
        except OSError:   # no IPv6 in this kernel
            continue
        if read is not None:
            read.append(len(text))
        for row in text.splitlines()[1:]:
            f = row.split()
            if len(f) > 9 and f[3] == ESTABLISHED and f[9] in inodes:
                out.append((_endpoint(f[1]), _endpoint(f[2])))
    return out


def interface_of(read=None):
    """{address: interface} from the kernel's address list (`ip -j addr`); None where it cannot be read; read: a
    list the bytes read are appended to."""
    try:
        done = procs.run(["ip", "-j", "addr", "show"], timeout=10)
        links = json.loads(done.stdout) if not done.returncode else None
        if read is not None:
            read.append(len(done.stdout))
    except (OSError, ValueError):
        links = None
    if not isinstance(links, list):
        return None
    return {a["local"]: link["ifname"] for link in links for a in link.get("addr_info", []) if "local" in a}


def store_endpoints():
    """The rendezvous store's (address, port) pairs this rank may be connected to (its own and liveness's
    clients), from MASTER_ADDR and MASTER_PORT."""
    host, port = os.environ.get("MASTER_ADDR"), int(os.environ.get("MASTER_PORT", "0") or 0)
    if not host or not port:
        return set()
    try:
        addrs = {info[4][0] for info in socket.getaddrinfo(host, port, proto=socket.IPPROTO_TCP)}
    except OSError:
        addrs = set()
    return {(str(ipaddress.ip_address(a.split("%")[0])), port) for a in addrs | {host}
            if _is_ip(a.split("%")[0])}


def _is_ip(text):
    try:
        ipaddress.ip_address(text)
        return True
    except ValueError:
        return False


def rank_evidence(before):
    """This rank's Gloo connections: the sockets opened since `before` (socket_inodes() just before
    init_process_group), less those to the store: {"connections": [[local addr, port, interface or None, remote
    addr, port]], "interfaces_read": bool, "read_bytes": what it read of /proc and ip}."""
    store, read = store_endpoints(), []
    found = [(loc, rem) for loc, rem in connections(socket_inodes() - before, read) if rem not in store]
    names = interface_of(read) if found else {}
    return {"connections": [[loc[0], loc[1], (names or {}).get(loc[0]), rem[0], rem[1]] for loc, rem in found],
            "interfaces_read": names is not None, "read_bytes": sum(read)}


def effective(per_rank):
    """The record's `effective` block from every rank's rank_evidence (index = rank)."""
    def uniq(values):
        return sorted({v for v in values if v is not None})
    conns = {str(r): ev["connections"] for r, ev in enumerate(per_rank)}
    return {"transport": "gloo",
            "interfaces": {r: ",".join(uniq(c[2] for c in cs)) or None for r, cs in conns.items()},
            "local_addrs": {r: uniq(c[0] for c in cs) for r, cs in conns.items()},
            "peer_addrs": {r: uniq(c[3] for c in cs) for r, cs in conns.items()},
            "connections": {r: len(cs) for r, cs in conns.items()},
            "interfaces_read": all(ev["interfaces_read"] for ev in per_rank),
            "read_bytes": {str(r): ev.get("read_bytes", 0) for r, ev in enumerate(per_rank)}}


def collect(comm, before):
    """Every rank's evidence gathered (after the process group's first collective), as `effective`; collect_s: the
    slowest rank's seconds reading and gathering it."""
    t0 = time.perf_counter()
    found = comm.gather_object(rank_evidence(before))
    return {**effective(found), "collect_s": round(max(comm.gather_object(time.perf_counter() - t0)), 6)}


def judge_ifname(eff, value):
    """GLOO_SOCKET_IFNAME (one interface or a comma list): applied when every rank's Gloo connections left from an
    address of a named interface."""
    if eff.get("transport") != "gloo":
        return UNKNOWN, f"not a Gloo run ({eff.get('transport')}): Gloo's sockets were not read"
    wanted = {v.strip() for v in value.split(",") if v.strip()}
    conns, names = eff.get("connections") or {}, eff.get("interfaces") or {}
    if not any(conns.values()):
        return UNKNOWN, "no rank opened a Gloo connection (one rank, or none was seen)"
    if not eff.get("interfaces_read"):
        return UNKNOWN, "the kernel's address list (ip -j addr) could not be read on every rank"

    def where(r):
        return f"rank {r} from {','.join(eff['local_addrs'][r])} ({names[r] or 'no interface holds it'})"
    off = [r for r in conns if conns[r] and not (names[r] and set(names[r].split(",")) <= wanted)]
    if off:
        return NOT_APPLIED, (f"Gloo connected {'; '.join(where(r) for r in off[:3])}, not from {value}"
                             + (f" ({len(off) - 3} more ranks)" if len(off) > 3 else ""))
    shown = [r for r in conns if conns[r]]
    return APPLIED, (f"every rank's Gloo connections left from {value}: {'; '.join(where(r) for r in shown[:3])}"
                     + (f" and {len(shown) - 3} more ranks" if len(shown) > 3 else ""))
