"""A stand-in for pynvml at the NVML boundary (this machine has no GPU), loaded by commbench/health/boundary.py
through COMMBENCH_TEST_PYNVML. It answers the NVML calls commbench/health/nvml.py makes from real captures:

  CAPTURED_NVML=FILE          an `nvidia-smi -q` capture (tests/fixtures/nvidia_smi/, each with its source): nvidia-smi
                              prints what the same NVML calls return
  CAPTURED_NVML_THEN=FILE@S   from S seconds after nvmlInit on, answer from this capture instead (a counter that moved,
                              a reason that became active: the tests' edited copies, each saying what was edited)
  CAPTURED_NVLINK=FILE        an `nvidia-smi nvlink --status` capture: each link's state and speed
  CAPTURED_XID=FILE@S         the XIDs of a kernel-log capture (tests/fixtures/kernel_log/), delivered as NVML's XID
                              events S seconds after nvmlInit, each to the GPU on the line's PCI bus

{node} in a path is this host's name (every node of a Slurm cluster reads its own). What a capture does not print
(NVLink state without CAPTURED_NVLINK, NVLink error counters, XID events without CAPTURED_XID) answers NotSupported, as NVML does for what
it cannot say, and commbench must show it as unknown."""
import ctypes
import os
import re
import socket
import time

NVML_NVLINK_MAX_LINKS = 18
nvmlEventTypeXidCriticalError = 8
REASON_BITS = {"Idle": 0x1, "Applications Clocks Setting": 0x2, "SW Power Cap": 0x4, "HW Slowdown": 0x8,
               "Sync Boost": 0x10, "SW Thermal Slowdown": 0x20, "HW Thermal Slowdown": 0x40,
               "HW Power Brake Slowdown": 0x80, "Display Clock Setting": 0x100}
NVLINK_VERSION_OF_SPEED = {"20 GB/s": 1, "25 GB/s": 3, "26.562 GB/s": 4, "50 GB/s": 5}


class NVMLError(Exception):
    pass


class NVMLError_NotSupported(NVMLError):
    pass


def _path(name):
    value = os.environ.get(name)
    return value.replace("{node}", socket.gethostname()) if value else None


def _tree(section):
    """`Key : value` lines nested by indentation -> {key: value or {...}}."""
    root, stack = {}, [(-1, None)]
    stack[0] = (-1, root)
    for line in section.splitlines()[1:]:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        key, sep, value = line.strip().partition(":")
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        if sep and value.strip():
            parent[key.strip()] = value.strip()
        else:
            parent[key.strip()] = {}
            stack.append((indent, parent[key.strip()]))
    return root


def _gpus(path):
    with open(path) as f:
        sections = re.split(r"\n(?=GPU [0-9A-Fa-f]{8}:)", f.read())[1:]
    return [_tree(s) for s in sections]


def _links(path):
    if not path:
        return {}
    out, gpu = {}, None
    with open(path) as f:
        for line in f:
            m = re.match(r"GPU (\d+):", line)
            if m:
                gpu = int(m.group(1))
            m = re.match(r"\s+Link (\d+): (.*)", line)
            if m and gpu is not None:
                out.setdefault(gpu, {})[int(m.group(1))] = m.group(2).strip()
    return out


_state = {}


def nvmlInit():
    path = _path("CAPTURED_NVML")
    if not path:
        raise NVMLError("Driver Not Loaded")
    then = _path("CAPTURED_NVML_THEN")
    _state.update(gpus=_gpus(path), links=_links(_path("CAPTURED_NVLINK")), t0=time.monotonic(), then=None)
    _state["xids"] = _xids(_path("CAPTURED_XID"))
    if then:
        file, _, at = then.rpartition("@")
        _state["then"] = (float(at), _gpus(file))


