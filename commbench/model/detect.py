"""Topology detection (shown by `commbench topo`, commbench/commands/topo.py): GPUs through NVML, NICs from sysfs
and tc, matched to topologies/.

GPUs (nvidia-ml-py, imported only here and only when asked): name, memory, NVLink links with state,
version and speed, the GPU-to-GPU path matrix as `nvidia-smi topo -m` prints it (NV# when NVLink
joins two GPUs, else the PCIe common ancestor: PIX one switch, PXB several, PHB host bridge, NODE
same NUMA node, SYS across sockets), NUMA node and CPU affinity. NICs: InfiniBand/RoCE ports from
/sys/class/infiniband/*/ports/*/{rate,state,link_layer}, interfaces from /sys/class/net/*/{speed,
operstate,mtu}, and the rate of a tc tbf qdisc on an interface, which is what a shaped link
carries (in scripts/netns-cluster nodes, eth0's shaped rate is the inter-node link; a shaped lo
is the intra-node one). Without an NVIDIA driver it says so in one line and shows the CPU and
network; it never fakes a GPU.
"""
import ctypes
import json
import os
import re
import shutil
import subprocess
from dataclasses import replace
from pathlib import Path

from commbench.launch.mpirun import across_hosts
from commbench.launch.torchrun import route_to, split_endpoint
from commbench.model.topology import known, resolve

SYS = Path("/sys")
NVLINK_GBPS = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}   # per link, one direction (NVIDIA NVLink pages)
PCIE_LANE_GBPS = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.563}   # per lane, one direction, after encoding
ANCESTOR = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}  # NVML_TOPOLOGY_* -> nvidia-smi's
# TCP payload per frame (IPv4 20 B + TCP with timestamps 32 B of headers): a tc-shaped interface counts the
# frame with its 14 B Ethernet header; a physical line also carries preamble, FCS and gap (24 B more).
TCP_HEADERS, ETH_HEADER, WIRE_EXTRA = 52, 14, 24
LOOPBACK_TYPE = "772"   # ARPHRD_LOOPBACK
TOLERANCE = 0.10        # rates within 10 % match a file
# GPU model from NVML's product name (or a topology file's gpu text): (pattern, model, form, NVLink generation, links
# per GPU where it has a switch baseboard). Order matters: GB200 before B200, the PCIe/NVL cards before their SXM kin.
# Names as NVML reports them: "NVIDIA H100 80GB HBM3" (SXM5), "NVIDIA H100 PCIe", "NVIDIA H100 NVL" (PCIe card with
# NVLink bridges), "NVIDIA H200" / "H200 NVL", "NVIDIA B200", "NVIDIA GB200", "NVIDIA A100-SXM4-80GB", "NVIDIA L40S".
GPU_MODELS = ((r"GB200", "GB200", "superchip", 5, 18), (r"H200 NVL", "H200-NVL", "pcie", 4, None),
              (r"H100 (PCIe|NVL)", "H100-PCIe", "pcie", 4, None), (r"A100.*PCIE", "A100-PCIe", "pcie", 3, None),
              (r"B200", "B200", "sxm", 5, 18), (r"H200", "H200", "sxm", 4, 18),
              (r"H100[- ](SXM|80GB HBM3|94GB HBM2e)", "H100-SXM", "sxm", 4, 18),
              (r"A100-SXM", "A100-SXM", "sxm", 3, 12),
              (r"L40S", "L40S", "pcie", None, None))
FABRIC_STATES = {0: "not supported", 1: "not started", 2: "in progress", 3: "completed"}   # NVML_GPU_FABRIC_STATE_*


def fabric(nvml, h):
    """{state, ok} of the NVSwitch fabric GPU h joined, or None where NVML reports none (before Hopper, a binding
    without the call, a PCIe card). nvmlDeviceGetGpuFabricInfo fills a struct the caller passes (nvidia-ml-py)."""
    try:
        info = nvml.c_nvmlGpuFabricInfo_t()
        nvml.nvmlDeviceGetGpuFabricInfo(h, ctypes.byref(info))
    except Exception:  # noqa: BLE001  (NVMLError of any kind, or a binding without the struct)
        return None
    if not info.state:
        return None
    return {"state": FABRIC_STATES.get(info.state, str(info.state)), "ok": info.state == 3 and info.status == 0}
