"""One sampler per node, off the timed path: a thread that polls NVML every `interval` seconds for each GPU's
clocks-event reasons, temperature and power, and takes the XID events NVML reports meanwhile (its wait for them is
the pause between polls). `commbench node` judges what it saw during the check; a measurement asks for the summary
of its own window (summary()): per GPU, the fraction of samples each throttling reason was active, the peaks, the
XIDs, and the error counters' deltas."""
import threading
import time

from commbench.health.nvml import REASONS, THROTTLING

INTERVAL_S = 0.1


class Sampler:
    def __init__(self, session, interval=INTERVAL_S):
        self.session, self.interval = session, interval
        self.samples = [[] for _ in session.handles]     # per GPU: (monotonic time, bits, temp C, power W)
        self.xids = []                                   # (monotonic time, GPU index, xid)
        self.events = session.xid_events()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="commbench-nvml-sampler", daemon=True)

    def start(self):
        self.poll()
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join(timeout=10 + self.interval * 2)
        self.poll()
        if self.events is not None:
            try:
                self.session.nvml.nvmlEventSetFree(self.events)
            except Exception:   # already gone with the driver: nothing to free
                pass

    def poll(self):
        """One sample of every GPU now (the thread's, and the ends of each measurement: commbench/health/beside.py)."""
        now = time.monotonic()
        for i, samples in enumerate(self.samples):
            samples.append((now, *self.session.sample(i)))

    def _run(self):
        while not self._stop.is_set():
            t = time.monotonic()
            if self.events is not None:
                got = self.session.wait_xid(self.events, int(self.interval * 1000))
                if got is not None:
                    self.xids.append((time.monotonic(), *got))
            remaining = self.interval - (time.monotonic() - t)
            if remaining > 0 and self._stop.wait(remaining):
                break
            self.poll()

    def window(self, i, t0=None, t1=None):
        """GPU i's samples within [t0, t1] as (bits, temp, power)."""
        return [s[1:] for s in self.samples[i] if (t0 is None or s[0] >= t0) and (t1 is None or s[0] <= t1)]

    def live_xids(self, i, t0=None, t1=None):
        """GPU i's XIDs within the window, or None where NVML gives no events."""
        if self.events is None:
            return None
        return [x for t, g, x in self.xids if g == i and (t0 is None or t >= t0) and (t1 is None or t <= t1)]

    def summary(self, t0, t1, before=None, after=None):
        """Per GPU, what a measurement between t0 and t1 ran beside: {gpu, samples, throttle: {reason: fraction},
        temp_peak_c, power_peak_w, xids, pcie, nvlink_down, pcie_replays, nvlink_errors}."""
        out = []
        for i in range(len(self.samples)):
            seen = self.window(i, t0, t1)
            bits = [s[0] for s in seen if s[0] is not None]
            temps, watts = [s[1] for s in seen if s[1] is not None], [s[2] for s in seen if s[2] is not None]
            throttle = {REASONS[b]: round(sum(1 for x in bits if x & b) / len(bits), 3)
                        for b in REASONS if b & THROTTLING and bits and any(x & b for x in bits)}
            entry = {"gpu": i, "samples": len(seen), "throttle": throttle,
                     "temp_peak_c": max(temps) if temps else None,
                     "power_peak_w": round(max(watts), 1) if watts else None, "xids": self.live_xids(i, t0, t1)}
            if before and after:
                entry.update(_counter_deltas(before[i], after[i]))
            out.append(entry)
        return out


def _counter_deltas(before, after):
    """The link facts a slow measurement may be explained by: PCIe link and replays, NVLinks down and errors."""
    a, b = after, before
    links = a.get("nvlinks") or {}
    errors = {}
    for link, v in links.items():
        old = (b.get("nvlinks") or {}).get(link, {})
        d = sum((v.get(k) or 0) - (old.get(k) or 0) for k in ("replay", "recovery", "crc_flit"))
        if d:
            errors[str(link)] = d
    replays = None if a.get("pcie_replays") is None or b.get("pcie_replays") is None else \
        a["pcie_replays"] - b["pcie_replays"]
    return {"pcie": [a.get("pcie_gen"), a.get("pcie_width")], "pcie_replays": replays,
            "nvlink_down": [int(k) for k, v in links.items() if v.get("up") is False], "nvlink_errors": errors}
