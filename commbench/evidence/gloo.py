"""Gloo: the local address and interface of every connection a rank's process group opened, read from the rank's
own sockets: those in /proc/self/fd opened since just before init_process_group, each asked of the kernel
(getsockname, getpeername), less those to the rendezvous store (MASTER_ADDR:MASTER_PORT); each local address named by
the interface that holds it in the kernel's address lists (SIOCGIFADDR, /proc/self/net/if_inet6, else `ip -j addr`). Nothing is guessed: a rank whose
connections cannot be read or whose address no interface holds says so, and GLOO_SOCKET_IFNAME is then `unknown`.
"""
import ipaddress
import json
import os
import socket
import time

from benchcore.processes import procs
from benchcore.processes.route import interface_address

APPLIED, NOT_APPLIED, UNKNOWN = "applied", "not applied", "unknown"   # applied.py's statuses (it imports this)


def own_sockets():
    """{inode: fd} of this process's open sockets (/proc/self/fd links 'socket:[N]')."""
    out = {}
    for fd in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:   # closed meanwhile (the listing's own fd among them)
            continue
        if link.startswith("socket:["):
            out[link[8:-1]] = int(fd)
    return out


def socket_inodes():
    """The inodes of this process's open sockets: a snapshot to tell the sockets opened after it."""
    return set(own_sockets())


def _plain(addr):
    """An address as text; an IPv4-mapped IPv6 address as IPv4, a scope id dropped."""
    ip = ipaddress.ip_address(addr.split("%")[0])
    return str(ip.ipv4_mapped if ip.version == 6 and ip.ipv4_mapped else ip)


def connections(fds):
    """[(local (addr, port), remote (addr, port))] of the connected TCP sockets among fds, asked of the kernel on a
    duplicate of each (getsockname, getpeername); a listener or a socket closed meanwhile is skipped."""
    out = []
    for fd in fds:
        try:
            dup = os.dup(fd)
        except OSError:
            continue
        try:
            with socket.socket(fileno=dup) as s:
                if s.type != socket.SOCK_STREAM or s.family not in (socket.AF_INET, socket.AF_INET6):
                    continue
                local, remote = s.getsockname(), s.getpeername()
        except OSError:   # not connected (a listener), or gone
            continue
        out.append(((_plain(local[0]), local[1]), (_plain(remote[0]), remote[1])))
    return out


def interface_of(addrs, read=None):
    """{address: interface} for addrs from the kernel: each interface's IPv4 address (SIOCGIFADDR) and the IPv6 list
    (/proc/self/net/if_inet6); where one is not among them (a secondary IPv4 address), the whole address list
    (`ip -j addr`); None where that cannot be read. read: a list the bytes read are appended to."""
    names = {}
    for _, name in socket.if_nameindex():
        addr = interface_address(name)
        if addr:
            names[addr] = name
    try:
        with open("/proc/self/net/if_inet6") as f:
            text = f.read()
    except OSError:   # no IPv6 in this kernel
        text = ""
    if read is not None:
        read.append(len(text))
    for row in text.splitlines():
        f = row.split()
        if len(f) == 6:
            names[str(ipaddress.ip_address(bytes.fromhex(f[0])))] = f[5]
    if all(a in names for a in addrs):
        return names
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
    return {(_plain(a), port) for a in addrs | {host} if _is_ip(a.split("%")[0])}


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
    found = [(loc, rem) for loc, rem in connections(fd for ino, fd in own_sockets().items() if ino not in before)
             if rem not in store]
    names = interface_of({loc[0] for loc, _ in found}, read) if found else {}
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
