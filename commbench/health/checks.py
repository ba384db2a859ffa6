"""The one table of node-health checks: what each line is about, how it is read, its threshold, where the threshold
comes from, and the function that turns what was read into a verdict (ok, warn, fail, unknown) and the value shown.

A GPU's facts (commbench/health/node.py gathers them): `static` and the counters `before` and `after` the check
(commbench/health/nvml.py), `samples` of (clocks-event reason bits, temperature, power) taken during it, `seconds`
between the two counter reads, `xid_boot` (the kernel log's XIDs of this GPU, or None) and `xid_live` (NVML's events
during the check, or None), `loaded` (a load ran on it) and the expectation `expect` (from the topology file or the
GPU model). A port's: `before`, `after`, `seconds`, `expect`. The node's: `gpus`, `ports`, `expect`, `why`."""
import math
from dataclasses import dataclass
from typing import Callable

from commbench.health.nvml import REASONS, reasons_text
from commbench.health.xid import worst
from commbench.model.detect import gpu_model

DCGM = "DCGM@72fa3fe (v4.5.3-1)"
LIMITS = f"{DCGM}:common/DcgmGPUHardwareLimits.h"
WATCH = f"{DCGM}:modules/health/DcgmHealthWatch.cpp"
REMAP_POLICY = ("NVIDIA A100/H100 GPU memory error management, RMA policy thresholds for row remapping "
                "(docs.nvidia.com/deploy/a100-gpu-mem-error-mgmt); gpud@4a8de33:components/accelerator/nvidia/"
                "remapped-rows/remapped_rows.go:86-110")
GPUD = "gpud@4a8de33:components/accelerator/nvidia/"
GPUD_IB = f"{GPUD}infiniband/threshold_default.go:13-31"
NVML_DOC = "NVML API reference (nvml.h)"
# PCIe replays allowed per lane per minute at a bit error rate of 1e-12, by generation: DCGM's rule
REPLAYS_PER_LANE_MIN = {1: 0.15, 2: 0.3, 3: 0.48, 4: 0.96, 5: 1.92, 6: 3.84}
RETIRED_MAX, RETIRED_DBE_SOFT, REMAP_UNCORRECTABLE_MAX, NVLINK_CRC_PER_S = 63, 15, 512, 100.0
TEMP_MARGIN_C = 5           # within this of the slowdown temperature: a warning (commbench's margin)
HW_THROTTLE = {0x8: "HW slowdown", 0x40: "HW thermal slowdown", 0x80: "HW power brake"}


@dataclass(frozen=True)
class Check:
    item: str
    scope: str          # gpu, port or node
    read: str           # how the value is read
    threshold: str
    source: str
    judge: Callable     # facts -> (verdict, value shown)


def _get(facts, when, key):
    return (facts.get(when) or {}).get(key)


def _delta(facts, key):
    a, b = _get(facts, "before", key), _get(facts, "after", key)
    return None if a is None or b is None else b - a


def model(f):
    name, want = f["static"]["name"], f["expect"].get("gpu")
    found = gpu_model(name)
    if name is None:
        return "unknown", "not reported"
    if found is None:
        return "warn", f"{name} (a model commbench does not know)"
    if want and gpu_model(want) and gpu_model(want)[0] != found[0]:
        return "fail", f"{name}: the topology expects {want}"
    return "ok", name


def _mode(value, on, off):
    return ("unknown", "not reported") if value is None else ("ok", on) if value else ("warn", off)


def persistence(f):
    return _mode(f["static"]["persistence"], "enabled", "disabled: the driver reloads state per process")


def ecc_mode(f):
    return _mode(f["static"]["ecc_mode"], "enabled", "disabled: memory errors go uncorrected and unseen")


def ecc_volatile(f):
    n = _get(f, "after", "ecc_volatile")
    return ("unknown", "not reported") if n is None else ("fail" if n else "ok", f"{n}")


def ecc_aggregate(f):
    n = _get(f, "after", "ecc_aggregate")
    return ("unknown", "not reported") if n is None else ("warn" if n else "ok", f"{n} over the GPU's life")


