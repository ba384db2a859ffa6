"""`iobench model-ckpt`: a model-shaped checkpoint (iobench.models) written and read by real torch ranks as MLPerf
Storage's checkpointing workload does: --writes checkpoints, then --reads reads of them, the cache dropped before
each read, every file fsynced; durations from each rank's own start and end, bytes proven by the mount's counter."""
import statistics
import time
from dataclasses import dataclass

from benchcore.errors import UserError
from benchcore.files import write_new_text
from benchcore.report.render import console, print_table
from iobench import bench, interval, model_fio, modes_table, moved, savemodes
from iobench.ranks import run_ranks
from iobench.safety import ScratchDir, sigterm_as_interrupt

DEFAULT_WRITES = DEFAULT_READS = 10   # MLPerf Storage v2's num_checkpoints_write / _read
# checkpoint format (model_worker.FORMATS) -> the profile (and threshold group) of its records
PROFILES = {"torch-save": "{}-ckpt", "dcp": "{}-dcp"}


@dataclass(frozen=True)
class SaveModes:
    """--save-mode's modes (iobench.savemodes), each --writes times after an untimed first save; plan caching; the
    step GEMM's n; the job's MTBF in hours for the interval (iobench.interval)."""
    names: tuple
    plan_cache: bool
    step: int
    mtbf_h: float
    mtbf_source: str
    restart_ranks: int = 0    # restart the latest checkpoint on this many ranks after the writes (0: none)

    def args(self):
        return ["--save-modes", ",".join(self.names), "--step", self.step] + (["--plan-cache"] if self.plan_cache
                                                                                else [])


def save_modes(text, fmt, nodes, plan_cache, step, mtbf_h, layout, restart_ranks=None):
    """--save-mode's SaveModes, or None without it; one line for what cannot run."""
    if text is None:
        if step or mtbf_h or restart_ranks:
            raise UserError("--step, --mtbf and --restart-ranks are --save-mode's: give --save-mode")
        return None
    names = savemodes.parse_modes(text)
    if fmt != "dcp":
        raise UserError("--save-mode measures torch.distributed.checkpoint's saves: give --ckpt-format dcp")
    if nodes > 1:
        raise UserError("--save-mode runs on one node (its step loop and restart are this node's)")
    if mtbf_h is not None and not 0 < mtbf_h <= 1e7:
        raise UserError(f"--mtbf must be hours above 0 (at most 1e7), got {mtbf_h:g}")
    source = f"--mtbf {mtbf_h:g} h" if mtbf_h else f"{layout.ranks} GPUs at {interval.MTBF_SOURCE}"
    return SaveModes(tuple(names), plan_cache, step or savemodes.DEFAULT_STEP,
                     mtbf_h or interval.job_mtbf_h(layout.ranks), source, restart_ranks or 0)


# per checkpoint, over its ranks: training waits for its slowest rank, so the worst rank's figure is the checkpoint's
FELT = {"blocked_s": max, "staging_s": max, "background_s": max, "step_lost_s": max, "cost_s": max, "step_s": max,
        "steps_during": min, "step_rate_during": min, "step_s_during": max}


def felt(phases, modes, restart_s=None):
    """The save-mode figures of one mode's write records: medians over its checkpoints of the worst rank's, time to
    durable, and the interval they afford (iobench.interval)."""
    per = [{k: (how(v) if (v := [r[k] for r in p["felt"] if r[k] is not None]) else None) for k, how in FELT.items()}
           for p in phases]
    out = {k: statistics.median(v) if (v := [c[k] for c in per if c[k] is not None]) else None for k in FELT}
    out["durable_s"] = statistics.median(p["durable_s"] for p in phases)
    out["cost_s_max"] = max(c["cost_s"] for c in per)
    afford = interval.plan(out["cost_s"], modes.mtbf_h * 3600, out["background_s"],
                           max(0.0, out["durable_s"] - out["blocked_s"]), restart_s or 0.0)
    return {**out, "mtbf_h": modes.mtbf_h, "mtbf_source": modes.mtbf_source,
            **({"interval_s": afford["interval_s"], "training_lost": afford["training_lost"]} if afford else {})}