def _xids(spec):
    """[(seconds after init, GPU index, xid)] of CAPTURED_XID's log lines on this capture's GPUs."""
    if not spec:
        return None
    file, _, at = spec.rpartition("@")
    buses = [re.sub(r"^0+", "", g["PCI"]["Bus Id"].lower().rsplit(".", 1)[0]) for g in _state["gpus"]]
    out = []
    with open(file) as f:
        for m in re.finditer(r"NVRM: Xid \(PCI:([0-9a-fA-F]+:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})\): (\d+)", f.read()):
            bus = re.sub(r"^0+", "", m.group(1).lower())
            if bus in buses:
                out.append((float(at), buses.index(bus), int(m.group(2))))
    return out


class NVMLError_Timeout(NVMLError):
    pass


class _EventData:
    def __init__(self, device, xid):
        self.device, self.eventData = device, xid


def nvmlEventSetCreate():
    if _state["xids"] is None:
        raise NVMLError_NotSupported("Not Supported")
    return []


def nvmlDeviceRegisterEvents(h, types, events):
    events.append(h)


def nvmlEventSetWait_v2(events, ms):
    """The next captured XID due by now on a registered GPU, else NVML's timeout after waiting up to ms."""
    deadline = time.monotonic() + ms / 1000
    while True:
        due = [x for x in _state["xids"] if x[1] in events and time.monotonic() - _state["t0"] >= x[0]]
        if due:
            _state["xids"].remove(due[0])
            return _EventData(due[0][1], due[0][2])
        if time.monotonic() >= deadline:
            raise NVMLError_Timeout("Timeout")
        time.sleep(min(0.01, max(0.0, deadline - time.monotonic())))


def nvmlEventSetFree(events):
    pass


def nvmlShutdown():
    pass


def _now(h):
    then = _state["then"]
    gpus = then[1] if then and time.monotonic() - _state["t0"] >= then[0] else _state["gpus"]
    return gpus[h]


def _get(h, *keys):
    node = _now(h)
    for k in keys:
        if not isinstance(node, dict) or k not in node:
            raise NVMLError_NotSupported(f"Not Supported ({' / '.join(keys)})")
        node = node[k]
    if node == "N/A":
        raise NVMLError_NotSupported(f"Not Supported ({' / '.join(keys)})")
    return node


def _first(h, *paths):
    for p in paths:
        try:
            return _get(h, *p)
        except NVMLError_NotSupported:
            continue
    raise NVMLError_NotSupported("Not Supported")


def _number(text):
    return float(text.split()[0].rstrip("x"))


def nvmlDeviceGetCount():
    return len(_state["gpus"])


def nvmlDeviceGetHandleByIndex(i):
    return i


def nvmlDeviceGetIndex(h):
    return h


def nvmlDeviceGetName(h):
    return _get(h, "Product Name")


class _Pci:
    def __init__(self, bus):
        self.busId = bus.encode()


def nvmlDeviceGetPciInfo(h):
    return _Pci(_get(h, "PCI", "Bus Id"))


class _Memory:
    def __init__(self, total):
        self.total = total


def nvmlDeviceGetMemoryInfo(h):
    return _Memory(int(_number(_get(h, "FB Memory Usage", "Total"))) << 20)   # nvidia-smi prints MiB


def nvmlDeviceGetPersistenceMode(h):
    return int(_get(h, "Persistence Mode") == "Enabled")


def nvmlDeviceGetEccMode(h):
    return [int(_get(h, "ECC Mode", k) == "Enabled") for k in ("Current", "Pending")]


def nvmlDeviceGetTotalEccErrors(h, error_type, counter_type):
    """Uncorrected (error_type 1) errors, volatile (0) or aggregate (1): the capture's uncorrectable lines summed."""
    group = _get(h, "ECC Errors", ("Volatile", "Aggregate")[counter_type])
    values = [v for k, v in group.items() if isinstance(v, str) and "Uncorrectable" in k and v != "N/A"]
    if error_type != 1 or not values:
        raise NVMLError_NotSupported("Not Supported")
    return sum(int(v) for v in values)


def nvmlDeviceGetRetiredPages(h, cause):
    count = int(_get(h, "Retired Pages", ("Single Bit ECC", "Double Bit ECC")[cause]))
    return [0x1000 * i for i in range(count)]