NVLINK_SWITCH = 2   # NVML_NVLINK_DEVICE_TYPE_SWITCH


def _read(path):
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def _text(value):
    return value.decode() if isinstance(value, bytes) else str(value)


def gpu_model(name):
    """(model, form, NVLink generation, links) of a GPU's product name, or None where GPU_MODELS knows none."""
    return next((row[1:] for row in GPU_MODELS if re.search(row[0], name or "", re.I)), None)


def cpu_list(masks, word_bits=64):
    """NVML's CPU affinity words -> '0-7,16-23'."""
    cpus = [w * word_bits + b for w, word in enumerate(masks) for b in range(word_bits) if word >> b & 1]
    runs, start = [], None
    for i, c in enumerate(cpus):
        if start is None:
            start = c
        if i + 1 == len(cpus) or cpus[i + 1] != c + 1:
            runs.append(f"{start}-{c}" if c != start else str(c))
            start = None
    return ",".join(runs)


def gpus(nvml=None, sys_root=SYS):
    """({"gpus": [...], "paths": [[...]]}, None) through NVML, or (None, why there are none)."""
    try:
        if nvml is None:
            import pynvml as nvml
        nvml.nvmlInit()
    except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
        return None, f"no NVIDIA driver ({_text(exc) or type(exc).__name__})"
    try:
        handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        out = [_gpu(nvml, i, h, sys_root) for i, h in enumerate(handles)]
        paths = [[_path(nvml, a, b, out[i]) if i != j else "X" for j, b in enumerate(handles)]
                 for i, a in enumerate(handles)]
        return {"gpus": out, "paths": paths}, None
    finally:
        nvml.nvmlShutdown()


def _try(fn, *args, default=None):
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported and kin: the field stays unknown
        return default


