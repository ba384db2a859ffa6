"""InfiniBand and RoCE ports from sysfs, as the kernel exposes them (/sys/class/infiniband/DEV/ports/N/: state,
phys_state, rate, link_layer, counters/*), the way gpud reads them (gpud@4a8de33:
components/accelerator/nvidia/infiniband/class/)."""
import re

from commbench.health import boundary

COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors", "link_error_recovery", "excessive_buffer_overrun_errors")


def _read(path):
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _number(text):
    return int(text) if text and text.isdigit() else None


def ports(root=None):
    """[{device, port, state, phys_state, rate_gbit, link_layer, counters}] (None where a file is missing)."""
    root = root or boundary.sys_root()
    out = []
    for port in sorted((root / "class/infiniband").glob("*/ports/*")):
        rate = re.match(r"\s*([\d.]+)\s*Gb/sec", _read(port / "rate") or "")
        out.append({"device": port.parent.parent.name, "port": port.name,
                    "state": (_read(port / "state") or "").split(":")[-1].strip() or None,
                    "phys_state": (_read(port / "phys_state") or "").split(":")[-1].strip() or None,
                    "rate_gbit": float(rate.group(1)) if rate else None, "link_layer": _read(port / "link_layer"),
                    "counters": {c: _number(_read(port / "counters" / c)) for c in COUNTERS}})
    return out


def has_class(root=None):
    return ((root or boundary.sys_root()) / "class/infiniband").is_dir()
