"""`commbench model`: the alpha-beta model's predictions for a topology without running anything, and
alpha and beta per tier fitted to measured records (commbench/model/alphabeta.py has the formulas)."""

import math

import click

from benchcore import inputs
from benchcore.errors import UserError, refuse_given
from benchcore.inputs import shown
from benchcore.report.render import console, print_table
from benchcore.results import usable
from benchcore.results.records import dumps, read_records
from benchcore.units import format_size, parse_size, size_range
from commbench.cases.case import TOTAL, ReadOptions, check_steps, label, refuse_unread, work_key
from commbench.cases.collectives import DTYPES
from commbench.cases.registry import CASES, case_of, parse_names, record_label
from commbench.commands.options import CaseOptionsText, case_options, given_fields, overlap_options
from commbench.commands.overlap import model_rows
from commbench.model.alphabeta import fit_row, predict
from commbench.model.detect import detect, in_effect
from commbench.model.topology import MAX_RANKS, OVERSUBSCRIBE, layout_problem, resolve


def configs(names, opts):
    """{label: config} of each case; placements and types left out (the model does not tell them apart)."""
    out = {}
    for name in names:
        for cfg in CASES[name].configs(opts, "float32"):
            cfg = {**cfg, "dtype": "float32", "op": "sum", "root": 0, "in_place": True}
            out.setdefault(label(CASES[name], cfg), cfg)
    return out


def predictions(topo, names, sizes, nodes, local, backend, opts):
    """One row per (size, case config): the model's time and busbw, the tier that bounds it and its peak."""
    if nodes * local < 2:
        raise UserError("one rank moves no data: the model needs 2 or more ranks (--nodes, --nproc-per-node)")
    for cfg in configs(names, opts).values():
        check_steps(CASES[cfg["case"]], cfg, sizes, DTYPES[cfg["dtype"]].bytes, nodes * local)
    rows = []
    for size in sizes:
        for name, cfg in configs(names, opts).items():
            pred = predict(CASES[cfg["case"]], cfg, size, topo, nodes * local, nodes, backend)[TOTAL]
            plain = _runs_plain(cfg, size, nodes * local)
            ok = pred.reason is None and pred.time_us is not None   # else n/a, and the reason says why
            rows.append({"case": name + (" (= plain)" if plain else ""), "strategy": cfg["case"], "size_bytes": size,
                         "size": format_size(size), "runs_plain": plain, "nccl_algo": pred.algo,
                         "predicted_time_us": pred.time_us, "algbw_gbps": size / pred.time_us / 1e3 if ok else None,
                         "busbw_gbps": pred.busbw_gbps, "link_tier": pred.tier, "link_peak_gbps": pred.peak_gbps,
                         "link_utilization": pred.busbw_gbps / pred.peak_gbps if ok else None,
                         **({"link_peak_reason": pred.reason} if pred.reason else {}),
                         **({"predicted_time_reason": pred.time_reason} if pred.time_reason else {}),
                         "chunk_bytes": cfg.get("chunk_bytes"),
                         "inflight": cfg.get("inflight")})
    return rows


def _runs_plain(cfg, size, n):
    """Whether a chunked config runs exactly what plain runs at size (one all_gather, at or below its threshold):
    the same work (commbench/cases/case.py: work_key), which compare's verdicts never rank."""
    if cfg["case"] != "chunked":
        return False
    plain, elt = {**cfg, "case": "plain", "chunk_bytes": 1, "threshold_bytes": math.inf}, DTYPES[cfg["dtype"]].bytes
    return work_key(CASES["chunked"], cfg, size, n, elt) == work_key(CASES["plain"], plain, size, n, elt)


def summary(rows):
    """Per size: the fastest case, the chunked configuration the model picks, and whether it beats ring. A chunked
    config that runs plain all_gather there is never credited as chunked: it is reported as plain."""
    out = []
    for size in dict.fromkeys(r["size_bytes"] for r in rows):
        mine = [r for r in rows if r["size_bytes"] == size]
        chunked = [r for r in mine if r["strategy"] == "chunked" and not r["runs_plain"]]
        pick = min(chunked, key=lambda r: r["predicted_time_us"]) if chunked else None
        ring = next((r for r in mine if r["strategy"] == "ring"), None)
        as_plain = any(r["runs_plain"] for r in mine)
        out.append({"size": format_size(size), "fastest": min(mine, key=lambda r: r["predicted_time_us"])["case"],
                    "chunked_pick": pick["case"] if pick else "= plain (at or below its threshold)" if as_plain else "",
                    "chunked_vs_ring": (ring["predicted_time_us"] / pick["predicted_time_us"]
                                        if pick and ring else None)})
    return out


