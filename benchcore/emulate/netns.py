"""Two or more real "nodes" on one machine: network namespaces with a private subnet and shaped links.

Standard library only (scripts/netns-cluster runs it without the virtualenv). As root:

  up --nodes N [--rate 1gbit]   namespaces PREFIX-node0..N-1, each with loopback and eth0 at
                                10.213.0.(i+1)/24; N = 2: one veth pair, N > 2: a bridge in its own
                                namespace PREFIX-sw. --rate shapes every node's link with tc tbf in
                                both directions. Idempotent: rerun to reshape; another N rebuilds.
  down                          removes the namespaces (ending processes still inside) and their files.
  exec NODE -- CMD...           runs CMD in node NODE with its own host name PREFIX-nodeNODE.
  status                        what exists now (exit 0 running, 1 partial, 3 stopped).

Nothing outside the namespaces changes except /etc/netns/PREFIX-node*/hosts (a hosts file that
`ip netns exec` mounts over /etc/hosts inside the namespace, so node names resolve there) and, while a
cluster is up, a blackhole route for its subnet in the host namespace: the host has no route to the private
subnet, so a client run there by mistake would send its packets to the default gateway, off this machine;
with the route it gets "network is unreachable" instead.
"""
import argparse
import ipaddress
import os
import re
import signal
import time
import zlib
from pathlib import Path

from benchcore.emulate.skeleton import EXIT, Cli, Fail, Script, need_root
from benchcore.files import replace_text
from benchcore.processes import procs

DEFAULT_PREFIX = os.environ.get("NETNS_CLUSTER_PREFIX", "cb")
DEFAULT_SUBNET = "10.213.0.0/24"
IFNAME = "eth0"
ETC = Path("/etc/netns")
MARK = "# written by commbench netns-cluster"
UNITS = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "t": 1e12}
NETNS = Script("netns-cluster", {"ip": "iproute2", "tc": "iproute2", "unshare": "util-linux"})
run = NETNS.run
ClusterError = Fail  # the name commbench.commands.selftest.link catches