def aggregate(ranks):
    """Figures of one phase from each rank's (start, end, bytes, host): the slowest rank's duration, the lowest rank
    throughput, and the aggregate: every byte over the span from the first start to the last end (never a sum of
    rates); per host the same span figure over its own ranks."""
    span = max(r[1] for r in ranks) - min(r[0] for r in ranks)
    total = sum(r[2] for r in ranks)
    hosts = {}
    for start, end, nbytes, host in ranks:
        hosts.setdefault(host, []).append((start, end, nbytes))
    return {"duration_s": max(r[1] - r[0] for r in ranks), "span_s": span,
            "min_rank_mbps": min(r[2] / (r[1] - r[0]) / 1e6 for r in ranks if r[2]),
            "aggregate_mbps": total / span / 1e6,
            "per_host_mbps": {h: sum(x[2] for x in rs) / (max(x[1] for x in rs) - min(x[0] for x in rs)) / 1e6
                              for h, rs in hosts.items()}}


TRACE_POINTS = 400     # steps a record's step_trace keeps (evenly spaced over rank 0's last checkpoint)


def mode_fields(feel, mode):
    """What a save mode's record says of how it ran: the step, staging, plan caching, the first save's seconds, and
    rank 0's step times across its last checkpoint."""
    trace = feel["traces"].get(mode, [])
    every = -(-len(trace) // TRACE_POINTS) or 1
    return {"step_n": feel["step_n"], "step_flops": feel["step_flops"], "step_device": feel["step_device"],
            "plan_cache": feel["plan_cache"], "staging": feel["staging"][mode],
            "first_save_s": feel["first_save_s"][mode],
            "step_trace": [[round(t, 4), round(s, 6)] for t, s, _ in trace[::every]]}


def space_needed(layout, writes, fio, modes=0):
    """Every checkpoint written stays until the reads are done: writes x the layout (twice with fio's copies; with
    `modes` save modes, each one's and the first save of one), 1% and 1 MiB for metadata."""
    count = writes * max(1, modes) + (1 if modes else 0)
    return int(layout.total_bytes * 1.01 * count * (2 if fio else 1)) + (1 << 20)


def records_from(result, target, layout, run_id, fmt="torch-save", modes=None, restarted=None):
    """One record per direction (writes: per save mode): the median over its checkpoints of each phase figure, the
    range of the aggregate, and bytes moved / payload; a direction the counter says a cache served reports no storage
    throughput; a save mode's write also what training felt (felt())."""
    payload = result["payload_bytes"]
    records = []
    for direction, mode in dict.fromkeys((p["phase"], p.get("mode")) for p in result["phases"]):
        phases = [p for p in result["phases"] if p["phase"] == direction and p.get("mode") == mode]
        if not phases:
            continue
        figures = [aggregate(p["ranks"]) for p in phases]
        ratios = [p["moved"]["bytes"] / payload for p in phases if "bytes" in p["moved"]]
        served, ratio = moved.verdict(statistics.median(ratios) * payload if ratios else None, payload,
                                      memory=any("memory" in p["moved"] for p in phases))
        reason = next((p["moved"].get("reason") or p["moved"].get("memory") for p in phases
                       if "bytes" not in p["moved"]), None)
        counted = served in ("storage", "unproven")   # a cache's or memory's speed is never the storage's
        bw = statistics.median(f["aggregate_mbps"] for f in figures)
        hosts = sorted({r[3] for p in phases for r in p["ranks"]})
        fio = [p["fio"]["bytes"] / p["fio"]["seconds"] / 1e6 if p.get("fio") and p["fio"]["seconds"] else None
               for p in phases]
        paired = [f["aggregate_mbps"] / b for f, b in zip(figures, fio) if b]
        fio_moved = [p["fio"]["moved"]["bytes"] / p["fio"]["bytes"] for p in phases
                     if p.get("fio") and "bytes" in p["fio"]["moved"] and p["fio"]["bytes"]]
        records.append(bench.record(
            run_id, target, profile=PROFILES[fmt].format(layout.model) + (f"-{mode}" if mode else ""), rw=direction,
            direction=direction, ckpt_format=fmt,
            **({"save_mode": mode, **felt(phases, modes, restarted and restarted["restart_s"]),
                **mode_fields(result["feel"], mode)} if mode else {}),
            model=layout.model, tp=layout.tp, pp=layout.pp, dp=layout.dp, zero=layout.zero, scale=layout.scale,
            layout_ranks=layout.ranks, numjobs=result["world_size"], files=result["files"], size_bytes=payload,
            repeats=len(phases), duration_s=statistics.median(f["duration_s"] for f in figures) if counted else None,
            duration_s_max=max(f["duration_s"] for f in figures) if counted else None,
            min_rank_mbps=statistics.median(f["min_rank_mbps"] for f in figures) if counted else None,
            bw_mbps=bw if counted else None, cache_mbps=None if counted else bw,
            bw_mbps_min=min(f["aggregate_mbps"] for f in figures),
            bw_mbps_max=max(f["aggregate_mbps"] for f in figures),
            per_host_mbps={h: statistics.median(f["per_host_mbps"][h] for f in figures) for h in hosts},
            bytes_moved_ratio=ratio, served_by=served, byte_counter=result["counter"],
            served_reason=reason,
            wrong=sum(p["wrong"] for p in phases), torch_version=result["torch_version"],
            torch_cpu_s=result["cpu_s"][direction],
            **({"fio_profile": "model-ckpt-fio", "fio_bw_mbps": statistics.median(b for b in fio if b),
                "ratio_to_fio": statistics.median(paired), "ratio_min": min(paired), "ratio_max": max(paired),
                "fio_moved_ratio": statistics.median(fio_moved) if fio_moved else None} if paired else {})))
    if restarted:
        records.append(restart_record(restarted, target, layout, run_id, result))
    return records


def restart(here, data, layout, modes, writes, timeout):
    """The latest checkpoint (the last mode's last write: model_worker's ckpt-MODE-INDEX) loaded by a fresh torchrun
    of modes.restart_ranks ranks (iobench.restart_worker), timed from before torchrun starts to their first step."""
    latest = data / f"ckpt-{modes.names[-1]}-{writes - 1}"
    result = here / "restart.json"
    return run_ranks("iobench.restart_worker",
                     ["--dir", latest, "--result", result, "--t0", repr(time.time()), "--model", layout.model,
                      "--tp", layout.tp, "--pp", layout.pp, "--dp", layout.dp, "--zero", layout.zero,
                      "--scale", repr(layout.scale), "--step", modes.step, "--timeout", timeout],
                     modes.restart_ranks, timeout, here, result, "model-ckpt's restart", f" (--timeout {timeout} s)")


def restart_record(res, target, layout, run_id, result):
    """The restart's record: its seconds to the first step, the load's, every tensor compared, the bytes moved."""
    served, ratio = moved.verdict(res["moved"].get("bytes"), res["bytes"], memory="memory" in res["moved"])
    counted = served in ("storage", "unproven")
    return bench.record(
        run_id, target, profile=f"{layout.model}-dcp-restart", rw="read", direction="read", ckpt_format="dcp",
        model=layout.model, tp=layout.tp, pp=layout.pp, dp=layout.dp, zero=layout.zero, scale=layout.scale,
        layout_ranks=layout.ranks, numjobs=res["world_size"], size_bytes=res["bytes"], repeats=1,
        restart_s=res["restart_s"], restart_ranks=res["world_size"], restart_wrong=res["wrong"], wrong=res["wrong"],
        tensors=res["tensors"], duration_s=res["load_s"] if counted else None,
        bw_mbps=res["bytes"] / res["load_s"] / 1e6 if counted and res["load_s"] else None,
        cache_mbps=None if counted or not res["load_s"] else res["bytes"] / res["load_s"] / 1e6,
        bytes_moved_ratio=ratio, served_by=served, byte_counter=res["counter"],
        served_reason=res["moved"].get("reason") or res["moved"].get("memory"),
        torch_version=result["torch_version"])


def cache_drop(target, drop):
    """How a read gets past the caches on this mount (the record's cache_drop)."""
    if not drop:
        return "none (--no-drop)"
    if target.mount.fs_type in moved.DIRECT_READ_FS:
        return "O_DIRECT read (the client's own cache, which posix_fadvise does not drop)"
    return "posix_fadvise DONTNEED on every node"


def worker_args(layout, writes, reads, timeout, how, fmt):
    """The worker's arguments: it computes the same layout on every node."""
    return ["--format", fmt, "--model", layout.model, "--tp", layout.tp, "--pp", layout.pp, "--dp", layout.dp,
            "--zero", layout.zero, "--scale", repr(layout.scale), "--writes", writes, "--reads", reads,
            "--timeout", timeout] + \
        (["--no-drop"] if how.startswith("none") else ["--direct-read"] if how.startswith("O_DIRECT") else [])


def run(path, layout, processes, writes, reads, timeout, keep, writer, run_id, sharing=bench.Sharing(), drop=True,
        nodes=None, fio=True, fmt="torch-save", intro=None, modes=None):
    """The checkpoints on `processes` ranks of this node in a private directory on the mount of `path`; records.
    nodes (count, this node's rank, endpoint): node 0 makes the directory, runs the rendezvous and makes the records;
    the others' ranks write into node 0's directory (shared storage) and this returns no records there."""
    count = len(modes.names) if modes else 0
    target, = bench.check_targets([path], space_needed(layout, writes, fio, count), run_id, writer)
    saves = writes * max(1, count) + count     # each mode's first save is one more
    if intro:   # what will run, once the mount is known to take it
        bench.say(intro)
    first = not nodes or nodes[1] == 0
    stack, _ = bench.locks([target], run_id, sharing)
    where = f"node {nodes[1]} of {nodes[0]}, " if nodes else ""
    how = cache_drop(target, drop)
    # every node's own private directory on the mount, held (iobench.safety): node 0's holds the checkpoints, the
    # fio job files and the result; another node's only its torchrun's files
    with stack, sigterm_as_interrupt(), ScratchDir(target.path, run_id if first else f"{run_id}-node{nodes[1]}",
                                                   keep) as scratch:
        here = scratch.path
        data = here / "checkpoints"
        result_file = here / "result.json" if first else None
        jobs = []
        if first:
            data.mkdir(mode=0o700)
            for direction in ("write", "read") if fio else ():
                jobs += [f"--fio-{direction}", here / f"fio-{direction}.fio"]
                write_new_text(jobs[-1], model_fio.job_text(layout, processes, direction, how.startswith("O_DIRECT"),
                                                           fmt), "fio job file")
        each = f" in each of {count} save modes" if count else ""
        steps = ["--progress", here / "progress", "--progress-after", int(bool(modes and modes.restart_ranks))] \
            if first else []
        with bench.progress(f"iobench: {where}{layout.describe()} on {target.path}: {writes} writes{each}, then "
                            f"{reads} reads, by {processes} torch ranks" + (" on each node" if nodes else ""),
                            unit="checkpoint" + (" and its fio run" if jobs else ""),
                            follow=here / "progress" if first else None) as shown:
            shared = ["--shared", scratch.shown, "--inode", scratch.inode()] if first else []
            result = run_ranks("iobench.model_worker", ["--dir", data if first else "", *shared,
                                                        "--result", result_file or "", *steps,
                                                        *worker_args(layout, writes, reads, timeout, how, fmt), *jobs,
                                                        *(modes.args() if modes else [])],
                               processes, timeout * (saves + reads) * (2 if jobs else 1), here, result_file,
                               "model-ckpt",
                               f" (--timeout {timeout} s for each of {saves + reads} checkpoints"
                               + (" and fio's run beside each)" if jobs else ")"), nodes)
            if modes and modes.restart_ranks:
                shown.step(len(shown.weights) - 1, f"restart: the latest checkpoint loaded by {modes.restart_ranks} "
                                                   f"fresh rank{'s' * (modes.restart_ranks != 1)}, then a step")
            restarted = restart(here, data, layout, modes, writes, timeout) if modes and modes.restart_ranks else None
    if not first:
        bench.say(f"model-ckpt: node {nodes[1]}'s ranks finished; node 0 makes the records")
        return []
    records = [dict(r, cache_drop=how) for r in records_from(result, target, layout, run_id, fmt, modes, restarted)]
    for rec in records:
        if writer:
            writer.write(rec)
    return records


def _shown(r):
    """A model-ckpt record as its table row: a figure no storage made (memory, a cache) shows its served_by, and its
    ratio to fio's 'n/a' (two memory figures' ratio says nothing of storage)."""
    row = dict(r, label="restart" if r.get("restart_ranks") else r["rw"] + (f" {r['save_mode']}" if r.get("save_mode")
                                                                           else ""),
               moved="n/a" if r.get("bytes_moved_ratio") is None else f"{r['bytes_moved_ratio']:.2f}",
               bw=r["bw_mbps"] if r.get("bw_mbps") is not None else f"({r['served_by']})",
               ratios=f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f}" if r.get("ratio_min") else None)
    if r.get("bw_mbps") is None and r.get("ratio_to_fio") is not None:
        row.update(ratio_to_fio="n/a", ratios="n/a")
    return row


def print_model(records):
    rows = [_shown(r) for r in records if r.get("model")]
    first = rows[0] if rows else {}
    print_table(rows, [("label", "phase", None), ("duration_s", "slowest rank s", ".2f"),
                       ("torch_cpu_s", "torch CPU s", ".2f"),
                       ("min_rank_mbps", "min rank MB/s", ",.0f"), ("bw", "aggregate MB/s", ",.0f"),
                       ("fio_bw_mbps", "fio MB/s", ",.0f"),
                       ("ratio_to_fio", "x fio", ".2f"), ("ratios", "x fio range", None),
                       ("moved", "moved x", ".2f"), ("served_by", "served by", None), ("wrong", "#wrong", "d")],
                title=f"{first['model']} checkpoint: {first['size_bytes'] / 1e6:,.0f} MB in {first['files']} files by "
                      f"{first['numjobs']} ranks, on {first['mount']}, medians of {first['repeats']} checkpoints"
                if rows else "model checkpoint")
    out = console()
    for r in rows[:1]:
        out.print(f"layout: TP={r['tp']} PP={r['pp']} DP={r['dp']} ZeRO-{r['zero']}, {r['layout_ranks']} layout ranks "
                  f"written by {r['numjobs']} processes, scale {r['scale']:g}; aggregate = all bytes over first start "
                  f"to last end; fio: the same files, sizes and processes, each file "
                  f"fsynced at close, just before each checkpoint; x fio: aggregate over fio's median (range: per "
                  f"checkpoint); torch CPU s: the slowest rank's torch.save (load) of its files to (from) memory "
                  f"(also for dcp), "
                  f"no storage: what torch adds to the I/O fio does; moved x = bytes counted / the payload, by: "
                  f"{r['byte_counter']} (below {moved.MIN_MOVED}: a cache served it, and no storage figure is given)")
    for r in rows:
        if r.get("served_reason") or r["served_by"] == "cache":
            out.print(f"{r['rw']}: no storage throughput: "
                      + (r["served_reason"] or f"only {r['bytes_moved_ratio']:.2f} of the payload reached storage")
                      + ("; x fio: n/a (both figures are of " + ("memory" if r["served_by"] == "memory" else "a cache")
                         + ", not storage)" if r.get("ratio_to_fio") == "n/a" else ""))
    if modes_table.mode_rows(records):
        modes_table.print_modes(records)