BACKENDS = ("nccl", "gloo")
TIME_US = (1e-3, 1e12)      # a nanosecond to eleven days: outside, a record is not a timing the fit can use


def _unfit(rec):
    """Why a measured record cannot be fitted (None: it can)."""
    why = usable.shape_flaw(rec)
    if why:
        return why
    name = rec.get("strategy") or rec.get("collective")
    checks = [(name in CASES, f"unknown collective or strategy {shown(repr(name), 40)}"),
              (rec.get("backend") in BACKENDS, f"backend is {shown(repr(rec.get('backend')), 40)}, "
                                               f"not {' or '.join(BACKENDS)}"),
              (isinstance(rec.get("size_bytes"), int) and rec["size_bytes"] > 0, "no size_bytes > 0"),
              (isinstance(rec.get("world_size"), int) and 1 <= rec["world_size"] <= MAX_RANKS,
               f"world_size not in 1..{MAX_RANKS}"),
              (isinstance(rec.get("nodes"), int) and 1 <= rec["nodes"] <= (rec.get("world_size") or 0),
               "nodes not in 1..world_size"),
              (usable.usable(rec["time_us"]) and TIME_US[0] <= rec["time_us"] <= TIME_US[1],
               f"time_us {shown(repr(rec['time_us']), 40)} is not between {TIME_US[0]:g} and {TIME_US[1]:g}")]
    return next((why for ok, why in checks if not ok), None)


def fit(records, topo, what="--fit"):
    """alpha (us) and beta per tier from measured records, by least squares on relative error, and the
    fitted time of every record. Each measured phase fits the tier that bounds it in `topo`; a strategy's
    total (a sum of phases on different tiers) is left out. A record that cannot be a timing of a known case
    (_unfit) is skipped with a warning."""
    import numpy as np  # here: only --fit needs it
    rows = []
    measured = [r for r in records if isinstance(r, dict) and not r.get("event") and r.get("time_us") is not None
                and not r.get("wrong")]
    for rec in usable.sound(measured, what, _unfit):
        case, phase = case_of(rec), rec.get("phase") or TOTAL
        if case.model is None or (len(case.phases) > 1 and phase == TOTAL):
            continue
        got = fit_row(case, rec, rec["size_bytes"], topo, rec["world_size"], rec["nodes"], rec["backend"], phase)
        if got and got[2] > 0:
            rows.append({"rec": rec, "tier": got[0], "steps": got[1], "bytes": got[2], "time_us": rec["time_us"]})
    tiers = {}
    for tier in dict.fromkeys(r["tier"] for r in rows):
        mine = [r for r in rows if r["tier"] == tier]
        if len({r["bytes"] for r in mine}) < 2:
            raise UserError(f"--fit: the {tier} tier has measurements at fewer than 2 sizes; fitting alpha and beta "
                            "needs a size sweep")
        a = np.array([[r["steps"] / r["time_us"], r["bytes"] / r["time_us"]] for r in mine])
        try:
            (alpha, beta), *_ = np.linalg.lstsq(a, np.ones(len(mine)), rcond=None)
        except np.linalg.LinAlgError as exc:
            raise UserError(f"{what}: the {tier} tier's least-squares fit failed ({exc})") from None
        if alpha < 0:  # latency below what the sizes resolve: a bandwidth-only fit
            alpha, beta = 0.0, float(np.sum(a[:, 1]) / np.sum(a[:, 1] ** 2))
        elif beta <= 0:  # bandwidth below what the sizes resolve (all latency-bound): a latency-only fit
            alpha, beta = float(np.sum(a[:, 0]) / np.sum(a[:, 0] ** 2)), 0.0
        tiers[tier] = {"tier": tier, "alpha_us": float(alpha), "gbps": 1e-3 / float(beta) if beta else None,
                       "points": len(mine)}
        for r in mine:
            r["fitted_us"] = alpha * r["steps"] + beta * r["bytes"]
            r["error"] = r["fitted_us"] / r["time_us"] - 1
    return list(tiers.values()), rows


def _topology(text):
    if text:
        return resolve(text)
    return in_effect(detect()["fields"])


