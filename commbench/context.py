"""What every rank shares: the process group, its device, the record context, and timing."""
import datetime
import os
import platform
import time

import torch
import torch.distributed as dist

from benchcore.records import git_revision, hostname, timestamp

ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_")


class Context:
    """Process group, device and the facts every record carries."""

    def __init__(self, plan):
        self.plan = plan
        backend = plan["backend"]
        if backend == "auto":
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl" and not torch.cuda.is_available():
            raise RuntimeError("--backend nccl needs CUDA, and this rank sees no GPU")
        ring = plan.get("strategy") == "ring" or any(s["name"] == "ring" for s in plan.get("strategies", []))
        if backend == "nccl" and ring:
            os.environ.setdefault("NCCL_ALGO", "Ring")  # read by NCCL when the communicator is created
        self.backend = backend
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        timeout = datetime.timedelta(seconds=plan["timeout"])
        if backend == "nccl":
            self.device = torch.device("cuda", self.local_rank)
            torch.cuda.set_device(self.device)
            dist.init_process_group("nccl", timeout=timeout, device_id=self.device)
        else:
            self.device = torch.device("cpu")
            dist.init_process_group("gloo", timeout=timeout)
        self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
        self.host = hostname()
        ids = [None] * self.world_size
        dist.all_gather_object(ids, (self.host, os.environ.get("GROUP_RANK", "0")))
        self.hosts = sorted({h for h, _ in ids})
        self.nodes = len({g for _, g in ids})
        self.env = {k: v for k, v in sorted(os.environ.items()) if k.startswith(ENV_PREFIXES)}
        self.blocking = plan["blocking"] if plan["blocking"] is not None else backend != "nccl"
        self.versions = {"torch": torch.__version__, "python": platform.python_version(), "suite": git_revision()}
        if backend == "nccl":
            self.versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            self.versions["cuda"] = torch.version.cuda

    def barrier(self):
        if self.backend == "nccl":
            dist.barrier(device_ids=[self.local_rank])
        else:
            dist.barrier()

    def record(self, **fields):
        """A result record with this run's context; `fields` hold the measurement."""
        plan = self.plan
        rec = {"tool": "commbench", "run_id": plan["run_id"], "strategy": plan.get("strategy"),
               "chunk_bytes": None}
        rec.update(fields)
        rec.update({"world_size": self.world_size, "nodes": self.nodes, "local_world_size":
                    int(os.environ.get("LOCAL_WORLD_SIZE", "1")), "backend": self.backend,
                    "launcher": plan["launcher"], "env": self.env, "topology": plan.get("topology"),
                    "link_peak_gbps": None, "link_utilization": None, "predicted_time_us": None,
                    "hosts": self.hosts, "versions": self.versions, "timestamp": timestamp()})
        rec.update({k: plan[k] for k in ("sweep_config", "sweep_fingerprint") if k in plan})
        return rec


def time_loop(ctx, run_once, iters, blocking):
    """Seconds per iteration on this rank: CUDA events on GPU, barrier + perf_counter on CPU."""
    ctx.barrier()
    if ctx.device.type == "cuda":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(iters):
            run_once(False)
            if blocking:
                torch.cuda.synchronize()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3 / iters
    t0 = time.perf_counter()
    if blocking:
        for _ in range(iters):
            run_once(False)
    else:
        works = [run_once(True) for _ in range(iters)]
        for work in works:
            if work is not None:
                work.wait()
    return (time.perf_counter() - t0) / iters


def measure(ctx, run_once, iters, warmup, blocking):
    """(avg, min, max) over ranks of the per-iteration time in seconds, after warm-up."""
    if warmup:
        time_loop(ctx, run_once, warmup, blocking)
    mine = torch.tensor([time_loop(ctx, run_once, iters, blocking)], dtype=torch.float64, device=ctx.device)
    every = torch.empty(ctx.world_size, dtype=torch.float64, device=ctx.device)
    dist.all_gather_into_tensor(every, mine)
    every = every.cpu().tolist()
    return sum(every) / len(every), min(every), max(every)


def summed(ctx, value):
    """value summed over all ranks."""
    t = torch.tensor([value], dtype=torch.int64, device=ctx.device)
    dist.all_reduce(t)
    return int(t.item())


def agg_time(plan, times):
    avg, lo, hi = times
    return {"avg": avg, "min": lo, "max": hi}[plan["agg"]], lo, hi
