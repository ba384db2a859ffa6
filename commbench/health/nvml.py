"""A GPU's health as NVML reports it (nvidia-ml-py, through commbench/health/boundary.py): what it is, its error
counters (read twice: their difference over a check is what the check saw), a sample of its clocks-event reasons,
temperature and power, and the XIDs its driver reports while a check runs. A call NVML answers NotSupported (or any
error) leaves its value None: unknown, never guessed."""

from commbench.health import boundary
from commbench.model.detect import NVLINK_GBPS, fabric

# nvmlClocksEventReason* bits (pynvml 13.615.71: pynvml.py:2190-2199) -> the name the tables print
REASONS = {0x1: "idle", 0x2: "applications clocks", 0x4: "SW power cap", 0x8: "HW slowdown", 0x10: "sync boost",
           0x20: "SW thermal slowdown", 0x40: "HW thermal slowdown", 0x80: "HW power brake", 0x100: "display clock"}
THROTTLING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80          # the reasons that slow a busy GPU down
NVLINK_ERRORS = {"replay": 0, "recovery": 1, "crc_flit": 2}   # NVML_NVLINK_ERROR_DL_*


def _try(fn, *args):
    try:
        return fn(*args)
    except Exception:  # NVMLError_NotSupported and kin (or a binding without the call): unknown
        return None


def _text(value):
    return value.decode() if isinstance(value, bytes) else None if value is None else str(value)


class Session:
    """NVML initialised, its GPUs' handles; close() shuts it down."""

    def __init__(self, nvml):
        self.nvml = nvml
        nvml.nvmlInit()
        try:
            self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(nvml.nvmlDeviceGetCount())]
        except Exception:
            nvml.nvmlShutdown()
            raise
        self.links = [self._links(h) for h in self.handles]

    def close(self):
        _try(self.nvml.nvmlShutdown)

    def _links(self, h):
        """{link: NVLink version} of the links NVML reports a state for."""
        n = self.nvml
        states = {link: _try(n.nvmlDeviceGetNvLinkState, h, link)
                  for link in range(getattr(n, "NVML_NVLINK_MAX_LINKS", 18))}
        return {link: _try(n.nvmlDeviceGetNvLinkVersion, h, link) for link, s in states.items() if s is not None}

    def static(self, i):
        """What does not change during a check: name, bus, persistence, ECC mode, PCIe maximum, limits, fabric."""
        n, h = self.nvml, self.handles[i]
        pci = _try(n.nvmlDeviceGetPciInfo, h)
        ecc = _try(n.nvmlDeviceGetEccMode, h)
        return {"index": i, "name": _text(_try(n.nvmlDeviceGetName, h)),
                "bus": _text(getattr(pci, "busId", None)), "persistence": _try(n.nvmlDeviceGetPersistenceMode, h),
                "ecc_mode": ecc[0] if ecc else None,
                "pcie_gen_max": _try(n.nvmlDeviceGetMaxPcieLinkGeneration, h),
                "pcie_width_max": _try(n.nvmlDeviceGetMaxPcieLinkWidth, h),
                "temp_slowdown": _try(n.nvmlDeviceGetTemperatureThreshold, h, 1),   # ..._THRESHOLD_SLOWDOWN
                "power_limit_w": _watts(_try(n.nvmlDeviceGetEnforcedPowerLimit, h)),
                "fabric": self._fabric(h)}

    def _fabric(self, h):
        return fabric(self.nvml, h)

    def counters(self, i):
        """The counters a check reads before and after: ECC, retired pages, row remaps, PCIe link and replays,
        NVLink state and error counters."""
        n, h = self.nvml, self.handles[i]
        pages = {cause: _try(n.nvmlDeviceGetRetiredPages, h, cause) for cause in (0, 1)}   # SBE, DBE causes
        remap = _try(n.nvmlDeviceGetRemappedRows, h)
        links = {}
        for link, version in self.links[i].items():
            state = _try(n.nvmlDeviceGetNvLinkState, h, link)
            links[link] = {"up": state == 1 if state is not None else None, "version": version,
                           "gbps": NVLINK_GBPS.get(version) if state == 1 else None,
                           **{k: _try(n.nvmlDeviceGetNvLinkErrorCounter, h, link, c) for k, c in NVLINK_ERRORS.items()}}
        return {"ecc_volatile": _try(n.nvmlDeviceGetTotalEccErrors, h, 1, 0),    # uncorrected, volatile
                "ecc_aggregate": _try(n.nvmlDeviceGetTotalEccErrors, h, 1, 1),   # uncorrected, aggregate
                "retired_sbe": None if pages[0] is None else len(pages[0]),
                "retired_dbe": None if pages[1] is None else len(pages[1]),
                "retired_pending": _try(n.nvmlDeviceGetRetiredPagesPendingStatus, h),
                "remap": None if remap is None else dict(zip(("corrected", "uncorrected", "pending", "failure"),
                                                             remap)),
                "pcie_gen": _try(n.nvmlDeviceGetCurrPcieLinkGeneration, h),
                "pcie_width": _try(n.nvmlDeviceGetCurrPcieLinkWidth, h),
                "pcie_replays": _try(n.nvmlDeviceGetPcieReplayCounter, h), "nvlinks": links}

    def sample(self, i):
        """(clocks-event reason bits, temperature C, power W) now."""
        n, h = self.nvml, self.handles[i]
        reasons = _try(n.nvmlDeviceGetCurrentClocksEventReasons, h) if hasattr(
            n, "nvmlDeviceGetCurrentClocksEventReasons") else _try(n.nvmlDeviceGetCurrentClocksThrottleReasons, h)
        return reasons, _try(n.nvmlDeviceGetTemperature, h, 0), _watts(_try(n.nvmlDeviceGetPowerUsage, h))

    def xid_events(self):
        """An NVML event set for XIDs on every GPU, or None where NVML gives none."""
        n = self.nvml
        events = _try(n.nvmlEventSetCreate)
        if events is None:
            return None
        for h in self.handles:
            _try(n.nvmlDeviceRegisterEvents, h, getattr(n, "nvmlEventTypeXidCriticalError", 8), events)
        return events

    def wait_xid(self, events, ms):
        """(GPU index, xid) of the next XID within ms, or None."""
        data = _try(self.nvml.nvmlEventSetWait_v2, events, ms)
        if data is None:
            return None
        return _try(self.nvml.nvmlDeviceGetIndex, data.device), int(data.eventData)


def _watts(mw):
    return None if mw is None else mw / 1000


def open_session():
    """(Session, None), or (None, why there is no GPU to read)."""
    try:
        return Session(boundary.pynvml()), None
    except Exception as exc:  # ImportError, NVMLError_LibraryNotFound, NVMLError_DriverNotLoaded, ...
        return None, f"no NVIDIA driver ({_text(exc) or type(exc).__name__})"


def reasons_text(bits):
    return ", ".join(name for bit, name in REASONS.items() if bits & bit) or "none"
