"""The result-record schema of both tools, built in one place (stable field names: extend, never rename).

A measurement record holds every field of its tool's DESIGN list (None where it does not
apply), in that order, then the tool's documented extensions that it has. An event record
(a failed config, a refused input, a verdict) holds the event fields plus documented
extensions. Building a record with a field that is not documented here is a programming
error (ValueError): new fields are added to these tables (or declared by a commbench case,
which extend() adds), never renamed.
"""
from benchcore.results.records import hostname, timestamp

DESIGN = {
    "commbench": ("tool", "run_id", "collective", "strategy", "size_bytes", "count", "dtype", "op", "in_place",
                  "blocking", "chunk_bytes", "time_us", "time_us_min", "time_us_max", "algbw_gbps", "busbw_gbps",
                  "wrong", "world_size", "nodes", "backend", "launcher", "env", "topology", "link_peak_gbps",
                  "link_utilization", "predicted_time_us", "hosts", "versions", "timestamp"),
    "iobench": ("tool", "run_id", "mount", "fs_type", "storage_class", "profile", "rw", "bs_bytes", "iodepth",
                "numjobs", "direct", "size_bytes", "runtime_s", "iops", "bw_mbps", "lat_mean_us", "lat_p50_us",
                "lat_p99_us", "lat_p999_us", "fio_version", "hosts", "timestamp"),
}
_COMMON = {"tool": "commbench or iobench", "run_id": "one run of a command (every record it wrote shares it)",
           "hosts": "the hosts the run measured on", "timestamp": "when the record was written (ISO 8601, UTC)",
           "size_bytes": "bytes per rank of the operation (commbench); bytes per job (iobench)"}
# What each core field means (the command reference, docs/reference/records.md, is generated from these tables)
MEANINGS = {
    "commbench": {**_COMMON, "collective": "the collective timed (all_reduce, all_gather, ...), or null",
                  "strategy": "the strategy timed (ring, rs-ag, chunked, ...), or null for a plain collective",
                  "count": "elements per rank", "dtype": "element type", "op": "reduction op (sum, ...) or null",
                  "in_place": "the output buffer is the input (nccl-tests' in-place column)",
                  "blocking": "each operation waited for before the next (nccl-tests -z)",
                  "chunk_bytes": "chunk size of a chunked strategy, or null",
                  "time_us": "time per operation, averaged over the timed iterations and combined over ranks (agg)",
                  "time_us_min": "fastest repeat's time per operation", "time_us_max": "slowest repeat's",
                  "algbw_gbps": "size_bytes / time_us (GB/s, 1e9 B/s)",
                  "busbw_gbps": "algbw times the collective's bus factor (nccl-tests' PERFORMANCE.md)",
                  "wrong": "elements that differ from the exact expected result (0: correct)",
                  "world_size": "ranks", "nodes": "nodes (emulated ones too: see emulated)",
                  "backend": "nccl, gloo or mpi", "launcher": "local, torchrun, slurm, mpirun or ssh",
                  "env": "the NCCL/Gloo/torch variables the launch set ({name: value})",
                  "topology": "the topology file judged against (its name), or null",
                  "link_peak_gbps": "the busbw that saturates the tier bounding the measurement (the model's)",
                  "link_utilization": "busbw_gbps / link_peak_gbps", "predicted_time_us": "the model's time",
                  "versions": "versions of torch, NCCL, Python and the suite"},
    "iobench": {**_COMMON, "mount": "the path measured", "fs_type": "its file system type (mountinfo)",
                "storage_class": "node-local, shared or unknown (iobench/mounts.py)",
                "profile": "the checkpoint workload (iobench profiles), or the job of a user's fio file",
                "rw": "fio's rw", "bs_bytes": "block size", "iodepth": "fio's iodepth", "numjobs": "processes",
                "direct": "O_DIRECT used", "runtime_s": "seconds measured", "iops": "I/O operations per second",
                "bw_mbps": "MB/s (1e6 B/s) the storage served", "lat_mean_us": "mean latency",
                "lat_p50_us": "median latency", "lat_p99_us": "99th percentile latency",
                "lat_p999_us": "99.9th percentile latency", "fio_version": "fio's version"},
}

