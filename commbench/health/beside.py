"""The sampler beside every GPU measurement of a commbench run: local rank 0 of each node runs one Sampler
(commbench/health/sampler.py, a thread polling NVML, off the timed path) for the whole run; around each measurement
(measure_case: its refill, warm-up and timed loop, one record per phase) it reads the error counters before and
after, and the nodes' summaries are gathered to every rank (one all_gather_object between measurements, never inside
a timed loop). The records carry them as `gpu_health`, with the `causes` a slow number may have. Without NVML on any
node nothing is sampled and nothing is gathered (one all_gather at the start says so)."""
import time

import torch.distributed as dist

from benchcore.results.records import hostname
from commbench.health.nvml import open_session
from commbench.health.sampler import INTERVAL_S, Sampler

THROTTLE_SHARE = 0.05      # a reason active in this share of the samples counts as throttling


class Beside:
    def __init__(self, ctx):
        self.ctx, self.session, self.sampler, self.gather = ctx, None, None, False
        if ctx.local_rank == 0:
            self.session, _ = open_session()
        if self.session:
            self.static = [self.session.static(i) for i in range(len(self.session.handles))]
            self.sampler = Sampler(self.session).start()
        self.gather = self._anyone(self.sampler is not None)

    def _anyone(self, mine):
        """Whether any node samples (the MPI transport has no torch process group: this node alone)."""
        if self.ctx.plan.backend == "mpi" or not dist.is_initialized() or dist.get_world_size() == 1:
            return mine
        seen = [None] * dist.get_world_size()
        dist.all_gather_object(seen, mine)
        return any(seen)

    def measured(self, run):
        """run()'s records, each with the GPUs' health during it (gpu_health) where a node samples."""
        if not self.gather:
            return run()
        before = self._counters()
        t0 = time.monotonic()
        if self.sampler:   # a sample at each end (outside run's timed loops): a measurement shorter than the
            self.sampler.poll()   # poll interval has its own samples too
        recs = run()
        if self.sampler:
            self.sampler.poll()
        t1 = time.monotonic()
        mine = None
        if self.sampler:
            entries = self.sampler.summary(t0, t1, before, self._counters())
            for entry, static in zip(entries, self.static):
                entry["pcie_max"] = [static["pcie_gen_max"], static["pcie_width_max"]]
            mine = {hostname(): entries}
        nodes = {}
        for part in self._all(mine):
            nodes.update(part or {})
        health = {"interval_s": INTERVAL_S, "seconds": round(t1 - t0, 3), "nodes": nodes, "causes": causes(nodes)}
        return [{**rec, "gpu_health": health} for rec in recs]

    def _counters(self):
        return [self.session.counters(i) for i in range(len(self.session.handles))] if self.sampler else None

    def _all(self, mine):
        if self.ctx.plan.backend == "mpi" or not dist.is_initialized() or dist.get_world_size() == 1:
            return [mine]
        out = [None] * dist.get_world_size()
        dist.all_gather_object(out, mine)
        return out

    def close(self):
        if self.sampler:
            self.sampler.stop()
            self.session.close()


def causes(nodes):
    """What on each node may have slowed a measurement: ['node GPU 5 HW thermal slowdown 38 % of the run',
    'node GPU 2 PCIe Gen4 x8 of Gen5 x16', 'node NVLink 7 of GPU 3 down', ...]."""
    out = []
    for host, gpus in sorted(nodes.items()):
        for g in gpus:
            where = f"{host} GPU {g['gpu']}"
            for reason, share in g["throttle"].items():
                if share >= THROTTLE_SHARE:
                    out.append(f"{where} {reason} {share:.0%} of the run".replace("%", " %"))
            gen, width = g.get("pcie") or (None, None)
            gmax, wmax = g.get("pcie_max") or (None, None)
            if None not in (gen, width, gmax, wmax) and (gen < gmax or width < wmax):
                out.append(f"{where} PCIe Gen{gen} x{width} of Gen{gmax} x{wmax}")
            out += [f"{host} NVLink {link} of GPU {g['gpu']} down" for link in g.get("nvlink_down") or []]
            out += [f"{where} NVLink {link}: {n} errors" for link, n in (g.get("nvlink_errors") or {}).items()]
            out += [f"{where} XID {x}" for x in g.get("xids") or []]
    return out
