"""Two or more real "nodes" on one machine: network namespaces with a private subnet and shaped links.

Standard library only (scripts/netns-cluster runs it without the virtualenv). As root:

  up --nodes N [--rate 1gbit]   namespaces PREFIX-node0..N-1, each with loopback and eth0 at
                                10.213.0.(i+1)/24; N = 2: one veth pair, N > 2: a bridge in its own
                                namespace PREFIX-sw. --rate shapes every node's link with tc tbf in
                                both directions. Idempotent: rerun to reshape; another N rebuilds.
  down                          removes the namespaces (ending processes still inside) and their files.
  exec NODE -- CMD...           runs CMD in node NODE with its own host name PREFIX-nodeNODE.
  status                        what exists now.

Nothing outside the namespaces changes except /etc/netns/PREFIX-node*/hosts (a hosts file that
`ip netns exec` mounts over /etc/hosts inside the namespace, so node names resolve there).
"""
import argparse
import ipaddress
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_PREFIX = os.environ.get("NETNS_CLUSTER_PREFIX", "cb")
DEFAULT_SUBNET = "10.213.0.0/24"
IFNAME = "eth0"
ETC = Path("/etc/netns")
MARK = "# written by commbench netns-cluster"
UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}


class ClusterError(Exception):
    pass


def parse_rate(text):
    """tc-style rate ('500mbit', '1gbit', '2.5gbit', '1000000' bit/s) -> bits per second."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(bit|bps)?\s*", str(text).lower())
    if not m or float(m.group(1)) <= 0:
        raise ClusterError(f"--rate {text!r} is not a rate like 500mbit, 1gbit, 2gbit")
    bits = float(m.group(1)) * UNITS[m.group(2)] * (8 if m.group(3) == "bps" else 1)
    return int(bits)


def format_rate(bits):
    for unit, scale in (("gbit", 1e9), ("mbit", 1e6), ("kbit", 1e3)):
        if bits >= scale and bits % scale == 0:
            return f"{bits // int(scale)}{unit}"
    return f"{bits}bit"


def burst_bytes(bits):
    """tbf bucket: 2 ms at the rate, at least 32 KiB.

    Measured at 1gbit with one 256 MiB TCP stream: a 1 ms bucket loses 2-3 % to timer wake-up
    latency (0.93-0.94 of the rate); 2 ms reaches the 1448/1514 = 0.956 payload ceiling (0.955);
    4 ms and more overshoot it (a full bucket is a head start at veth speed after every idle gap:
    4 ms put a 64 MiB all_reduce at exactly 1.000 of the ceiling).
    """
    return max(32 * 1024, int(bits / 8 * 0.002))


def ns_name(prefix, i):
    return f"{prefix}-node{i}"


def switch_name(prefix):
    return f"{prefix}-sw"


def node_addr(i, subnet=DEFAULT_SUBNET):
    return str(ipaddress.ip_network(subnet)[i + 1])


def run(argv, check=True, timeout=30):
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    if check and proc.returncode:
        raise ClusterError(f"{' '.join(argv)}: {proc.stderr.strip() or proc.stdout.strip()}")
    return proc


def existing(prefix):
    """(node namespaces sorted by index, switch present) for this prefix."""
    names = run(["ip", "netns", "list"]).stdout.split()
    nodes = sorted((n for n in names if re.fullmatch(re.escape(prefix) + r"-node\d+", n)),
                   key=lambda n: int(n.rsplit("node", 1)[1]))
    return nodes, switch_name(prefix) in names


def has_link(ns, dev):
    return run(["ip", "-n", ns, "link", "show", "dev", dev], check=False).returncode == 0


def shape(ns, dev, bits):
    if bits:
        run(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{bits}bit",
             "burst", str(burst_bytes(bits)), "latency", "50ms"])
    else:
        run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], check=False)  # none there: fine


def write_hosts(prefix, nodes, subnet):
    lines = [MARK, "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost"]
    lines += [f"{node_addr(i, subnet)}\t{ns_name(prefix, i)}" for i in range(nodes)]
    for i in range(nodes):
        d = ETC / ns_name(prefix, i)
        hosts = d / "hosts"
        if hosts.exists() and MARK not in hosts.read_text():
            raise ClusterError(f"{hosts} exists and was not written by netns-cluster; not touching it")
        d.mkdir(parents=True, exist_ok=True)
        hosts.write_text("\n".join(lines) + "\n")


def up(nodes, rate=None, prefix=DEFAULT_PREFIX, subnet=DEFAULT_SUBNET):
    """Bring the cluster to the requested state; returns the seconds it took."""
    t0 = time.monotonic()
    if nodes < 2:
        raise ClusterError(f"--nodes must be at least 2, got {nodes}")
    if nodes > ipaddress.ip_network(subnet).num_addresses - 2:
        raise ClusterError(f"subnet {subnet} has no room for {nodes} nodes")
    bits = parse_rate(rate) if rate else None
    have, has_switch = existing(prefix)
    if have and (have != [ns_name(prefix, i) for i in range(nodes)] or has_switch != (nodes > 2)):
        down(prefix)  # another shape of cluster: rebuild
    have = set(existing(prefix)[0])
    try:
        for i in range(nodes):
            if ns_name(prefix, i) not in have:
                run(["ip", "netns", "add", ns_name(prefix, i)])
        if nodes > 2 and not existing(prefix)[1]:
            run(["ip", "netns", "add", switch_name(prefix)])
        plen = ipaddress.ip_network(subnet).prefixlen
        if nodes == 2:
            a, b = ns_name(prefix, 0), ns_name(prefix, 1)
            if not (has_link(a, IFNAME) and has_link(b, IFNAME)):
                for ns in (a, b):
                    run(["ip", "-n", ns, "link", "del", IFNAME], check=False)
                run(["ip", "link", "add", "name", IFNAME, "netns", a, "type", "veth",
                     "peer", "name", IFNAME, "netns", b])
        else:
            sw = switch_name(prefix)
            run(["ip", "-n", sw, "link", "set", "lo", "up"])
            if not has_link(sw, "br0"):
                run(["ip", "-n", sw, "link", "add", "br0", "type", "bridge"])
            run(["ip", "-n", sw, "link", "set", "br0", "up"])
            for i in range(nodes):
                ns, port = ns_name(prefix, i), f"port{i}"
                if not (has_link(ns, IFNAME) and has_link(sw, port)):
                    run(["ip", "-n", ns, "link", "del", IFNAME], check=False)
                    run(["ip", "-n", sw, "link", "del", port], check=False)
                    run(["ip", "link", "add", "name", IFNAME, "netns", ns, "type", "veth",
                         "peer", "name", port, "netns", sw])
                run(["ip", "-n", sw, "link", "set", port, "master", "br0", "up"])
                shape(sw, port, bits)  # the switch port's egress is the node's download
        for i in range(nodes):
            ns = ns_name(prefix, i)
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            run(["ip", "-n", ns, "addr", "replace", f"{node_addr(i, subnet)}/{plen}", "dev", IFNAME])
            run(["ip", "-n", ns, "link", "set", IFNAME, "up"])
            shape(ns, IFNAME, bits)
        write_hosts(prefix, nodes, subnet)
    except (ClusterError, OSError, subprocess.TimeoutExpired):
        down(prefix)  # never leave half a cluster behind
        raise
    return time.monotonic() - t0


def ns_pids(ns):
    out = run(["ip", "netns", "pids", ns], check=False).stdout.split()
    return [int(p) for p in out if p.isdigit() and int(p) != os.getpid()]


def end_processes(namespaces, grace=3.0):
    """SIGTERM (and SIGCONT, so stopped ones see it) every process inside, SIGKILL what is left."""
    pids = [p for ns in namespaces for p in ns_pids(ns)]
    for sig in (signal.SIGTERM, signal.SIGCONT):
        for pid in pids:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(ns_pids(ns) for ns in namespaces):
        time.sleep(0.1)
    for ns in namespaces:
        for pid in ns_pids(ns):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return len(pids)


def down(prefix=DEFAULT_PREFIX):
    """Remove every namespace of this prefix and its hosts files; returns (seconds, processes ended)."""
    t0 = time.monotonic()
    nodes, has_switch = existing(prefix)
    namespaces = nodes + ([switch_name(prefix)] if has_switch else [])
    ended = end_processes(namespaces) if namespaces else 0
    for ns in namespaces:
        run(["ip", "netns", "del", ns], check=False)
    for d in ETC.glob(f"{prefix}-node*") if ETC.is_dir() else []:
        hosts = d / "hosts"
        if re.fullmatch(re.escape(prefix) + r"-node\d+", d.name) and hosts.exists() and MARK in hosts.read_text():
            hosts.unlink()
            try:
                d.rmdir()
            except OSError:
                pass
    left = [n for n in existing(prefix)[0]] + ([switch_name(prefix)] if existing(prefix)[1] else [])
    if left:
        raise ClusterError(f"could not remove {', '.join(left)}")
    return time.monotonic() - t0, ended


def reap(stem):
    """Remove clusters named STEM<pid> whose process is gone (a test or selftest that was killed)."""
    names = run(["ip", "netns", "list"]).stdout.split()
    pids = {m.group(1) for n in names for m in [re.fullmatch(re.escape(stem) + r"(\d+)-(?:node\d+|sw)", n)] if m}
    for pid in pids:
        if not Path(f"/proc/{pid}").exists():
            down(f"{stem}{pid}")


def exec_argv(node, cmd, prefix=DEFAULT_PREFIX):
    """argv running cmd inside node `node` with host name PREFIX-nodeNODE (own UTS namespace)."""
    ns = ns_name(prefix, node)
    return ["ip", "netns", "exec", ns, "unshare", "--uts", "--", "sh", "-c",
            'hostname "$0" && exec "$@"', ns, *cmd]


def status(prefix=DEFAULT_PREFIX):
    nodes, has_switch = existing(prefix)
    if not nodes and not has_switch:
        return f"no cluster with prefix {prefix!r}"
    lines = []
    for ns in nodes:
        addr = run(["ip", "-n", ns, "-4", "-o", "addr", "show", "dev", IFNAME], check=False).stdout.split()
        state = run(["ip", "-n", ns, "-o", "link", "show", "dev", IFNAME], check=False).stdout
        qdisc = run(["tc", "-n", ns, "qdisc", "show", "dev", IFNAME], check=False).stdout
        rate = re.search(r"tbf .*?rate (\S+)", qdisc)
        lines.append(f"{ns}: {IFNAME} {addr[3] if len(addr) > 3 else '-'} "
                     f"{'UP' if 'state UP' in state or ',UP' in state else 'DOWN'} "
                     f"rate {rate.group(1) if rate else 'unshaped'}, {len(ns_pids(ns))} processes")
    if has_switch:
        lines.append(f"{switch_name(prefix)}: bridge br0 joining {len(nodes)} ports")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(prog="netns-cluster", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--prefix", default=DEFAULT_PREFIX,
                        help="namespace name prefix (default %(default)s; env NETNS_CLUSTER_PREFIX)")
    sub = parser.add_subparsers(dest="cmd", required=True)
    p_up = sub.add_parser("up", parents=[common], help="create or reshape the cluster")
    p_up.add_argument("--nodes", type=int, default=2)
    p_up.add_argument("--rate", default=None, help="tbf rate of every node's link, e.g. 500mbit, 1gbit")
    p_up.add_argument("--subnet", default=DEFAULT_SUBNET)
    sub.add_parser("down", parents=[common], help="remove the cluster")
    sub.add_parser("status", parents=[common], help="show the cluster")
    p_exec = sub.add_parser("exec", parents=[common], help="run a command on a node: exec NODE -- CMD...")
    p_exec.add_argument("node", type=int)
    p_exec.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    try:
        if os.geteuid() != 0:
            raise ClusterError("netns-cluster needs root (ip netns, tc)")
        if args.cmd == "up":
            took = up(args.nodes, args.rate, args.prefix, args.subnet)
            shaped = f", links shaped to {format_rate(parse_rate(args.rate))}" if args.rate else ""
            print(f"netns-cluster: {args.nodes} nodes {ns_name(args.prefix, 0)}..{args.nodes - 1} "
                  f"on {args.subnet}{shaped} (up in {took:.2f} s)")
        elif args.cmd == "down":
            took, ended = down(args.prefix)
            print(f"netns-cluster: removed prefix {args.prefix!r}"
                  f"{f', ended {ended} processes' if ended else ''} (down in {took:.2f} s)")
        elif args.cmd == "status":
            print(status(args.prefix))
        else:
            cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
            if not cmd:
                raise ClusterError("exec needs a command: exec NODE -- CMD...")
            if ns_name(args.prefix, args.node) not in existing(args.prefix)[0]:
                raise ClusterError(f"no node {args.node} (run: netns-cluster up)")
            argv = exec_argv(args.node, cmd, args.prefix)
            os.execvp(argv[0], argv)
    except (ClusterError, OSError, subprocess.TimeoutExpired) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