def parse_rate(text):
    """tc-style rate ('500mbit', '1gbit', '2.5gbit', '1000000' bit/s) -> bits per second."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(bit|bps)?\s*", str(text).lower())
    if not m or float(m.group(1)) <= 0:
        raise Fail(f"--rate {text!r} is not a rate like 500mbit, 1gbit, 2gbit")
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


PREFIX = re.compile(r"[a-z][a-z0-9-]{0,11}")   # a namespace, interface and host name part, whole


def checked_prefix(prefix):
    """prefix when it is PREFIX (a name `down` finds again: 'ab cd' came up and was never taken down), else Fail."""
    if not isinstance(prefix, str) or not PREFIX.fullmatch(prefix):
        raise Fail(f"--prefix {prefix!r}: a lower-case letter, then up to 11 lower-case letters, digits or '-'")
    return prefix


def ns_name(prefix, i):
    return f"{prefix}-node{i}"


def switch_name(prefix):
    return f"{prefix}-sw"


def node_addr(i, subnet=DEFAULT_SUBNET):
    return str(ipaddress.ip_network(subnet)[i + 1])


def existing(prefix):
    """(node namespaces sorted by index, switch present) for this prefix."""
    names = run(["ip", "netns", "list"]).stdout.split()
    nodes = sorted((n for n in names if re.fullmatch(re.escape(prefix) + r"-node\d+", n)),
                   key=lambda n: int(n.rsplit("node", 1)[1]))
    return nodes, switch_name(prefix) in names


def has_link(ns, dev):
    return run(["ip", "-n", ns, "link", "show", "dev", dev], check=False).returncode == 0


LO_BURST = 128 * 1024  # loopback sends 64 KiB segments (MTU 65536): a bucket smaller than two would stall


def shape(ns, dev, bits, burst=None):
    """tbf at bits/s on dev (none: unshaped) with a bucket of burst bytes (default: burst_bytes)."""
    if bits:
        run(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "tbf", "rate", f"{bits}bit",
             "burst", str(burst or burst_bytes(bits)), "latency", "50ms"])
    else:
        run(["tc", "-n", ns, "qdisc", "del", "dev", dev, "root"], check=False)  # none there: fine


def shape_toward(ns, dev, bits, addr, slow_bits):
    """htb on dev: packets to addr at slow_bits/s, all others at bits/s (one slow pair of nodes when both ends
    do it toward each other; shape() puts the plain tbf back)."""
    run(["tc", "-n", ns, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "10"])
    for cls, rate in (("1:10", bits), ("1:20", slow_bits)):
        burst = str(burst_bytes(rate))
        run(["tc", "-n", ns, "class", "replace", "dev", dev, "parent", "1:", "classid", cls, "htb", "rate",
             f"{rate}bit", "burst", burst, "cburst", burst])
    run(["tc", "-n", ns, "filter", "replace", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
         "match", "ip", "dst", f"{addr}/32", "flowid", "1:20"])


def write_hosts(prefix, nodes, subnet):
    lines = [MARK, "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost"]
    lines += [f"{node_addr(i, subnet)}\t{ns_name(prefix, i)}" for i in range(nodes)]
    for i in range(nodes):
        d = ETC / ns_name(prefix, i)
        hosts = d / "hosts"
        if hosts.exists() and MARK not in hosts.read_text():
            raise Fail(f"{hosts} exists and was not written by netns-cluster; not touching it")
        d.mkdir(parents=True, exist_ok=True)
        replace_text(hosts, "\n".join(lines) + "\n")


def up(nodes, rate=None, prefix=DEFAULT_PREFIX, subnet=DEFAULT_SUBNET, lo_rate=None, burst=None):
    """Bring the cluster to the requested state; returns the seconds it took. lo_rate also shapes each
    node's loopback (its intra-node link: one queue that both directions of every local pair share); burst
    sets the links' tbf bucket in bytes (default: burst_bytes)."""
    t0 = time.monotonic()
    if nodes < 2:
        raise Fail(f"--nodes must be at least 2, got {nodes}")
    if nodes > ipaddress.ip_network(subnet).num_addresses - 2:
        raise Fail(f"subnet {subnet} has no room for {nodes} nodes")
    bits = parse_rate(rate) if rate else None
    have, has_switch = existing(checked_prefix(prefix))
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
                shape(sw, port, bits, burst)  # the switch port's egress is the node's download
        for i in range(nodes):
            ns = ns_name(prefix, i)
            run(["ip", "-n", ns, "link", "set", "lo", "up"])
            lo_bits = parse_rate(lo_rate) if lo_rate else None
            shape(ns, "lo", lo_bits, lo_bits and max(LO_BURST, burst_bytes(lo_bits)))
            run(["ip", "-n", ns, "addr", "replace", f"{node_addr(i, subnet)}/{plen}", "dev", IFNAME])
            run(["ip", "-n", ns, "link", "set", IFNAME, "up"])
            shape(ns, IFNAME, bits, burst)
        write_hosts(prefix, nodes, subnet)
        hold_subnet(subnet, prefix)
        wait_links_up([ns_name(prefix, i) for i in range(nodes)])
    except (Fail, OSError):
        down(prefix)  # never leave half a cluster behind
        raise
    return time.monotonic() - t0


def wait_links_up(namespaces, timeout=10.0):
    """Return once every node's link is up: the kernel reports a veth's carrier a moment after `link set up`
    (its link watch runs deferred), and a node asked about its link before then sees none."""
    deadline = time.monotonic() + timeout
    while True:
        down_ns = [ns for ns in namespaces
                   if "state UP" not in run(["ip", "-n", ns, "-o", "link", "show", "dev", IFNAME], check=False).stdout]
        if not down_ns:
            return
        if time.monotonic() > deadline:
            raise Fail(f"{IFNAME} of {', '.join(down_ns)} still not up {timeout:g} s after it was set up")
        time.sleep(0.02)