def retired(f):
    sbe, dbe, remap = _get(f, "after", "retired_sbe"), _get(f, "after", "retired_dbe"), _get(f, "after", "remap")
    if sbe is None or dbe is None:
        return ("ok", "not used: this GPU remaps rows instead") if remap else ("unknown", "not reported")
    text = f"{sbe + dbe} ({sbe} single-bit, {dbe} double-bit)"
    if sbe + dbe >= RETIRED_MAX:
        return "fail", text
    return ("warn" if dbe > RETIRED_DBE_SOFT else "ok"), text


def retired_pending(f):
    p = _get(f, "after", "retired_pending")
    if p is None:
        return ("ok", "not used: this GPU remaps rows instead") if _get(f, "after", "remap") else \
            ("unknown", "not reported")
    return ("warn", "yes: reset the GPU to retire them") if p else ("ok", "no")


def _remap(f, key):
    r = _get(f, "after", "remap")
    return None if r is None else r[key]


def remap_failure(f):
    x = _remap(f, "failure")
    return ("unknown", "not reported") if x is None else ("fail", "yes: RMA the GPU") if x else ("ok", "no")


def remap_pending(f):
    x = _remap(f, "pending")
    return ("unknown", "not reported") if x is None else ("fail", "yes: reset the GPU") if x else ("ok", "no")


def remap_uncorrectable(f):
    r = _get(f, "after", "remap")
    if r is None:
        return "unknown", "not reported"
    text = f"{r['uncorrected']} uncorrectable, {r['corrected']} correctable"
    return ("warn" if r["uncorrected"] >= REMAP_UNCORRECTABLE_MAX else "ok"), text


def pcie_link(f):
    gen, width = _get(f, "after", "pcie_gen"), _get(f, "after", "pcie_width")
    gmax, wmax = f["static"]["pcie_gen_max"], f["static"]["pcie_width_max"]
    if None in (gen, width, gmax, wmax):
        return "unknown", "not reported"
    text = f"Gen{gen} x{width} of Gen{gmax} x{wmax}"
    if width < wmax or gen < gmax and f["loaded"]:
        return "fail", text + (" under load" if f["loaded"] else "")
    if gen < gmax:
        return "warn", text + " idle (a link slows when idle: --level full reads it under load)"
    return "ok", text + (" under load" if f["loaded"] else " idle")


def pcie_replays(f):
    n, gen, width = _delta(f, "pcie_replays"), _get(f, "after", "pcie_gen"), _get(f, "after", "pcie_width")
    if n is None or not f["seconds"]:
        return "unknown", "not reported"
    total = _get(f, "after", "pcie_replays")
    if gen not in REPLAYS_PER_LANE_MIN or not width:
        return "unknown", f"{n} during the check ({total} since reset); link speed not reported"
    limit = math.ceil(REPLAYS_PER_LANE_MIN[gen] * width)
    rate = n / f["seconds"] * 60
    return ("warn" if rate > limit else "ok"), f"{rate:.1f}/min of {limit}/min ({total} since reset)"


def nvlinks_up(f):
    links = _get(f, "after", "nvlinks") or {}
    want = f["expect"].get("nvlink_links")
    if not links:
        return ("ok", "none: not an NVLink GPU") if want == 0 else ("unknown", "NVML reported no NVLink state")
    up = [k for k, v in links.items() if v["up"]]
    down = [str(k) for k, v in links.items() if v["up"] is False]
    speed = sum(links[k]["gbps"] or 0 for k in up)
    text = f"{len(up)} up of {want if want is not None else len(links)}, {speed:g} GB/s" + \
        (f"; down: {', '.join(down)}" if down else "")
    if want is None:
        return ("warn" if down else "unknown"), text + " (no expectation: give --topology)"
    return ("fail" if len(up) < want else "ok"), text