@click.command("model")
@click.option("--topology", default=None, metavar="FILE|NAME", help="Topology file or name [default: detected here].")
@click.option("--nodes", type=click.IntRange(1), default=1, show_default=True)
@click.option("--nproc-per-node", type=click.IntRange(1), default=None,
              help="Ranks per node [default: the topology's GPUs per node, 2 for CPU nodes].")
@click.option("--collective", "collectives", default=None, help="Comma list of collectives [default: all_reduce].")
@click.option("--strategies", default=None, help="Comma list of strategies (ring,chunked,...) instead of collectives.")
@click.option("--overlap", "patterns", default=None, metavar="PATTERNS",
              help="Overlap patterns (ddp,pipelined,pipelined-rs) instead: communication beside compute of "
                   "--compute-ratio x its time, each pattern's schedule replayed (see commbench overlap).")
@overlap_options()
@click.option("-b", "--min-bytes", default="1M", show_default=True)
@click.option("-e", "--max-bytes", default="8G", show_default=True)
@click.option("-f", "--step-factor", type=int, default=2, show_default=True)
@click.option("--backend", type=click.Choice(["nccl", "gloo", "mpi"]), default=None,
              help="Transport whose primitives the model uses [default: nccl on GPU nodes, gloo on CPU ones].")
@case_options()
@click.option("--fit", "fit_file", default=None, metavar="RESULTS.jsonl",
              help="Fit alpha and beta per tier to these records instead of predicting.")