def route_metric(prefix):
    """The metric of this cluster's blackhole route: clusters sharing a subnet each hold their own route (the same
    destination, another metric), so one going down leaves the others' in place."""
    return 1000 + zlib.crc32(prefix.encode()) % 1_000_000


def hold_subnet(subnet, prefix):
    """This cluster's blackhole route for subnet in the host namespace; refused where the host routes the subnet
    itself (a real network, which the namespaces' subnet would shadow)."""
    have = run(["ip", "route", "show", "exact", subnet], check=False).stdout.splitlines()
    real = [ln for ln in have if not ln.startswith("blackhole")]
    if real:
        raise Fail(f"subnet {subnet} is routed on this host ({real[0].strip()}): choose another --subnet")
    if f"blackhole {subnet} metric {route_metric(prefix)}" not in [ln.strip() for ln in have]:
        run(["ip", "route", "add", "blackhole", subnet, "metric", route_metric(prefix)])


def release_subnet(prefix):
    """Remove this cluster's blackhole route (whichever subnet it was for)."""
    for line in run(["ip", "route", "show", "type", "blackhole"], check=False).stdout.splitlines():
        words = line.split()
        if words[-2:] == ["metric", str(route_metric(prefix))]:
            run(["ip", "route", "del", *words], check=False)


def ns_pids(ns):
    out = run(["ip", "netns", "pids", ns], check=False).stdout.split()
    return [int(p) for p in out if p.isdigit() and int(p) != os.getpid()]


def end_processes(namespaces, grace=3.0):
    """SIGTERM (and SIGCONT, so stopped ones see it) every process inside, SIGKILL what is left."""
    pids = [p for ns in namespaces for p in ns_pids(ns)]
    for sig in (signal.SIGTERM, signal.SIGCONT):
        for pid in pids:
            procs.kill(pid, sig)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(ns_pids(ns) for ns in namespaces):
        time.sleep(0.1)
    for ns in namespaces:
        for pid in ns_pids(ns):
            procs.kill(pid)
    return len(pids)


def down(prefix=DEFAULT_PREFIX):
    """Remove every namespace of this prefix and its hosts files; returns (seconds, processes ended)."""
    t0 = time.monotonic()
    nodes, has_switch = existing(prefix)
    namespaces = nodes + ([switch_name(prefix)] if has_switch else [])
    ended = end_processes(namespaces) if namespaces else 0
    for ns in namespaces:
        run(["ip", "netns", "del", ns], check=False)
    release_subnet(prefix)
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
        raise Fail(f"could not remove {', '.join(left)}")
    return time.monotonic() - t0, ended


def reap(stem):
    """Remove clusters named STEM<pid> whose process is gone (a test or selftest that was killed)."""
    names = run(["ip", "netns", "list"]).stdout.split()
    pids = {m.group(1) for n in names for m in [re.fullmatch(re.escape(stem) + r"(\d+)-(?:node\d+|sw)", n)] if m}
    for pid in pids:
        if procs.proc_stat(pid) is None:
            down(f"{stem}{pid}")


def exec_argv(node, cmd, prefix=DEFAULT_PREFIX):
    """argv running cmd inside node `node` with host name PREFIX-nodeNODE (own UTS namespace)."""
    ns = ns_name(prefix, node)
    return ["ip", "netns", "exec", ns, "unshare", "--uts", "--", "sh", "-c",
            'hostname "$0" && exec "$@"', ns, *cmd]