def nvlink_errors(f):
    before, after = _get(f, "before", "nvlinks") or {}, _get(f, "after", "nvlinks") or {}
    if not after:
        return ("ok", "none: not an NVLink GPU") if f["expect"].get("nvlink_links") == 0 else \
            ("unknown", "NVML reported no NVLink")
    worst_v, parts, read = "ok", [], False
    for link, a in after.items():
        b = before.get(link, {})
        d = {k: None if a.get(k) is None or b.get(k) is None else a[k] - b[k]
             for k in ("replay", "recovery", "crc_flit")}
        read = read or any(v is not None for v in d.values())
        if d["replay"] or d["recovery"]:
            worst_v = "fail"
            parts.append(f"link {link}: {d['replay'] or 0} replay, {d['recovery'] or 0} recovery")
        if d["crc_flit"]:
            rate = d["crc_flit"] / max(f["seconds"], 1e-9)
            worst_v = "fail" if rate >= NVLINK_CRC_PER_S or worst_v == "fail" else "warn"
            parts.append(f"link {link}: CRC {rate:.0f}/s")
    if not read:
        return "unknown", "error counters not reported"
    return worst_v, "; ".join(parts) or f"none in {f['seconds']:.1f} s"


def throttling(f):
    samples = [s[0] for s in f["samples"] if s[0] is not None]
    if not samples:
        return "unknown", "not reported"
    seen = {bit: sum(1 for s in samples if s & bit) / len(samples) for bit in REASONS}
    hw = [f"{name} {seen[bit]:.0%}" for bit, name in HW_THROTTLE.items() if seen[bit]]
    text = ", ".join(f"{REASONS[b]} {v:.0%}" for b, v in seen.items() if v and b != 0x1) or \
        f"none ({'idle' if seen[0x1] else reasons_text(0)})"
    text += f" of {len(samples)} samples"
    if hw:
        return ("fail" if f["loaded"] else "warn"), text
    return ("warn" if seen[0x20] else "ok"), text


def temperature(f):
    temps = [s[1] for s in f["samples"] if s[1] is not None]
    limit = f["static"]["temp_slowdown"]
    if not temps:
        return "unknown", "not reported"
    if not limit:
        return "unknown", f"peak {max(temps)} C; slowdown temperature not reported"
    text = f"peak {max(temps)} C of {limit} C"
    return ("fail" if max(temps) >= limit else "warn" if max(temps) >= limit - TEMP_MARGIN_C else "ok"), text


def power(f):
    watts, limit = [s[2] for s in f["samples"] if s[2] is not None], f["static"]["power_limit_w"]
    if not watts or not limit:
        return "unknown", "not reported"
    return ("warn" if max(watts) > limit else "ok"), f"peak {max(watts):.0f} W of {limit:.0f} W"


def fabric(f):
    fab, found = f["static"]["fabric"], gpu_model(f["static"]["name"])
    if fab is None:
        return ("ok", "n/a: a PCIe card") if found and found[1] == "pcie" else ("unknown", "not reported")
    return ("ok" if fab["ok"] else "fail"), fab["state"] + ("" if fab["ok"] else ": NVLink and NVLS are down")


def _xids(xids, why):
    return ("unknown", why) if xids is None else worst(xids)


def xid_boot(f):
    return _xids(f["xid_boot"], f.get("xid_boot_why") or "kernel log not read")


def xid_live(f):
    return _xids(f["xid_live"], "NVML gives no XID events here")


def port_state(p):
    s = p["after"]["state"]
    return ("unknown", "not reported") if s is None else ("ok" if s == "ACTIVE" else "fail", s)


def port_phys(p):
    s = p["after"]["phys_state"]
    if s is None:
        return "unknown", "not reported"
    return ("ok", s) if s == "LinkUp" else ("fail", s + (": cable or peer lost" if s == "Polling" else ""))


def port_rate(p):
    rate, want = p["after"]["rate_gbit"], p["expect"].get("ib_gbit")
    if rate is None:
        return "unknown", "not reported"
    if p["after"]["link_layer"] != "InfiniBand":
        return "ok", f"{rate:g} Gb/s ({p['after']['link_layer']}: not an expected InfiniBand port)"
    if not want:
        return "unknown", f"{rate:g} Gb/s (no expectation: give --topology)"
    return ("ok" if rate >= want else "fail"), f"{rate:g} Gb/s of {want:g}"


