"""The program every rank runs (launched by torchrun): `python -m commbench.worker --plan JSON`.

Rank 0 appends one record per measurement to the plan's output file, flushed
per record. Errors end the rank with one `commbench-worker:` line on stderr,
which the launching command shows to the user. Exit 3 means wrong results.
"""
import argparse
import datetime
import gc
import json
import os
import platform
import sys
import time

import torch
import torch.distributed as dist

from benchcore.records import RecordWriter, git_revision, hostname, timestamp
from commbench.collectives import COLLECTIVES, DTYPES, OPS, ROOT, fill_values, pattern

ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_")
EXIT_WRONG = 3


class Context:
    """Process group, device and the facts every record carries."""

    def __init__(self, plan):
        self.plan = plan
        backend = plan["backend"]
        if backend == "auto":
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl" and not torch.cuda.is_available():
            raise RuntimeError("--backend nccl needs CUDA, and this rank sees no GPU")
        if backend == "nccl" and plan.get("strategy") == "ring":
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


def count_wrong(result, regions, dtype, device):
    """Elements of `result` that differ from the expected regions (offset, length, values, start)."""
    flat = result.reshape(-1)
    wrong = 0
    for offset, length, values, start in regions:
        want = pattern(values, start, length, dtype, device)
        wrong += int((flat[offset:offset + length] != want).sum().item())
    return wrong


def buffers(coll, place, count, ctx, dtype):
    """(send, recv) tensors; in place they share storage as nccl-tests' in-place variants do."""
    n, rank = ctx.world_size, ctx.rank
    send_n, recv_n = coll.counts(count, n)
    empty = lambda k: torch.empty(k, dtype=dtype, device=ctx.device)  # noqa: E731
    if place == "out":
        return empty(send_n), empty(recv_n)
    if coll.send_piece:
        recv = empty(recv_n)
        return recv[rank * send_n:(rank + 1) * send_n], recv
    if coll.recv_piece:
        send = empty(send_n)
        return send, send[rank * recv_n:(rank + 1) * recv_n]
    buf = empty(count)
    return buf, buf


def measure_collective(ctx, name, size, place):
    """One nccl-tests row: time the collective, then check it on fresh data."""
    plan, coll = ctx.plan, COLLECTIVES[name]
    dtype = DTYPES[plan["dtype"]]
    op_name = plan["op"]
    count = size // torch.empty((), dtype=dtype).element_size()
    send, recv = buffers(coll, place, count, ctx, dtype)
    vals = lambda r: fill_values(r, ctx.world_size, dtype)  # noqa: E731
    refill = lambda: send.copy_(pattern(vals(ctx.rank), 0, send.numel(), dtype, ctx.device))  # noqa: E731
    op = OPS[op_name]
    run_once = lambda async_op: coll.run(send, recv, op, async_op)  # noqa: E731
    refill()
    t, t_min, t_max = agg_time(plan, measure(ctx, run_once, plan["iters"], plan["warmup"], ctx.blocking))
    wrong = None
    if plan["check"]:
        refill()
        run_once(False)
        if ctx.device.type == "cuda":
            torch.cuda.synchronize()
        if os.environ.get("COMMBENCH_TEST_CORRUPT") == name and ctx.rank == ROOT:
            recv.reshape(-1)[0] += 1  # test-only fault hook: proves the check catches a bad element
        mine = count_wrong(recv, coll.expected(ctx.rank, ctx.world_size, count, op_name, vals), dtype, ctx.device)
        wrong = summed(ctx, mine)
    algbw = size / t / 1e9
    return ctx.record(collective=name, size_bytes=size, count=count, dtype=plan["dtype"],
                      op=op_name if name in ("all_reduce", "reduce", "reduce_scatter") else None,
                      root=ROOT if name in ("broadcast", "reduce") else None,
                      in_place=place == "in", blocking=ctx.blocking, time_us=t * 1e6,
                      time_us_min=t_min * 1e6, time_us_max=t_max * 1e6, algbw_gbps=algbw,
                      busbw_gbps=algbw * coll.bus_factor(ctx.world_size), wrong=wrong,
                      iters=plan["iters"], warmup=plan["warmup"], agg=plan["agg"])


def run_plan(ctx, writer):
    """Every (size, collective, placement) of the plan; returns the total wrong count."""
    plan, wrong = ctx.plan, 0
    for size in plan["sizes"]:
        for name in plan["collectives"]:
            for place in COLLECTIVES[name].placements:
                if place not in plan["places"]:
                    continue
                rec = measure_collective(ctx, name, size, place)
                wrong += rec["wrong"] or 0
                if writer:
                    writer.write(rec)
    return wrong


def main(argv=None):
    parser = argparse.ArgumentParser(prog="commbench.worker")
    parser.add_argument("--plan", required=True, help="JSON plan written by the commbench CLI")
    plan = json.loads(parser.parse_args(argv).plan)
    rank = os.environ.get("RANK", "?")
    code = 0
    try:
        ctx = Context(plan)
        record_node = os.environ.get("COMMBENCH_RECORD_NODE", "1") == "1"
        writer = RecordWriter(plan["out"]) if record_node and ctx.local_rank == 0 else None
        try:
            code = EXIT_WRONG if run_plan(ctx, writer) else 0
        finally:
            if writer:
                writer.close()
    except Exception as exc:  # one line for the user; the launcher shows it
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        print(f"commbench-worker: rank {rank} on {hostname()}: {type(exc).__name__}: {first}",
              file=sys.stderr, flush=True)
        code = 1
    finally:
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # a dead peer may leave nothing to tear down
                pass
        gc.collect()
    sys.exit(code)


if __name__ == "__main__":
    main()