def _gpu(nvml, index, h, sys_root):
    links = []
    for link in range(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18)):
        state = _try(nvml.nvmlDeviceGetNvLinkState, h, link)
        if state is None:
            continue
        version = _try(nvml.nvmlDeviceGetNvLinkVersion, h, link)
        links.append({"link": link, "active": state == 1, "version": version,
                      "gbps": NVLINK_GBPS.get(version) if state == 1 else None})
    bus = _text(nvml.nvmlDeviceGetPciInfo(h).busId).lower()
    sysfs_bus = bus[4:] if len(bus.split(":")[0]) == 8 else bus   # NVML's 8-digit domain -> sysfs' 4
    numa = _try(nvml.nvmlDeviceGetNumaNodeId, h) if hasattr(nvml, "nvmlDeviceGetNumaNodeId") else None
    if numa is None:
        raw = _read(Path(sys_root) / "bus/pci/devices" / sysfs_bus / "numa_node")
        numa = int(raw) if raw and raw.lstrip("-").isdigit() and int(raw) >= 0 else None
    words = (os.cpu_count() + 63) // 64
    affinity = _try(nvml.nvmlDeviceGetCpuAffinity, h, words)
    gen, width = _try(nvml.nvmlDeviceGetMaxPcieLinkGeneration, h), _try(nvml.nvmlDeviceGetMaxPcieLinkWidth, h)
    joined = fabric(nvml, h)
    remote = [_try(nvml.nvmlDeviceGetNvLinkRemoteDeviceType, h, x["link"]) for x in links if x["active"]] \
        if hasattr(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType") else []
    return {"index": index, "name": _text(nvml.nvmlDeviceGetName(h)),
            "fabric_state": joined["state"] if joined else None, "fabric_ok": joined["ok"] if joined else None,
            "nvswitch": (NVLINK_SWITCH in remote) if any(r is not None for r in remote) else None,
            "memory_bytes": nvml.nvmlDeviceGetMemoryInfo(h).total,
            "pci_bus": bus, "numa_node": numa, "cpu_affinity": cpu_list(affinity) if affinity else None,
            "pcie": f"Gen{gen} x{width}" if gen and width else None,
            "pcie_gbps": PCIE_LANE_GBPS.get(gen, 0) * width if gen and width else None,
            "nvlinks": links, "nvlink_gbps": sum(link["gbps"] or 0 for link in links)}


def _path(nvml, a, b, gpu_a):
    ok = getattr(nvml, "NVML_P2P_STATUS_OK", 0)
    if _try(nvml.nvmlDeviceGetP2PStatus, a, b, getattr(nvml, "NVML_P2P_CAPS_INDEX_NVLINK", 2)) == ok:
        return f"NV{sum(1 for link in gpu_a['nvlinks'] if link['active'])}"
    return ANCESTOR.get(_try(nvml.nvmlDeviceGetTopologyCommonAncestor, a, b), "?")


def ib_ports(sys_root=SYS):
    """InfiniBand and RoCE ports: /sys/class/infiniband/DEV/ports/N/{rate,state,link_layer}."""
    out = []
    for port in sorted((Path(sys_root) / "class/infiniband").glob("*/ports/*")):
        rate = _read(port / "rate") or ""
        m = re.match(r"\s*([\d.]+)\s*Gb/sec", rate)
        state = _read(port / "state") or ""
        out.append({"device": port.parent.parent.name, "port": int(port.name), "rate": rate,
                    "gbit": float(m.group(1)) if m else None, "state": state.split(":")[-1].strip(),
                    "link_layer": _read(port / "link_layer")})
    return out


def tc_rate_bits(ifname, tc_json=None):
    """Rate in bit/s of the tbf qdisc shaping ifname (root), or None when it is not shaped."""
    if tc_json is None:
        if not shutil.which("tc"):
            return None
        try:
            tc_json = subprocess.run(["tc", "-j", "qdisc", "show", "dev", ifname], capture_output=True, text=True,
                                     timeout=10).stdout
        except (OSError, subprocess.TimeoutExpired):
            return None
    try:
        qdiscs = json.loads(tc_json or "[]")
    except ValueError:
        return None
    for q in qdiscs:
        if q.get("kind") == "tbf" and q.get("root") and (q.get("options") or {}).get("rate"):
            return int(q["options"]["rate"]) * 8   # tc -j reports tbf's rate in bytes/s
    return None


def interfaces(sys_root=SYS, tc=tc_rate_bits):
    """Network interfaces: sysfs speed (Mb/s; absent or -1 on virtual ones), state, MTU, and a tc rate."""
    out = []
    for d in sorted((Path(sys_root) / "class/net").iterdir()) if (Path(sys_root) / "class/net").is_dir() else []:
        speed = _read(d / "speed")
        mtu = _read(d / "mtu")
        out.append({"name": d.name, "loopback": _read(d / "type") == LOOPBACK_TYPE,
                    "state": _read(d / "operstate"), "mtu": int(mtu) if mtu and mtu.isdigit() else None,
                    "speed_mbit": int(speed) if speed and speed.isdigit() and int(speed) > 0 else None,
                    "shaped_bits": tc(d.name)})
    return out


def default_interface(proc_route="/proc/net/route"):
    """The interface of the default route, or None."""
    for line in (_read(proc_route) or "").splitlines()[1:]:
        parts = line.split()
        if len(parts) > 2 and parts[1] == "00000000":
            return parts[0]
    return None


def link_interface(nets, wanted=None):
    """The interface that is the inter-node link: wanted, else the default route's, else the only one up."""
    names = {n["name"]: n for n in nets}
    if wanted in names:
        return names[wanted]
    default = default_interface()
    if default in names:
        return names[default]
    up = [n for n in nets if not n["loopback"] and n["state"] in ("up", "unknown")]
    return up[0] if len(up) == 1 else None


def cpu_info(sys_root=SYS):
    model = next((ln.split(":", 1)[1].strip() for ln in (_read("/proc/cpuinfo") or "").splitlines()
                  if ln.startswith("model name")), None)
    nodes = {d.name: _read(d / "cpulist") for d in sorted((Path(sys_root) / "devices/system/node").glob("node[0-9]*"))}
    return {"model": model, "cpus": os.cpu_count(), "numa_nodes": nodes}


def _gbps(bits):
    return bits / 8e9 if bits else None


def _tcp_fraction(mtu, shaped):
    """TCP payload share of what the link counts: (MTU - 52) / (MTU + 14) shaped, / (MTU + 38) on a wire."""
    mtu = mtu or 1500
    return (mtu - TCP_HEADERS) / (mtu + ETH_HEADER + (0 if shaped else WIRE_EXTRA))


def detect(link=None, nvml=None, sys_root=SYS, tc=tc_rate_bits):
    """What this node has: {"gpus", "why_no_gpus", "cpu", "ib", "net", "link", "fields"}; fields holds the
    topology-file fields it could establish (None where the node does not say)."""
    gpu, why = gpus(nvml, sys_root)
    ib = ib_ports(sys_root)
    nets = interfaces(sys_root, tc)
    lo = next((n for n in nets if n["loopback"]), None)
    active_ib = [p for p in ib if p["state"] == "ACTIVE" and p["gbit"]]
    fields = {"gpus_per_node": len(gpu["gpus"]) if gpu else 0}
    if gpu and gpu["gpus"]:
        g = gpu["gpus"]
        nv = all(p.startswith("NV") for row in gpu["paths"] for p in row if p != "X")
        seen = any(p != "?" for row in gpu["paths"] for p in row if p != "X") or len(g) == 1
        switch = any(x["nvswitch"] for x in g) or any(x["fabric_ok"] for x in g)   # a fabric manager runs switches
        model = gpu_model(g[0]["name"])
        fields["intra_node.fabric"] = ("nvswitch" if len(g) > 2 or switch else "nvlink") if nv and len(g) > 1 \
            else "pcie" if seen else {"sxm": "nvswitch", "superchip": "nvswitch", "pcie": "pcie"}.get(
                model[1] if model else None)     # NVML said no path: an SXM board's GPUs sit on NVSwitches
        fields["gpu"] = model[0] if model else None
        active = [x for x in g[0]["nvlinks"] if x["active"]]
        fields["intra_node.nvlink_links"] = len(active) or None
        fields["intra_node.nvlink_gen"] = next((x["version"] for x in active), None)
        inferred = not nv and fields["intra_node.fabric"] != "pcie"       # NVLink not reported: its rate unknown
        fields["intra_node.per_gpu_gbps"] = None if inferred else \
            min(x["nvlink_gbps"] if nv else (x["pcie_gbps"] or 0) for x in g) or None
        fields["intra_node.ceiling"] = "reported" if fields["intra_node.per_gpu_gbps"] else None
    else:
        fields["intra_node.fabric"] = "loopback"
        fields["intra_node.per_gpu_gbps"] = _gbps(lo and lo["shaped_bits"])
        fields["intra_node.ceiling"] = "tc" if fields["intra_node.per_gpu_gbps"] else None
    chosen = lo if link == "lo" else link_interface(nets, link)
    if active_ib:
        fields.update({"inter_node.nics_per_node": len(active_ib), "inter_node.payload_fraction": 1.0,
                       "inter_node.per_nic_gbps": min(p["gbit"] for p in active_ib) / 8,
                       "inter_node.fabric": "network", "inter_node.ceiling": "reported"})
    elif chosen:
        bits = chosen["shaped_bits"] or (chosen["speed_mbit"] or 0) * 1e6 or None
        fields.update({"inter_node.nics_per_node": 1, "inter_node.per_nic_gbps": _gbps(bits),
                       "inter_node.payload_fraction": None if chosen["loopback"] or not bits else
                       _tcp_fraction(chosen["mtu"], bool(chosen["shaped_bits"])),
                       "inter_node.fabric": "loopback" if chosen["loopback"] else "network",
                       "inter_node.ceiling": None if not bits else "tc" if chosen["shaped_bits"] else "reported"})
    gpn, nics = fields["gpus_per_node"], fields.get("inter_node.nics_per_node")
    if nics:
        fields["inter_node.rank_to_nic"] = "rail" if gpn > 1 and nics >= gpn else "shared"
    return {"gpus": gpu, "why_no_gpus": why, "cpu": cpu_info(sys_root), "ib": ib, "net": nets,
            "link": chosen["name"] if chosen else None, "fields": fields, "notes": notes(gpu)}


def notes(gpu):
    """What the GPUs say about NVLink SHARP's prerequisites, and what NVML did not report."""
    if not gpu or not gpu["gpus"]:
        return []
    g, out = gpu["gpus"], []
    model = gpu_model(g[0]["name"])
    states = sorted({x["fabric_state"] for x in g if x["fabric_state"]})
    if any(x["fabric_ok"] is False for x in g):
        out.append(f"fabric manager: state {', '.join(states)}: the NVSwitch fabric is not ready, so NVLink and NVLS "
                   "are unavailable (is nvidia-fabricmanager running, at the driver's version?)")
    elif any(x["fabric_ok"] for x in g):
        out.append("fabric manager: state completed, status success (the NVSwitch fabric is up)")
    else:
        out.append("fabric manager: not reported (NVML reports the fabric state on Hopper and later)")
    if not any(x["nvlinks"] for x in g):
        expect = f"; a {model[0]} has {model[3]} NVLink{model[2]} links" if model and model[3] else ""
        out.append(f"NVLink: not reported by NVML{expect}")
    if model is None:
        out.append(f"GPU model: {g[0]['name']!r} is none this project knows (commbench/model/detect.py GPU_MODELS)")
    elif model[1] == "pcie":
        out.append(f"GPU model: {model[0]} is a PCIe card: no NVSwitch, no NVLink SHARP")
    return out


COMPARED = (("gpu", None), ("gpus_per_node", None), ("intra_node.fabric", None), ("intra_node.per_gpu_gbps", TOLERANCE),
            ("inter_node.nics_per_node", None), ("inter_node.per_nic_gbps", TOLERANCE))
ATTR = {"gpu": "gpu", "gpus_per_node": "gpus_per_node", "intra_node.nvlink_links": "nvlink_links",
        "intra_node.nvlink_gen": "nvlink_gen", "intra_node.fabric": "fabric", "intra_node.per_gpu_gbps": "intra_gbps",
        "inter_node.nics_per_node": "nics_per_node", "inter_node.per_nic_gbps": "nic_gbps",
        "inter_node.payload_fraction": "payload_fraction", "inter_node.rank_to_nic": "rank_to_nic",
        "inter_node.fabric": "inter_fabric", "intra_node.ceiling": "intra_ceiling",
        "inter_node.ceiling": "inter_ceiling"}


def differences(fields, topo):
    """['field detected vs file', ...] for the compared fields the node reports."""
    out = []
    for key, tol in COMPARED:
        have, want = fields.get(key), getattr(topo, ATTR[key])
        if key == "gpu":
            want = (gpu_model(want) or (None,))[0]
        if have is None:
            continue
        if tol is None and have != want or tol is not None and abs(have - want) > tol * want:
            out.append(f"{key} {have:g} vs {want:g}" if tol else f"{key} {have} vs {want}")
    return out


def match(fields, topos=None):
    """(matched file's Topology or None, closest Topology, its differences)."""
    topos = topos or known()
    closest = min(topos.values(), key=lambda t: len(differences(fields, t)))
    diffs = differences(fields, closest)
    return (None if diffs else closest), closest, diffs


def in_effect(fields, topos=None):
    """The topology records carry: the matching file, else "detected": what the node reports, the rest
    (latencies, and rates the node does not report) from the closest file. A file whose nodes are emulated on one
    machine (localhost) matches a node joined to others by a network only as "detected" (the nodes are real)."""
    matched, closest, _ = match(fields, topos)
    if matched and fields.get("inter_node.fabric") in (None, matched.inter_fabric):
        return matched
    base = matched or closest
    found = {ATTR[k]: v for k, v in fields.items() if k in ATTR and v is not None}
    return replace(base, name="detected", source=f"detected; the rest from {base.name}", **found)


def unreported(fields):
    return [k for k, _ in COMPARED if fields.get(k) is None]


def for_run(text, spec):
    """The topology a run's records carry: --topology FILE|NAME, else what this node detects, with the
    inter-node link the launch uses (emulated nodes on this machine, mpirun's without hosts too: loopback;
    --rdzv-endpoint: the interface that routes to it; Slurm: the default route's)."""
    if text:
        return resolve(text)
    link = None
    if spec.launcher == "local" or spec.launcher == "mpirun" and not across_hosts(spec):
        link = "lo"
    elif spec.launcher == "torchrun" and not spec.dry_run:
        link = route_to(split_endpoint(spec.rdzv_endpoint)[0])[0]
    return in_effect(detect(link)["fields"])
