"""Where a rendezvous endpoint is and how this machine reaches it (both tools' multi-node runs)."""
import fcntl
import socket
import struct

from benchcore.errors import UserError, shown


def split_endpoint(endpoint):
    host, sep, port = endpoint.rpartition(":")
    if not sep or not host or not (port.isascii() and port.isdigit() and len(port) <= 5) or not 0 < int(port) < 65536:
        raise UserError(f"--rdzv-endpoint {shown(repr(endpoint), 80)} is not HOST:PORT")
    return host, int(port)


def route_to(host):
    """(interface name, local address) this machine uses to reach host."""
    try:
        addr = socket.gethostbyname(host)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.connect((addr, 9))  # UDP connect sends nothing; it only picks the route
            local = s.getsockname()[0]
    except OSError as exc:
        raise UserError(f"cannot find a route to rendezvous host {host}: {exc}") from None
    for _, name in socket.if_nameindex():
        if interface_address(name) == local:
            return name, local
    raise UserError(f"no interface holds {local}, the address that routes to {host}")


def interface_address(name):
    """IPv4 address of interface `name`, or None."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            packed = fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])