@click.option(OVERSUBSCRIBE, "oversubscribe", is_flag=True,
              help="Ranks share GPUs: more ranks per node than the topology's GPUs per node.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
def model(topology, nodes, nproc_per_node, collectives, strategies, patterns, min_bytes, max_bytes, step_factor,
          backend, fit_file, oversubscribe, fmt, **case_kw):
    """Predict collective and strategy times from a topology, without running anything; or fit the model.

    Every phase costs steps x alpha + bytes x beta on the tier that bounds it (formulas and sources in
    commbench/model/alphabeta.py). For strategies, the summary says which is fastest per size, which chunk size
    the model picks for chunked and how it compares with ring.

    \b
    Example:
      commbench model --topology dgx-h100 --nodes 4 --collective all_reduce -b 1M -e 8G
      commbench model --topology dgx-h100 --nodes 4 --strategies ring,chunked --chunk-size 512K,2M,8M --threshold 64M
      commbench model --topology dgx-h100 --nodes 2 --overlap ddp,pipelined -b 64M -e 4G -f 4 --compute-ratio 1
      commbench model --fit results.jsonl
    """
    if fit_file:
        refuse_given(["nodes", "nproc_per_node", "collectives", "strategies", "patterns", "min_bytes", "max_bytes",
                      "step_factor", "backend", "oversubscribe", *case_kw],
                     "not with --fit, which fits the model to the records' "
                     "own sizes and cases (--topology names the tiers)")
    # the model takes every config in place, and sizes compute as --compute-ratio x its predicted communication
    refuse_given(["place", "gemm", "compute_kernel", "compute_threads"], "the model does not tell it apart "
                 "(it predicts in place, and compute as --compute-ratio x the predicted communication)")
    topo = _topology(topology)
    if fit_file:
        return _print_fit(fit_file, topo, fmt)
    if sum(map(bool, (collectives, strategies, patterns))) > 1:
        raise UserError("give one of --collective, --strategies and --overlap")
    names = (parse_names(strategies, "strategy", "--strategies") if strategies else
             parse_names(collectives or "all_reduce", "collective", "--collective"))
    local = nproc_per_node or topo.gpus_per_node or 2
    why = layout_problem(topo, nodes * local, nodes, oversubscribe)
    if why:
        raise UserError(f"--nodes {nodes} x --nproc-per-node {local}: {why}")
    sizes = size_range(parse_size(min_bytes, "-b/--min-bytes"), parse_size(max_bytes, "-e/--max-bytes"), step_factor)
    opts = ReadOptions(CaseOptionsText(**case_kw).parse())
    backend = backend or ("nccl" if topo.gpus_per_node else "gloo")
    if patterns:
        names = parse_names(patterns, "overlap", "--overlap")
        rows = model_rows(topo, names, sizes, nodes, local, backend, opts)
        refuse_unread(opts, [CASES[n] for n in names], given_fields())
        return _print_rows(rows, OVERLAP_COLUMNS, f"model of overlap: {topo.name}, {nodes} node(s) x {local} ranks, "
                           f"{backend}; compute = ratio x the communication's predicted time", topo, nodes, local,
                           backend, fmt)
    rows = predictions(topo, names, sizes, nodes, local, backend, opts)
    refuse_unread(opts, [CASES[n] for n in names], given_fields())
    if fmt == "json":
        for row in rows:
            click.echo(dumps({"topology": topo.name, "nodes": nodes, "world_size": nodes * local,
                              "backend": backend, **{k: v for k, v in row.items() if k != "size"}}))
        return
    print_table([{**r, "label": r["case"].replace(" (= plain)", " *")} for r in rows],   # a name never wraps
                [("size", "size", None), ("label", "case", None), ("predicted_time_us", "time us", ".1f"),
                 ("algbw_gbps", "algbw GB/s", ".2f"), ("busbw_gbps", "busbw GB/s", ".2f"),
                 ("link_tier", "bound by", None), ("link_peak_gbps", "peak GB/s", ".2f"),
                 ("link_utilization", "of peak", ".2f"), ("nccl_algo", "NCCL picks", None)],
                title=f"model: {topo.name}, {nodes} node(s) x {local} ranks, {backend}", compact=True)
    reasons = dict.fromkeys(r.get("link_peak_reason") or r["predicted_time_reason"] for r in rows
                            if r.get("link_peak_reason") or r.get("predicted_time_reason"))
    for why in reasons:
        console().print(f"n/a: {why}")
    if strategies and not reasons:
        print_table(summary(rows), [("size", "size", None), ("fastest", "fastest", None),
                                    ("chunked_pick", "chunked: model's pick", None),
                                    ("chunked_vs_ring", "ring / chunked time", ".2f")], title="summary")
        beats = [r["size"] for r in summary(rows) if (r["chunked_vs_ring"] or 0) > 1]
        if any(r["strategy"] == "chunked" for r in rows) and any(r["strategy"] == "ring" for r in rows):
            console().print(f"chunked (its best configuration) beats ring at: {', '.join(beats)}" if beats else
                            "chunked never beats ring here")
        plain = [format_size(s) for s in dict.fromkeys(r["size_bytes"] for r in rows if r["runs_plain"])]
        if plain:
            console().print(f"* chunked runs plain all_gather (at or below its threshold) at: {', '.join(plain)}")


OVERLAP_COLUMNS = [("size", "size", None), ("label", "pattern", None), ("comm_us", "comm us", ".1f"),
                   ("compute_us", "compute us", ".1f"), ("overlapped_us", "overlapped us", ".1f"),
                   ("exposed_comm_us", "exposed us", ".1f"), ("overlap_efficiency", "efficiency", ".3f")]


def _print_rows(rows, columns, title, topo, nodes, local, backend, fmt):
    if fmt == "json":
        for row in rows:
            click.echo(dumps({"topology": topo.name, "nodes": nodes, "world_size": nodes * local,
                              "backend": backend, **{k: v for k, v in row.items() if k != "size"}}))
        return
    print_table(rows, columns, title=title)
    for why in dict.fromkeys(r["link_peak_reason"] for r in rows if r.get("link_peak_reason")):
        console().print(f"n/a: {why}")


def _print_fit(path, topo, fmt):
    inputs.regular_file(path, "--fit")
    tiers, rows = fit(read_records(path, tool="commbench", what="--fit"), topo, f"--fit {inputs.name(path)}")
    if not rows:
        raise UserError(f"--fit {inputs.name(path)}: no measurement records the model covers")
    if fmt == "json":
        for t in tiers:
            click.echo(dumps(t))
        return
    print_table(tiers, [("tier", "tier", None), ("alpha_us", "alpha us/step", ".2f"), ("gbps", "1/beta GB/s", ".4f"),
                        ("points", "records", "d")], title=f"alpha-beta fit ({topo.name} names the tiers)")
    shown = [{"label": record_label(r["rec"]), "size": format_size(r["rec"]["size_bytes"]), "tier": r["tier"],
              "time_us": r["time_us"], "fitted_us": r["fitted_us"], "error": r["error"] * 100} for r in rows]
    print_table(shown, [("label", "case", None), ("size", "size", None), ("tier", "tier", None),
                        ("time_us", "measured us", ".1f"), ("fitted_us", "fitted us", ".1f"),
                        ("error", "error %", "+.1f")], title="fit per size")