# Documented extensions: field -> meaning. The fields commbench's cases add are each case's own (a Case row's
# fields, commbench/cases/): its registry documents them here with extend().
EXTENSIONS = {
    "commbench": {
        "phase": "strategy phase timed: 'total' or one step (reduce_scatter, all_gather, ...)",
        "root": "root rank of broadcast / reduce",
        "iters": "timed iterations", "warmup": "warm-up iterations", "agg": "how rank times combine (avg/min/max)",
        "local_world_size": "ranks per node",
        "emulated": "the nodes were all started on one host (no --rdzv-endpoint, Slurm allocation or host list gave "
                    "real ones): `nodes` counts emulated nodes, whose traffic never leaves the host",
        "timed_apart": "a case with phases: each phase and the total timed in loops of their own (a phase alone, back "
                       "to back, as nccl-tests times a collective), so the phases need not add up to the total, which "
                       "also holds what passes between them (a rank waiting for the next phase's peers)",
        "agg_iters": "operations per timed iteration (nccl-tests -m)",
        "time_source": "cuda_events, cuda_graph (nccl-tests -G) or cpu (perf_counter; nccl-tests -C on GPUs)",
        "command": "the command line that made the run, as typed",
        "peak_mem_bytes": "most memory any rank held so far (CPU: peak RSS; GPU: peak allocated on the device)",
        "cycle": "which pass over the sweep (nccl-tests -N), when there are several",
        "sweep_config": "sweep: the config's key", "sweep_fingerprint": "sweep: what makes two sweeps the same",
        "repeat": "which of --repeats separate measurements of this config at this size (sweep: the round)",
        "time_us_p50": "median iteration time over every iteration of every rank (per operation)",
        "time_us_p99": "99th percentile of the same", "time_cv": "their coefficient of variation (stdev / mean)",
        "others_cpu_fraction": "the share of rank 0's host's CPU time that processes other than the run's ranks took "
                               "during the timed loop (/proc/stat busy time minus every rank's on that host, over "
                               "the loop's wall time x CPUs): over 0.1, the table marks the row busy",
        "time_budget_s": "p2p --time-budget: this launch's share of the budget (start-up included); iters were "
                         "fitted to it by a calibration, whose runs (warmup) warm up",
        "slowest_rank": "the rank the others wait for: latest to reach the iterations (host clock)",
        "slowest_host": "its host", "slowest_excess": "iteration time over what the median rank alone would take",
        "outlier_ranks": "ranks consistently late beyond 3.5 robust z-scores and 5% of an iteration",
        "requested_bytes": "the size asked for; size_bytes is the size run, rounded down to what the collective "
                           "takes on world_size ranks as nccl-tests does (equal where nothing was rounded)",
        "min_bytes": "-b as requested", "max_bytes": "-e as requested", "step_factor": "-f as requested",
        "link_tier": "the tier that bounds the measurement in the model (intra-node, inter-node, or shared-memory: "
                     "MPI ranks on one node); link_peak_gbps is the busbw that saturates it",
        "link_peak_reason": "why link_peak_gbps, link_utilization and predicted_time_us are null: a tier the "
                            "measurement crosses has no ceiling (a reference rate, or none for this transport)",
        "predicted_time_reason": "why predicted_time_us is null where link_peak_gbps stands: the topology lacks "
                                 "the backend's own cost per collective call (Gloo, MPI: topo --calibrate measures it)",
        "predicted_algo": "NCCL's algorithm/protocol pick by its own tuning model (Tree/LL, Ring/Simple, ...) behind "
                          "predicted_time_us; null where NCCL's tuner does not decide (Gloo, MPI, point-to-point)",
        "effective": "what the transport reports it actually ran (commbench/evidence/); NCCL: version, cuda, net, "
                     "nics, gdr (all/some/none), pxn, channels {coll, nvls, collnet, p2p}, nvls_multicast, collnet, "
                     "mnnvl, tuner, env_read {VAR: value NCCL says it read}, choices [{collective, size_bytes range, "
                     "algo, proto, channels}]; Gloo (transport gloo): per rank its connections' interfaces, "
                     "local_addrs, peer_addrs and count, interfaces_read, read_bytes, collect_s; Open MPI (transport "
                     "mpi): pml, btl (those carrying messages between ranks), links {rank: {peer: btl}}, read, "
                     "read_bytes, collect_s, evidence; a field the output does not show is absent or 'unknown', never "
                     "guessed",
        "applied": "{VAR: {status: applied | not applied | unknown, evidence: the line that proves it or the reason}} "
                   "for each requested setting (commbench/evidence/applied.py: one row per variable says how)",
    },
    "iobench": {
        "job": "fio job name", "direction": "read / write / trim", "ioengine": "fio ioengine",
        "io_bytes": "bytes fio moved", "lat_kind": "lat (total) or clat (completion) latency",
        "fsync_lat_mean_us": "fsync latency mean", "fsync_lat_p99_us": "fsync latency P99",
        "fsync_lat_p999_us": "fsync latency P99.9", "mount_point": "mount point holding the path",
        "device": "backing device", "direct_requested": "the profile asked for O_DIRECT",
        "suite_revision": "git revision of the suite", "ckpt_format": "torch-ckpt: checkpoint format",
        "bw_gbps": "torch-ckpt before issue 39: bw_mbps / 1000 (no longer written: iobench reports MB/s only)",
        "fio_profile": "torch-ckpt: the fio profile compared with",
        "fio_bw_mbps": "torch-ckpt: that profile's median MB/s",
        "ratio_to_fio": "torch-ckpt: median bw over fio's median",
        "tensors": "torch-ckpt: tensors written", "wrong": "torch-ckpt: tensors read back wrong",
        "file_bytes": "torch-ckpt: bytes on disk", "cache_drop": "torch-ckpt: how the page cache was dropped",
        "torch_version": "torch-ckpt: torch version",
        "lat_samples": "how many I/Os the lat_* fields summarise (percentiles with too few are null)",
        "fsync_samples": "how many fsyncs the fsync_lat_* fields summarise",
        "end_fsync_s": "end_fsync jobs: mean seconds per job in the final fsync (job runtime minus its writes)",
        "files": "one-write-per-file jobs (metadata): files created, written, fsynced and closed",
        "files_per_s": "one-write-per-file jobs: files per second, all jobs together",
        "file_lat_mean_us": "one-write-per-file jobs: mean time per file in one job (create+write+fsync+close)",
        "repeats": "torch-ckpt: times each format was written and read (bw_mbps is their median)",
        "bw_mbps_min": "torch-ckpt: slowest repeat's MB/s", "bw_mbps_max": "torch-ckpt: fastest repeat's MB/s",
        "ratio_min": "torch-ckpt, model-ckpt: lowest ratio of one repeat to fio's run in the same repeat",
        "ratio_max": "torch-ckpt, model-ckpt: highest ratio of one repeat to fio's run in the same repeat",
        "repeat": "torch-ckpt: which repeat a fio reference run belongs to (it ran just before that repeat's "
                  "checkpoints)",
        "concurrent": "another iobench run measured the same mount at the same time (--concurrent)",
        "device_read_bytes": "bytes the mount's block device(s) read during the timed run (sysfs; others' I/O "
                             "counts too)",
        "device_write_bytes": "bytes the mount's block device(s) wrote during the timed run (sysfs; others' I/O too)",
        "model": "model-ckpt: the model whose checkpoint was written (llama3-8b, ...)",
        "tp": "model-ckpt: tensor parallel degree", "pp": "model-ckpt: pipeline parallel degree",
        "dp": "model-ckpt: data parallel degree", "zero": "model-ckpt: ZeRO stage",
        "scale": "model-ckpt: every file's size over the full model's (1: full size)",
        "layout_ranks": "model-ckpt: ranks of the layout (TP x PP x DP); numjobs: the processes that wrote them",
        "duration_s": "model-ckpt: the slowest rank's seconds for one checkpoint (median over the checkpoints); "
                      "null when not storage",
        "duration_s_max": "model-ckpt: the slowest rank's seconds in the slowest checkpoint",
        "min_rank_mbps": "model-ckpt: the lowest rank throughput (median over the checkpoints); null when not storage",
        "cache_mbps": "model-ckpt: the aggregate MB/s of a phase a cache served (bytes_moved_ratio below 0.9), "
                      "never reported as bw_mbps",
        "per_host_mbps": "model-ckpt: per host, its bytes over its first start to last end (median)",
        "bytes_moved_ratio": "bytes the mount's counter saw move in that direction / the payload (median)",
        "served_by": "storage (moved >= 0.9 of the payload), cache (below), unproven (no counter: byte_counter says "
                     "why)",
        "byte_counter": "what counted the bytes moved (block device, NFS client, ceph-fuse client) or why none did",
        "served_reason": "why no counter could prove the bytes moved",
        "torch_cpu_s": "model-ckpt: the slowest rank's torch.save (write) or torch.load (read) of its files to or from "
                       "memory, no storage (serialisation, checksums, allocation), timed once beside the run",
        "fio_moved_ratio": "model-ckpt: bytes the counter saw during fio's same run / fio's bytes (median)",
        "save_mode": "model-ckpt --save-mode: sync, async-thread or async-process (torch.distributed.checkpoint's "
                     "save, async_save with a background thread or process); the figures below are medians over its "
                     "checkpoints of the worst rank's (training waits for the slowest)",
        "blocked_s": "save mode: seconds from the save call until training resumes (sync: the whole save)",
        "staging_s": "save mode: seconds copying the state out for the background save (async; null for sync)",
        "background_s": "save mode: seconds from the save call until its last byte is written and fsynced",
        "durable_s": "save mode: seconds from the save call until every file and the directory are fsynced",
        "step_s": "save mode: the training-like step's undisturbed seconds (a GEMM, step_n; median before and after)",
        "steps_during": "save mode: steps that ran while the background save went on (fewest over ranks)",
        "step_rate_during": "save mode: their rate over the undisturbed rate (1: no slowdown; lowest rank)",
        "step_s_during": "save mode: their mean seconds", "step_lost_s": "save mode: step time lost beside the save",
        "cost_s": "save mode: what one checkpoint costs training: blocked_s + step_lost_s",
        "cost_s_max": "save mode: the costliest checkpoint's cost_s",
        "first_save_s": "save mode: the untimed first save's seconds (the process mode starts its process then)",
        "step_n": "save mode: the step GEMM's n (n x n by n x n)", "step_flops": "save mode: a step's flops (2 n^3)",
        "step_device": "save mode: where the step ran (cpu, cuda)", "plan_cache": "save mode: DCP plan caching on",
        "staging": "save mode: where the state was staged (pinned memory with CUDA, host memory otherwise)",
        "mtbf_h": "save mode: the job's mean time between failures (hours) the interval is planned for",
        "mtbf_source": "save mode: where mtbf_h comes from (--mtbf, or the public failure record it is scaled from)",
        "interval_s": "save mode: Young's checkpoint interval sqrt(2 x cost_s x MTBF), at least background_s",
        "training_lost": "save mode: share of training lost at that interval: cost / interval + (interval / 2 + "
                         "not-yet-durable time + restart) / MTBF",
        "restart_s": "model-ckpt --restart-ranks: seconds from starting the ranks to their first step after loading "
                     "the latest checkpoint (cache dropped)", "restart_ranks": "model-ckpt: ranks that restarted",
        "restart_wrong": "model-ckpt: tensors the restart loaded that differ from what was saved",
        "step_trace": "save mode: [seconds from the save call, step seconds] of rank 0's steps around its last "
                      "checkpoint (at most 400, evenly spaced): model-ckpt --plot draws them",
    },
}

