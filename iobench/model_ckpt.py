"""`iobench model-ckpt`: a model-shaped checkpoint (iobench.models) written and read by real torch ranks as MLPerf
Storage's checkpointing workload does: --writes checkpoints, then --reads reads of them, the cache dropped before
each read, every file fsynced; durations from each rank's own start and end, bytes proven by the mount's counter."""
import statistics

from benchcore.files import write_new_text
from benchcore.report.render import console, print_table
from iobench import bench, model_fio, moved
from iobench.ranks import run_ranks
from iobench.safety import ScratchDir, sigterm_as_interrupt

DEFAULT_WRITES = DEFAULT_READS = 10   # MLPerf Storage v2's num_checkpoints_write / _read
# checkpoint format (model_worker.FORMATS) -> the profile (and threshold group) of its records
PROFILES = {"torch-save": "{}-ckpt", "dcp": "{}-dcp"}


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


def space_needed(layout, writes, fio):
    """Every checkpoint written stays until the reads are done: writes x the layout (twice with fio's copies), 1%
    and 1 MiB for metadata."""
    return int(layout.total_bytes * 1.01 * writes * (2 if fio else 1)) + (1 << 20)


def records_from(result, target, layout, run_id, fmt="torch-save"):
    """One record per direction: the median over its checkpoints of each phase figure, the range of the aggregate,
    and bytes moved / payload; a direction the counter says a cache served reports no storage throughput."""
    payload = result["payload_bytes"]
    records = []
    for direction in ("write", "read"):
        phases = [p for p in result["phases"] if p["phase"] == direction]
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
            run_id, target, profile=PROFILES[fmt].format(layout.model), rw=direction, direction=direction,
            ckpt_format=fmt,
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
    return records


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
        nodes=None, fio=True, fmt="torch-save", intro=None):
    """The checkpoints on `processes` ranks of this node in a private directory on the mount of `path`; records.
    nodes (count, this node's rank, endpoint): node 0 makes the directory, runs the rendezvous and makes the records;
    the others' ranks write into node 0's directory (shared storage) and this returns no records there."""
    target, = bench.check_targets([path], space_needed(layout, writes, fio), run_id, writer)
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
        with bench.progress(f"iobench: {where}{layout.describe()} on {target.path}: {writes} writes, then {reads} "
                            f"reads, by {processes} torch ranks" + (" on each node" if nodes else "")):
            shared = ["--shared", scratch.shown, "--inode", scratch.inode()] if first else []
            result = run_ranks("iobench.model_worker", ["--dir", data if first else "", *shared,
                                                        "--result", result_file or "",
                                                        *worker_args(layout, writes, reads, timeout, how, fmt), *jobs],
                               processes, timeout * (writes + reads) * (2 if jobs else 1), here, result_file,
                               "model-ckpt",
                               f" (--timeout {timeout} s for each of {writes + reads} checkpoints"
                               + (" and fio's run beside each)" if jobs else ")"), nodes)
    if not first:
        bench.say(f"model-ckpt: node {nodes[1]}'s ranks finished; node 0 makes the records")
        return []
    records = [dict(r, cache_drop=how) for r in records_from(result, target, layout, run_id, fmt)]
    for rec in records:
        if writer:
            writer.write(rec)
    return records


def print_model(records):
    rows = [dict(r, label=r["rw"],
                 moved="n/a" if r.get("bytes_moved_ratio") is None else f"{r['bytes_moved_ratio']:.2f}",
                 bw=r["bw_mbps"] if r.get("bw_mbps") is not None else f"({r['served_by']})",
                 ratios=f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f}" if r.get("ratio_min") else None)
            for r in records if r.get("model")]
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
                      + (r["served_reason"] or f"only {r['bytes_moved_ratio']:.2f} of the payload reached storage"))
