"""One health check of this node at a level: the counters before, a window in which the sampler watches every GPU
(under a load at --level full), the counters after, the IB ports before and after, the kernel log's XIDs; then every
check of commbench/health/checks.py on what was read. Nothing it cannot read is guessed: it is `unknown`, and why."""
import time

from commbench.health import checks, copies, ib, xid
from commbench.health.load import Load
from commbench.health.nvml import open_session
from commbench.health.sampler import Sampler
from commbench.model.detect import gpu_model

LEVELS = {"quick": 2.0, "full": 30.0}     # the window's default seconds
# gpud's expected InfiniBand ports per GPU model: (ports LinkUp, Gb/s each), gpud@4a8de33:components/accelerator/
# nvidia/infiniband/threshold_default.go:13-31
GPUD_PORTS = {"A100-SXM": (1, 200), "H100-SXM": (8, 400), "H200": (8, 400), "B200": (8, 400), "GB200": (8, 400)}


def expectation(topo, names):
    """What this node should have: from the topology file where one is given, else from the GPU model."""
    found = gpu_model(names[0]) if names else None
    if topo is not None:
        links = topo.nvlink_links if topo.fabric in ("nvswitch", "nvlink") else 0
        return {"gpus": topo.gpus_per_node, "gpu": topo.gpu, "nvlink_links": links,
                "ib_ports": topo.nics_per_node if topo.inter_fabric == "network" and topo.gpus_per_node else None,
                "ib_gbit": topo.nic_gbps * 8 if topo.gpus_per_node else None, "from": f"topology {topo.name}"}
    ports, rate = GPUD_PORTS.get(found[0], (None, None)) if found else (None, None)
    links = None if not found else found[3] if found[3] else 0 if found[2] is None else None
    return {"gpus": None, "gpu": None, "nvlink_links": links, "ib_ports": ports, "ib_gbit": rate,
            "from": f"the GPU model {found[0]} (gpud's ports)" if found else "nothing (no GPU model known)"}


def survey(level="quick", seconds=None, topo=None, interval=None):
    """{"level", "seconds", "expect", "node": rows, "gpus": [(subject, rows)], "ports": [(subject, rows)],
    "notes": [...], "snapshot": per GPU facts}."""
    seconds = LEVELS[level] if seconds is None else seconds
    session, why = open_session()
    notes = [f"GPUs: none: {why}"] if session is None else []
    statics = [session.static(i) for i in range(len(session.handles))] if session else []
    expect = expectation(topo, [s["name"] for s in statics if s["name"]])
    boot, boot_why = xid.since_boot() if session else (None, None)
    if session and boot is None:
        notes.append(f"XIDs since boot: {boot_why}")
    ports_before = ib.ports()
    if session is None and not ports_before:
        seconds = 0        # nothing to watch
    before = [session.counters(i) for i in range(len(statics))]
    load = Load() if level == "full" and session else None
    if load and load.why:
        notes.append(load.why)
    sampler = Sampler(session, **({"interval": interval} if interval else {})).start() if session else None
    t0 = time.monotonic()
    if load:
        load.start()
    try:
        time.sleep(seconds)
        after = [session.counters(i) for i in range(len(statics))]
    finally:
        if load:
            load.stop()
        if sampler:
            sampler.stop()
    elapsed = time.monotonic() - t0
    ports_after = ib.ports()
    loaded = bool(load and not load.why)
    gpus = []
    for i, s in enumerate(statics):
        bus = xid.nvml_bus_key(s["bus"]) if s["bus"] else None
        facts = {"static": s, "before": before[i], "after": after[i], "samples": sampler.window(i),
                 "seconds": elapsed, "loaded": loaded, "expect": expect,
                 "xid_boot": None if boot is None else boot.get(bus, []), "xid_boot_why": boot_why,
                 "xid_live": sampler.live_xids(i)}
        gpus.append((f"GPU {i}" + (f" {s['bus']}" if s["bus"] else ""), checks.judge("gpu", facts)))
    by_name = {(p["device"], p["port"]): p for p in ports_before}
    port_facts = [{"before": by_name.get((p["device"], p["port"]), p), "after": p, "seconds": elapsed,
                   "expect": expect} for p in ports_after]
    ports = [(f"{p['after']['device']}:{p['after']['port']}", checks.judge("port", p)) for p in port_facts]
    if not ports_after:
        notes.append("InfiniBand: no port" + ("" if ib.has_class() else " (no /sys/class/infiniband)"))
    node = checks.judge("node", {"gpus": statics, "ports": port_facts, "expect": expect, "why": why,
                                 "ib_class": ib.has_class()})
    if session:
        session.close()
    copy = copy_engine(topo) if level == "full" else None
    return {"copy": copy, "level": level, "seconds": round(elapsed, 2), "expect": expect, "node": node, "gpus": gpus,
            "ports": ports, "notes": notes, "loaded": loaded}


def copy_engine(topo):
    """{"rows": health lines, "d2d": the matrix or None, "flagged": slow pairs}: measured where CUDA is, else n/a."""
    why = copies.unavailable()
    if why:
        return {"rows": [{"item": "copy-engine bandwidth", "value": why, "verdict": "unknown", "threshold": "n/a",
                          "source": "n/a", "read": "torch"}], "d2d": None, "flagged": set()}
    measured = copies.measure()
    rows, flagged = copies.judge(measured, topo)
    return {"rows": rows, "d2d": measured["d2d"], "flagged": flagged}


def subjects(result):
    """[(subject, rows)] of every table: the node, each GPU, each port, the copy engines."""
    copy = [("copy engine", result["copy"]["rows"])] if result.get("copy") else []
    return [("node", result["node"])] + result["gpus"] + result["ports"] + copy


def failing(result):
    """['GPU 3 row remap failure: yes: RMA the GPU', ...] of every line that failed."""
    return [f"{subject} {row['item']}: {row['value']}" for subject, rows in subjects(result) for row in rows
            if row["verdict"] == "fail"]