EVENT = ("tool", "run_id", "event", "reason", "hosts", "timestamp")
EVENT_EXTENSIONS = {
    "commbench": {"sweep_config": "", "sweep_fingerprint": "", "config_env": "the swept variables",
                  "applied": "not_applied (sweep): {VAR: {status, evidence}} of the config's settings, their worst run",
                  "sweep_options": "sweep: {option: value} of every option that changes what the sweep measures "
                                   "(what --resume must share with the records it reuses)",
                  "seconds": "how long it ran", "check": "verdict: which check", "passed": "verdict: outcome",
                  "topology": "judge verdict: the system judged against (its rows: model_gbps, ceiling_gbps, "
                              "references, placement per size)",
                  "rate_bps": "selftest link: the shaped rate", "ceiling_fraction": "selftest link: TCP ceiling",
                  "pass_range": "selftest link: accepted fraction of the ceiling", "rows": "verdict: per-size rows",
                  "cycles": "selftest verdict: the -N cycles measured (the first with which the check passes "
                            "ends them)",
                  "repeat": "sweep: the round",
                  "winner": "verdict: the faster config (null: no significant difference)",
                  "versus": "verdict: what the winner beat", "ratio": "verdict: winner's time / the other's",
                  "ratio_low": "verdict: 95% interval, low end", "ratio_high": "verdict: 95% interval, high end",
                  "sizes": "verdict, same_operations: payloads it holds for", "method": "verdict: the statistics used",
                  "equivalent": "verdict: configs that ran the same operations (never ranked)",
                  "config": "same_operations: a config not measured at sizes, since it runs the same operations as "
                            "measured_by (with its backend)",
                  "measured_by": "same_operations: the config measured for it (its rows stand for both)",
                  "tied": "verdict: configs with no significant difference",
                  "beats_from_bytes": "chunked verdict: payload from which chunking beats ring and plain",
                  "no_difference_sizes": "chunked verdict: payloads where nothing is significantly better",
                  "ranks": "hang: every rank's position (what, step, operations entered/left) and state (inside the "
                           "operation waiting on a peer, outside it: never entered, silent: no heartbeat)",
                  "env": "hang: the NCCL/Gloo environment in effect",
                  "bad_nodes": "pairs verdict: hosts whose links are slow everywhere",
                  "bad_links": "pairs verdict: [host, peer] pairs slow while both ends are fine elsewhere",
                  "matrix": "pairs verdict: {host: {peer: sendrecv busbw GB/s}}",
                  "accused": "pairs verdict: per bad node ({node}) or link ({link: [host, peer]}) its evidence: "
                             "pairings, peers, busbw_gbps, median_ratio (to the median link), healthy_busbw_gbps, "
                             "confidence (0-1)",
                  "node_verdicts": "pairs verdict: [{host, passed, reason}] for every node measured",
                  "healthy_busbw_gbps": "pairs verdict: the median link of the random rounds",
                  "link_noise": "pairs verdict: relative spread of the links between known-good nodes (1.4826 MAD)",
                  "suspects": "pairs verdict: nodes the confirm pass retested",
                  "cleared": "pairs verdict: suspects the confirm pass found fine",
                  "untested": "pairs verdict: suspects with no known-good node left to test against",
                  "repeats": "time_budget: the repeats per size the budget holds (from its calibration pass)",
                  "time_budget_s": "time_budget: this launch's share of --time-budget, start-up included"},
    "iobench": {"mount": "the path refused or failed"},
}