def status(prefix=DEFAULT_PREFIX):
    """Print what exists now; the exit code: 0 running, 1 partial, 3 stopped."""
    nodes, has_switch = existing(prefix)
    if not nodes and not has_switch:
        NETNS.log(f"stopped: no cluster with prefix {prefix!r}")
        return EXIT["stopped"]
    lines, links_up = [], 0
    for ns in nodes:
        addr = run(["ip", "-n", ns, "-4", "-o", "addr", "show", "dev", IFNAME], check=False).stdout.split()
        state = run(["ip", "-n", ns, "-o", "link", "show", "dev", IFNAME], check=False).stdout
        qdisc = run(["tc", "-n", ns, "qdisc", "show", "dev", IFNAME], check=False).stdout
        rate = re.search(r"tbf .*?rate (\S+)", qdisc)
        up = "state UP" in state or ",UP" in state
        links_up += up
        lines.append(f"{ns}: {IFNAME} {addr[3] if len(addr) > 3 else '-'} {'UP' if up else 'DOWN'} "
                     f"rate {rate.group(1) if rate else 'unshaped'}, {len(ns_pids(ns))} processes")
    if has_switch:
        lines.append(f"{switch_name(prefix)}: bridge br0 joining {len(nodes)} ports")
    running = (len(nodes) >= 2 and nodes == [ns_name(prefix, i) for i in range(len(nodes))]
               and links_up == len(nodes) and has_switch == (len(nodes) > 2))
    NETNS.log(f"{'running' if running else 'partial'} with prefix {prefix!r}: {len(nodes)} nodes")
    print("\n".join(f"  {line}" for line in lines))
    return EXIT["running" if running else "partial"]


def command(args):
    """Carry out the parsed `up`, `down`, `status` or `exec`; the exit code."""
    need_root("ip netns, tc")
    if args.cmd == "up":
        took = up(args.nodes, args.rate, args.prefix, args.subnet, args.lo_rate)
        shaped = f", links shaped to {format_rate(parse_rate(args.rate))}" if args.rate else ""
        shaped += f", loopback to {format_rate(parse_rate(args.lo_rate))}" if args.lo_rate else ""
        NETNS.log(f"{args.nodes} nodes {ns_name(args.prefix, 0)}..{args.nodes - 1} "
                  f"on {args.subnet}{shaped} (up in {took:.2f} s)")
    elif args.cmd == "down":
        took, ended = down(args.prefix)
        NETNS.log(f"removed prefix {args.prefix!r}{f', ended {ended} processes' if ended else ''} "
                  f"(down in {took:.2f} s)")
    elif args.cmd == "status":
        return status(args.prefix)
    else:
        cmd = args.command[1:] if args.command[:1] == ["--"] else args.command
        if not cmd:
            raise Fail("exec needs a command: exec NODE -- CMD...")
        if ns_name(args.prefix, args.node) not in existing(args.prefix)[0]:
            raise Fail(f"no node {args.node} (run: netns-cluster up)")
        argv = exec_argv(args.node, cmd, args.prefix)
        os.execvp(argv[0], argv)


def prefix_arg(text):
    """argparse's type for --prefix: checked_prefix, said as argparse says a bad value."""
    try:
        return checked_prefix(text)
    except Fail as exc:
        raise argparse.ArgumentTypeError(str(exc).split(": ", 1)[1]) from None


def main(argv=None):
    cli = Cli(NETNS.prog, __doc__, None, "--prefix", default=DEFAULT_PREFIX, type=prefix_arg,
              help="namespace name prefix (default %(default)s; env NETNS_CLUSTER_PREFIX)")
    p_up = cli.command("up", "create or reshape the cluster")
    p_up.add_argument("--nodes", type=int, default=2)
    p_up.add_argument("--rate", default=None, help="tbf rate of every node's link, e.g. 500mbit, 1gbit")
    p_up.add_argument("--lo-rate", default=None, help="tbf rate of every node's loopback (its intra-node link)")
    p_up.add_argument("--subnet", default=DEFAULT_SUBNET)
    cli.command("down", "remove the cluster")
    cli.command("status", "show the cluster (exit 0 running, 1 partial, 3 stopped)")
    p_exec = cli.command("exec", "run a command on a node: exec NODE -- CMD...")
    p_exec.add_argument("node", type=int)
    p_exec.add_argument("command", nargs=argparse.REMAINDER)
    return cli.main(argv, command)
