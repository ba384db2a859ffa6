"""The program every rank runs (launched by torchrun): `python -m commbench.worker --plan JSON`.

Rank 0 appends one record per measurement to the plan's output file, flushed
per record. Errors end the rank with one `commbench-worker:` line on stderr,
which the launching command shows to the user. Exit 3 means wrong results.
"""
import argparse
import gc
import json
import os
import sys

import torch
import torch.distributed as dist

from benchcore.records import RecordWriter, hostname
from commbench.collectives import COLLECTIVES, DTYPES, OPS, ROOT, fill_values, pattern
from commbench.context import Context, agg_time, measure, summed
from commbench.liveness import Liveness
from commbench.strategies import inflight_groups, measure_strategy

EXIT_WRONG = 3


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


def run_plan(ctx, writer, progress=lambda n: None):
    """Every (size, collective, placement) or (size, strategy) of the plan; returns the total wrong count."""
    plan, wrong = ctx.plan, 0
    if plan.get("strategies"):
        groups = inflight_groups(ctx, plan)
        for size in plan["sizes"]:
            for cfg in plan["strategies"]:  # interleaved per size: drift hits every strategy alike
                recs = measure_strategy(ctx, cfg, size, groups)
                for rec in recs:
                    wrong += rec["wrong"] or 0
                    if writer:
                        writer.write(rec)
                progress(len(recs))
        return wrong
    for size in plan["sizes"]:
        for name in plan["collectives"]:
            for place in COLLECTIVES[name].placements:
                if place not in plan["places"]:
                    continue
                rec = measure_collective(ctx, name, size, place)
                wrong += rec["wrong"] or 0
                if writer:
                    writer.write(rec)
                progress(1)
    return wrong


def main(argv=None):
    parser = argparse.ArgumentParser(prog="commbench.worker")
    parser.add_argument("--plan", required=True, help="JSON plan written by the commbench CLI")
    plan = json.loads(parser.parse_args(argv).plan)
    rank = os.environ.get("RANK", "?")
    code = 0
    live = Liveness(hostname())  # heartbeats from before the process group exists
    try:
        ctx = Context(plan)
        if os.environ.get("COMMBENCH_TEST_EXIT_RANK") == str(ctx.rank):
            os._exit(17)  # test-only fault hook: a rank that dies after start-up
        record_node = os.environ.get("COMMBENCH_RECORD_NODE", "1") == "1"
        writer = RecordWriter(plan["out"]) if record_node and ctx.local_rank == 0 else None
        try:
            code = EXIT_WRONG if run_plan(ctx, writer, live.progress) else 0
        finally:
            if writer:
                writer.close()
    except Exception as exc:  # one line for the user; the launcher shows it
        for line in live.diagnose():  # first the peer behind it, when one stopped beating
            print(f"commbench-worker: {line}", file=sys.stderr, flush=True)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        first = first.split(" This is typically caused")[0]  # Gloo's boilerplate
        print(f"commbench-worker: rank {rank} on {hostname()}: {type(exc).__name__}: {first}",
              file=sys.stderr, flush=True)
        code = 1
    finally:
        live.close(code)
        if dist.is_initialized():
            try:
                dist.destroy_process_group()
            except Exception:  # a dead peer may leave nothing to tear down
                pass
        gc.collect()
    sys.exit(code)


if __name__ == "__main__":
    main()