def _unknown(tool, fields, allowed):
    extra = [k for k in fields if k not in allowed]
    if extra:
        raise ValueError(f"{tool} record field(s) not in benchcore.results.schema: {', '.join(extra)}")


_FIELDS = {}     # tool -> its measurement fields, made at its first record after the last extend()


def extend(tool, fields):
    """Document the measurement fields (field -> meaning) a part of tool declares; ValueError for a DESIGN field or
    one documented with another meaning."""
    for name, meaning in fields.items():
        if name in DESIGN[tool] or EXTENSIONS[tool].get(name, meaning) != meaning:
            raise ValueError(f"{tool} record field {name} is documented already")
    EXTENSIONS[tool].update(fields)
    _FIELDS.pop(tool, None)


def measurement(tool, **fields):
    """A measurement record of tool: DESIGN fields first (None where absent), then extensions."""
    design = DESIGN[tool]
    if tool not in _FIELDS:
        _FIELDS[tool] = set(design) | set(EXTENSIONS[tool])
    _unknown(tool, fields, _FIELDS[tool])
    rec = {key: fields.get(key) for key in design}
    rec["tool"] = tool
    rec.update((k, v) for k, v in fields.items() if k not in rec)
    return rec


def event(tool, kind, reason, run_id=None, **fields):
    """A non-measurement record: a failure, a refusal, a verdict."""
    _unknown(tool, fields, set(EVENT) | set(EVENT_EXTENSIONS[tool]))
    return {"tool": tool, "run_id": run_id, "event": kind, "reason": reason, "hosts": [hostname()],
            "timestamp": timestamp(), **fields}