def port_layer(p):
    layer = p["after"]["link_layer"]
    return ("unknown", "not reported") if layer is None else ("ok", layer)


def _counter(name, fail):
    def judge(p):
        a, b = p["after"]["counters"].get(name), p["before"]["counters"].get(name)
        if a is None or b is None:
            return "unknown", "not reported"
        d = a - b
        return ("fail" if d and fail else "warn" if d else "ok"), f"+{d} in {p['seconds']:.1f} s ({a} in all)"
    return judge


def gpu_count(n):
    have, want = len(n["gpus"]), n["expect"].get("gpus")
    if want is None:
        return ("ok", f"{have}") if have else ("unknown", f"none: {n['why']}")
    return ("ok" if have >= want else "fail"), f"{have} of {want}" + ("" if have else f": {n['why']}")


def ib_ports_up(n):
    want, rate = n["expect"].get("ib_ports"), n["expect"].get("ib_gbit")
    up = [p for p in n["ports"] if p["after"]["link_layer"] == "InfiniBand" and p["after"]["state"] == "ACTIVE"
          and p["after"]["phys_state"] == "LinkUp" and (p["after"]["rate_gbit"] or 0) >= (rate or 0)]
    if not n["ports"] and not want:
        return "ok", "none: no InfiniBand class in sysfs" if not n["ib_class"] else "none"
    text = f"{len(up)} InfiniBand ports LinkUp at >= {rate or 0:g} Gb/s" + (f" of {want}" if want else "")
    return ("unknown" if not want else "ok" if len(up) >= want else "fail"), text


