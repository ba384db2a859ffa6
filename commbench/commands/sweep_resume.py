"""`commbench sweep --resume`: which records of --out a sweep reuses. Two sweeps are the same measurement when every
option that changes what is measured is the same (measured_options: each config run's event holds them); a
(config, round) run is settled when it completed or failed; a run cut short (killed, or interrupted by SIGTERM) runs
again, and its records are never ranked."""
import hashlib
import json

from benchcore.errors import UserError, name, shown
from benchcore.results.records import read_records
from benchcore.units import format_size

# a case config's key -> the option that sets it, and how its values read there
CONFIG_OPTIONS = {"case": ("--collective/--strategy", str), "dtype": ("-d/--dtype", str), "op": ("-o/--op", str),
                  "root": ("-r/--root", str), "in_place": ("--place", lambda v: "in" if v else "out"),
                  "chunk_bytes": ("--chunk-size", format_size), "threshold_bytes": ("--threshold", format_size),
                  "inflight": ("--inflight", str), "compress": ("--compress", str)}


def backend_of(spec):
    """The backend a sweep's launches run on: nccl, gloo or mpi (--backend auto resolved)."""
    return "mpi" if spec.backend == "mpi" else "nccl" if spec.may_use_nccl() else "gloo"


def _text(value):
    return "default" if value is None else "yes" if value is True else "no" if value is False else str(value)


def measured_options(plan, spec):
    """{option, as a user spells it: its value as text} of every option that changes what a sweep measures: sizes,
    iterations, aggregation, blocking, the case configs (dtype, op, root, case options), backend and ranks. Not
    --timeout, --repeats, --env or --matrix: a resumed sweep may wait longer, run more rounds or more configs."""
    options = {"-b/-e/-f": ",".join(format_size(s) for s in plan.sizes), "-n/--iters": plan.iters,
               "-w/--warmup": plan.warmup, "-a/--agg": plan.agg, "--blocking/-z": plan.blocking,
               "-m/--agg-iters": plan.agg_iters, "-G/--cuda-graph": plan.cuda_graph, "-C/--cpu-time": plan.cpu_time,
               "-N/--cycles": plan.cycles, "--backend": backend_of(spec), "--nodes": spec.nodes,
               "--nproc-per-node": spec.nproc_per_node}
    values = {}
    for cfg in plan.configs:
        for key, value in cfg.items():
            option, show = CONFIG_OPTIONS.get(key, (key, str))
            values.setdefault(option, set()).add("default" if value is None else show(value))
    return {**{k: _text(v) for k, v in options.items()}, **{k: ",".join(sorted(v)) for k, v in values.items()}}


def fingerprint(options):
    return hashlib.sha1(json.dumps(options, sort_keys=True).encode()).hexdigest()[:12]


def resumable(out_file, options):
    """(records of config runs that completed or failed, their (config, round) keys, a note on what was left out)
    from an earlier sweep measured with these options (measured_options); measurements of a run cut short are never
    ranked. A file that holds another sweep and none with these options is refused, naming the options that differ:
    the user meant to resume that one (rerunning it whole would spend the allocation on a measurement nobody asked
    for)."""
    fp = fingerprint(options)
    found = read_records(out_file, what="--resume: --out")
    previous = [r for r in found if r.get("sweep_fingerprint") == fp]
    others = [r for r in found if r.get("sweep_fingerprint") not in (None, fp)]
    if others and not previous:
        raise UserError(f"--resume: {name(out_file)} holds a sweep measured with other options "
                        f"({differ(others, options)}): the same options resume it; another --out starts a new sweep")
    ended = {r.get("run_id") for r in previous if r.get("event") in ("config_done", "failed")}
    settled = {(r.get("sweep_config"), r.get("repeat", 0)) for r in previous
               if r.get("event") in ("config_done", "failed")}
    cut = [r for r in previous if r.get("run_id") not in ended and not r.get("event")]
    note = ""
    if cut:
        runs = sorted({f"{r.get('sweep_config')} (round {r.get('repeat', 0)})" for r in cut})
        note = (f"; left out {len(cut)} records of {len({r.get('run_id') for r in cut})} run(s) cut short, which run "
                f"again: {', '.join(runs)}")
    return [r for r in previous if r.get("run_id") in ended and r.get("event") != "verdict"], settled, note


def differ(others, options):
    """'-a/--agg avg there, max here; ...' from the latest event of another sweep that holds its options (read from
    a file: shown escaped and short)."""
    theirs = next((r["sweep_options"] for r in reversed(others) if isinstance(r.get("sweep_options"), dict)), {})
    keys = list(options) + [k for k in theirs if k not in options]
    return "; ".join(f"{shown(k, 40)} {shown(theirs.get(k, 'unset'), 60)} there, {options.get(k, 'unset')} here"
                     for k in keys if theirs and theirs.get(k) != options.get(k))[:600] or \
        "not recorded: cut short before its first config run ended, or made by an earlier commbench"
