"""XIDs: the NVIDIA driver's error reports. NVML keeps no history, so the ones since boot come from the kernel log
(`NVRM: Xid (PCI:0000:9b:00): 119, pid=..., name=..., <text>`, as dmesg and /dev/kmsg print them; gpud reads them
the same way, gpud@4a8de33:components/accelerator/nvidia/xid/), and the ones during a check from NVML's events
(commbench/health/nvml.py). How bad each is: DCGM's health watch (DCGM@72fa3fe, v4.5.3-1:
modules/health/DcgmHealthWatch.cpp:3360-3396, BuildXidMappings); an XID it does not list is a warning."""
import errno
import os
import re

from commbench.health import boundary

# XID -> (verdict, what DCGM calls it)
SEVERITY = {48: ("fail", "double bit ECC error"), 74: ("fail", "NVLink critical error"),
            79: ("fail", "GPU fallen off the bus"), 94: ("warn", "contained ECC error"),
            95: ("fail", "uncontained ECC error"), 119: ("fail", "GSP RPC timeout"), 120: ("fail", "GSP error"),
            140: ("fail", "ECC unrecovered error"), 31: ("warn", "MMU error"), 32: ("warn", "PBDMA error"),
            43: ("warn", "reset channel verification error"), 63: ("warn", "pending page retirement / row remap"),
            64: ("fail", "row remap failure"), 38: ("warn", "PCIe bus error"), 39: ("warn", "PCIe fabric error"),
            42: ("warn", "PCIe replay error")}
LINE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F]+):([0-9a-fA-F]{2}):([0-9a-fA-F]{2})[^)]*\): (\d+)")
MAX_RECORDS = 1 << 20        # the kernel's ring holds far fewer; a bound all the same
MAX_BYTES = 64 << 20


def bus_key(domain, bus, device):
    """One spelling of a PCI address for NVML's '00000000:18:00.0' and the kernel's '0000:18:00'."""
    return f"{int(domain, 16):04x}:{bus.lower()}:{device.lower()}"


def nvml_bus_key(bus_id):
    domain, bus, rest = bus_id.split(":")
    return bus_key(domain, bus, rest.split(".")[0])


def parse(lines):
    """[(bus key, xid)] in the order the log has them."""
    out = []
    for line in lines:
        m = LINE.search(line)
        if m:
            out.append((bus_key(*m.groups()[:3]), int(m.group(4))))
    return out


def _kmsg(path):
    """The kernel's records since boot (what its ring still holds), read without blocking."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    lines = []
    try:
        for _ in range(MAX_RECORDS):
            try:
                record = os.read(fd, 8192)
            except BlockingIOError:
                break
            except OSError as exc:
                if exc.errno == errno.EPIPE:     # overwritten while read: the next one follows
                    continue
                raise
            if not record:
                break
            lines.append(record.decode("utf-8", "replace").split(";", 1)[-1])
    finally:
        os.close(fd)
    return lines


def since_boot():
    """({bus key: [xid, ...]}, None) from the kernel log, or (None, why it could not be read)."""
    path, is_kmsg = boundary.kernel_log()
    try:
        if is_kmsg:
            lines = _kmsg(path)
        else:
            with open(path, "rb") as f:
                lines = f.read(MAX_BYTES).decode("utf-8", "replace").splitlines()
    except OSError as exc:
        return None, f"kernel log {path} not readable ({exc.strerror}; root, or kernel.dmesg_restrict=0)"
    found = {}
    for key, xid in parse(lines):
        found.setdefault(key, []).append(xid)
    return found, None


def worst(xids):
    """(verdict, text) of a list of XIDs: fail, warn, or ok when there are none."""
    if not xids:
        return "ok", "none"
    counts = {x: xids.count(x) for x in dict.fromkeys(xids)}
    verdicts = [SEVERITY.get(x, ("warn", ""))[0] for x in counts]
    text = ", ".join(f"{x}{f' x{n}' if n > 1 else ''}{f' ({SEVERITY[x][1]})' if x in SEVERITY else ''}"
                     for x, n in counts.items())
    return ("fail" if "fail" in verdicts else "warn"), text