CHECKS = (
    Check("GPUs", "node", "nvmlDeviceGetCount", "the topology's gpus_per_node", "topology file", gpu_count),
    Check("InfiniBand ports up", "node", "/sys/class/infiniband/*/ports/*", ">= the expected ports LinkUp at rate",
          GPUD_IB, ib_ports_up),
    Check("model", "gpu", "nvmlDeviceGetName", "the topology's GPU", "topology file", model),
    Check("persistence mode", "gpu", "nvmlDeviceGetPersistenceMode", "enabled",
          f"{DCGM}:nvvs/src/NvidiaValidationSuite.cpp (level 1: Persistence Mode)", persistence),
    Check("ECC mode", "gpu", "nvmlDeviceGetEccMode", "enabled", NVML_DOC, ecc_mode),
    Check("ECC uncorrected, volatile", "gpu", "nvmlDeviceGetTotalEccErrors(UNCORRECTED, VOLATILE)", "0 (fail)",
          f"{WATCH}:1735", ecc_volatile),
    Check("ECC uncorrected, aggregate", "gpu", "nvmlDeviceGetTotalEccErrors(UNCORRECTED, AGGREGATE)", "0 (warn)",
          f"{WATCH}:1693", ecc_aggregate),
    Check("retired pages", "gpu", "nvmlDeviceGetRetiredPages", f"< {RETIRED_MAX}; double-bit <= {RETIRED_DBE_SOFT}",
          f"{LIMITS}:21-22, {WATCH}:1836-1848", retired),
    Check("retired pages pending", "gpu", "nvmlDeviceGetRetiredPagesPendingStatus", "no (warn)", f"{WATCH}:1774",
          retired_pending),
    Check("row remap failure", "gpu", "nvmlDeviceGetRemappedRows", "no (RMA)", f"{WATCH}:1931; {REMAP_POLICY}",
          remap_failure),
    Check("row remap pending", "gpu", "nvmlDeviceGetRemappedRows", "no (reset)",
          f"{DCGM}:nvvs/src/Software.cpp:840-883 (level 1 fails on it); {REMAP_POLICY}", remap_pending),
    Check("row remaps", "gpu", "nvmlDeviceGetRemappedRows", f"uncorrectable < {REMAP_UNCORRECTABLE_MAX} (warn)",
          f"{LIMITS}:39, {WATCH}:1966", remap_uncorrectable),
    Check("PCIe link", "gpu", "nvmlDeviceGetCurrPcieLinkGeneration/Width vs Max", "current = max (under load)",
          f"{DCGM}:nvvs/diag-skus.yaml.in (min_pci_generation, min_pci_width)", pcie_link),
    Check("PCIe replays", "gpu", "nvmlDeviceGetPcieReplayCounter (delta)", "<= ceil(per-lane rate x lanes)/min",
          f"{WATCH}:1556-1578", pcie_replays),
    Check("NVLink links up", "gpu", "nvmlDeviceGetNvLinkState, nvmlDeviceGetNvLinkVersion",
          "the topology's nvlink_links", "topology file", nvlinks_up),
    Check("NVLink errors", "gpu", "nvmlDeviceGetNvLinkErrorCounter (delta)",
          f"replay, recovery 0; CRC < {NVLINK_CRC_PER_S:g}/s", f"{LIMITS}:28-30, {WATCH}:2766-2784", nvlink_errors),
    Check("clocks-event reasons", "gpu", "nvmlDeviceGetCurrentClocksEventReasons (sampled)",
          "no HW slowdown, HW thermal, HW power brake",
          f"{NVML_DOC}: nvmlClocksEventReason*; {GPUD}hw-slowdown/component.go:30-35",
          throttling),
    Check("temperature", "gpu", "nvmlDeviceGetTemperature vs nvmlDeviceGetTemperatureThreshold(SLOWDOWN)",
          f"< slowdown (warn within {TEMP_MARGIN_C} C)", NVML_DOC, temperature),
    Check("power", "gpu", "nvmlDeviceGetPowerUsage vs nvmlDeviceGetEnforcedPowerLimit", "<= the enforced limit",
          NVML_DOC, power),
    Check("fabric", "gpu", "nvmlDeviceGetGpuFabricInfo", "completed, success", NVML_DOC, fabric),
    Check("XIDs since boot", "gpu", "kernel log (NVRM: Xid)", "none DCGM fails on", f"{WATCH}:3360-3396", xid_boot),
    Check("XIDs during the check", "gpu", "nvmlEventSetWait (XID events)", "none DCGM fails on",
          f"{WATCH}:3360-3396", xid_live),
    Check("state", "port", "ports/N/state", "ACTIVE", GPUD_IB, port_state),
    Check("physical state", "port", "ports/N/phys_state", "LinkUp (Polling: cable or peer lost)", GPUD_IB,
          port_phys),
    Check("rate", "port", "ports/N/rate", ">= the expected rate", GPUD_IB, port_rate),
    Check("link layer", "port", "ports/N/link_layer", "shown", "sysfs", port_layer),
    Check("symbol errors", "port", "counters/symbol_error (delta)", "0 (fail)",
          "ibdiagnet's default threshold: 1 per run", _counter("symbol_error", True)),
    Check("link downed", "port", "counters/link_downed (delta)", "0 (fail)",
          "ibdiagnet's default threshold: 1 per run", _counter("link_downed", True)),
    Check("receive errors", "port", "counters/port_rcv_errors (delta)", "0 (warn)", "ibqueryerrors' threshold 0",
          _counter("port_rcv_errors", False)),
    Check("link error recovery", "port", "counters/link_error_recovery (delta)", "0 (warn)",
          "ibqueryerrors' threshold 0", _counter("link_error_recovery", False)),
    Check("buffer overruns", "port", "counters/excessive_buffer_overrun_errors (delta)", "0 (warn)",
          "ibqueryerrors' threshold 0", _counter("excessive_buffer_overrun_errors", False)),
)
VERDICTS = ("ok", "warn", "fail", "unknown")


def judge(scope, facts):
    """[{item, value, verdict, threshold, source, read}] of every check of scope on facts."""
    rows = []
    for c in CHECKS:
        if c.scope == scope:
            verdict, value = c.judge(facts)
            rows.append({"item": c.item, "value": value, "verdict": verdict, "threshold": c.threshold,
                         "source": c.source, "read": c.read})
    return rows