def problems(record):
    """Why record does not follow the schema (empty when it does)."""
    tool = record.get("tool")
    if tool not in DESIGN:
        return [f"unknown tool {tool!r}"]
    if record.get("event"):
        allowed, required = set(EVENT) | set(EVENT_EXTENSIONS[tool]), EVENT
    else:
        allowed, required = set(DESIGN[tool]) | set(EXTENSIONS[tool]), DESIGN[tool]
    out = [f"missing {k}" for k in required if k not in record]
    out += [f"undocumented {k}" for k in record if k not in allowed]
    return out


# Foreign results (`import`, benchcore.foreign): where each record came from; on both tools' measurements and events.
IMPORTED = {"source_file": "import: the file the record was read from",
            "source_format": "import: nccl-tests (also rccl-tests), nccl-tests-json (-J), rccl-tests-json or "
                             "rccl-tests-csv (-Z json|csv), or fio-json",
            "source_line": "import: 1-based line of the row (nccl-tests) or of the job (fio JSON) in source_file"}
EXTENSIONS["commbench"].update(IMPORTED, check_error="import: nccl-tests before #wrong: the row's largest absolute "
                                                     "error (its 'error'/'res' column), not a count")
EXTENSIONS["iobench"].update(IMPORTED, interrupted="import: fio said 'terminating on signal' (a run cut short)")
EVENT_EXTENSIONS["commbench"].update(IMPORTED, collective="import: the collective of the table cut short or failed")
EVENT_EXTENSIONS["iobench"].update(IMPORTED, job="import: the fio job that ended with an error")