def nvmlDeviceGetRetiredPagesPendingStatus(h):
    return int(_get(h, "Retired Pages", "Pending Page Blacklist") == "Yes")


def nvmlDeviceGetRemappedRows(h):
    r = _get(h, "Remapped Rows")
    if not isinstance(r, dict) or r.get("Pending", "N/A") == "N/A":
        raise NVMLError_NotSupported("Not Supported")
    return (int(r["Correctable Error"]), int(r["Uncorrectable Error"]), int(r["Pending"] == "Yes"),
            int(r["Remapping Failure Occurred"] == "Yes"))


def nvmlDeviceGetMaxPcieLinkGeneration(h):
    return int(_get(h, "PCI", "GPU Link Info", "PCIe Generation", "Max"))


def nvmlDeviceGetMaxPcieLinkWidth(h):
    return int(_number(_get(h, "PCI", "GPU Link Info", "Link Width", "Max")))


def nvmlDeviceGetCurrPcieLinkGeneration(h):
    return int(_get(h, "PCI", "GPU Link Info", "PCIe Generation", "Current"))


def nvmlDeviceGetCurrPcieLinkWidth(h):
    return int(_number(_get(h, "PCI", "GPU Link Info", "Link Width", "Current")))


def nvmlDeviceGetPcieReplayCounter(h):
    return int(_get(h, "PCI", "Replays Since Reset"))


def nvmlDeviceGetCurrentClocksEventReasons(h):
    group = _first(h, ("Clocks Event Reasons",), ("Clocks Throttle Reasons",))
    bits, flat = 0, dict(group)
    for v in group.values():
        if isinstance(v, dict):
            flat.update(v)
    for name, bit in REASON_BITS.items():
        if flat.get(name) == "Active":
            bits |= bit
    return bits


def nvmlDeviceGetTemperature(h, sensor):
    return int(_number(_get(h, "Temperature", "GPU Current Temp")))


def nvmlDeviceGetTemperatureThreshold(h, kind):
    return int(_number(_get(h, "Temperature", "GPU Slowdown Temp")))   # absolute; newer drivers print margins


def nvmlDeviceGetPowerUsage(h):
    return int(_number(_first(h, ("GPU Power Readings", "Power Draw"), ("Power Readings", "Power Draw"))) * 1000)


def nvmlDeviceGetEnforcedPowerLimit(h):
    return int(_number(_first(h, ("GPU Power Readings", "Current Power Limit"),
                              ("Power Readings", "Enforced Power Limit"))) * 1000)


class c_nvmlGpuFabricInfo_t(ctypes.Structure):
    _fields_ = [("state", ctypes.c_uint8), ("status", ctypes.c_uint)]


def nvmlDeviceGetGpuFabricInfo(h, ref):
    states = {"Not Supported": 0, "Not Started": 1, "In Progress": 2, "Completed": 3}
    info = ref._obj
    info.state = states[_get(h, "Fabric", "State")]
    info.status = 0 if _now(h)["Fabric"].get("Status") == "Success" else 1


def _link(h, link):
    speed = _state["links"].get(h, {}).get(link)
    if speed is None:
        raise NVMLError_NotSupported("Not Supported")
    return speed


def nvmlDeviceGetNvLinkState(h, link):
    return int("inactive" not in _link(h, link).lower())


def nvmlDeviceGetNvLinkVersion(h, link):
    return NVLINK_VERSION_OF_SPEED.get(_link(h, link), 4)


def _unsupported(*args):
    raise NVMLError_NotSupported("Not Supported")


nvmlDeviceGetNvLinkErrorCounter = _unsupported
# `commbench topo`'s topology calls (commbench/model/detect.py): nvidia-smi -q prints none of them
nvmlDeviceGetCpuAffinity = nvmlDeviceGetP2PStatus = nvmlDeviceGetTopologyCommonAncestor = _unsupported
nvmlDeviceGetNumaNodeId = nvmlDeviceGetNvLinkRemoteDeviceType = _unsupported