# Any record written (benchcore.results.records.dumps): a value that was not a finite number is written null and named.
for _tool in ("commbench", "iobench"):
    EXTENSIONS[_tool]["nonfinite"] = EVENT_EXTENSIONS[_tool]["nonfinite"] = \
        "the fields written null because their value was NaN or infinite (e.g. an imported '1e999')"

# Cluster acceptance (commbench accept, commbench/commands/accept/): every record of a check says which one made it;
# a check's outcome is a verdict event (check, passed, seconds, rows: one per threshold).
ACCEPT = {"accept_check": "accept: the spec's check that made this record"}
for _tool in DESIGN:
    EXTENSIONS[_tool].update(ACCEPT)
    EVENT_EXTENSIONS[_tool].update(ACCEPT)

# The verdict of chunked --overlap (commbench/commands/overlap.py).
EVENT_EXTENSIONS["commbench"].update(
    compute_ratio="chunked --overlap verdict: the compute ratio the answer holds for (null with --gemm)")

# A node's health (commbench node, commbench/health/): a "health" event per line of its tables, then a verdict event.
EVENT_EXTENSIONS["commbench"].update(
    subject="node health: what the line is about (node, GPU 0, mlx5_0:1)",
    item="node health: the check (commbench/health/checks.py)", value="node health: what was read, as shown",
    health="node health: ok, warn, fail or unknown", threshold="node health: the check's threshold",
    source="node health: where the threshold comes from (file and version)",
    level="node health: quick (no load, seconds) or full (a load on every GPU)")
EXTENSIONS["commbench"]["gpu_health"] = (
    "the GPUs beside the measurement (commbench/health/beside.py; where NVML is): interval_s, seconds, nodes: {host: "
    "per GPU [{gpu, samples, throttle: {reason: share of samples}, temp_peak_c, power_peak_w, xids, pcie, pcie_max, "
    "pcie_replays, nvlink_down, nvlink_errors}]}, causes: what may have slowed it")
