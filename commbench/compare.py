"""`commbench compare` and `commbench chunked`: strategies side by side on the same payloads."""
import click
import torch

from benchcore.errors import UserError
from benchcore.report import console, line_plot, print_table
from benchcore.units import format_size, parse_size, size_list
from commbench import launch
from commbench.collectives import DTYPES
from commbench.measure import base_plan, measure_options, run_measurement
from commbench.strategies import COMPRESS, STRATEGIES

PHASES_PER_STRATEGY = {"rs-ag": 3}
STRATEGY_OPTIONS = [
    click.option("--chunk-size", "chunk_sizes", default="2M", show_default=True,
                 help="Chunk size(s) of the chunked strategy, comma list (512K,1M,2M)."),
    click.option("--threshold", default="16M", show_default=True,
                 help="Payloads above this are chunked; at or below it, one all_gather."),
    click.option("--inflight", default="1", show_default=True,
                 help="Chunk operations outstanding at once, comma list (1,2,4)."),
    click.option("--compress", type=click.Choice(list(COMPRESS)), default="bf16", show_default=True,
                 help="Wire type of the compressed strategy (fp8 = e4m3 with a per-rank scale)."),
    click.option("--place", type=click.Choice(["in", "out", "both"]), default="in", show_default=True,
                 help="rs-ag and chunked in place (result assembled in the input buffer) or out of place."),
    click.option("--plot", type=click.Path(dir_okay=False), default=None, help="busbw vs payload PNG."),
]


def strategy_options(fn):
    for option in reversed(STRATEGY_OPTIONS):
        fn = option(fn)
    return fn


def strategy_configs(names, kw, dtype):
    """The plan's strategy list: one entry per (chunk size, in-flight) for chunked."""
    chunk_sizes = size_list(kw.pop("chunk_sizes"), "--chunk-size")
    threshold = parse_size(kw.pop("threshold"), "--threshold")
    try:
        inflights = [int(x) for x in str(kw.pop("inflight")).split(",") if x.strip()]
    except ValueError:
        raise UserError("--inflight takes whole numbers, e.g. 1,2,4") from None
    compress = kw.pop("compress")
    places = {"in": [True], "out": [False], "both": [False, True]}[kw.pop("place")]
    elt = torch.empty((), dtype=DTYPES[dtype]).element_size()
    if not chunk_sizes or not inflights:
        raise UserError("--chunk-size and --inflight need at least one value")
    for chunk in chunk_sizes:
        if chunk > threshold:
            raise UserError(f"--chunk-size {format_size(chunk)} is larger than --threshold {format_size(threshold)}")
        if chunk % elt:
            raise UserError(f"--chunk-size {chunk} B is not a multiple of the {elt} B {dtype} element")
    if min(inflights) < 1:
        raise UserError(f"--inflight must be at least 1, got {min(inflights)}")
    configs = []
    for name in names:
        if name not in STRATEGIES:
            raise UserError(f"unknown strategy {name!r}; known: {', '.join(STRATEGIES)}")
        if name == "chunked":
            configs += [{"name": name, "chunk_bytes": c, "threshold": threshold, "inflight": k, "in_place": ip}
                        for c in chunk_sizes for k in inflights for ip in places]
        elif name == "rs-ag":
            configs += [{"name": name, "in_place": ip} for ip in places]
        elif name == "compressed":
            if dtype != "float32":
                raise UserError("the compressed strategy casts float32 down; use --dtype float32")
            if COMPRESS[compress] is None:
                raise UserError(f"this torch build has no {compress} type")
            configs.append({"name": name, "compress": compress})
        else:
            configs.append({"name": name})
    return configs


def label(rec):
    """A row's name: strategy, its chunk / in-flight / wire type, its phase."""
    name = rec["strategy"]
    if name == "chunked":
        name += f" {format_size(rec['chunk_bytes'])} x{rec['inflight']}"
    if name == "compressed":
        name += f" {rec['compress']}"
    if rec["strategy"] in ("rs-ag", "chunked") and rec.get("in_place") is False:
        name += " out-of-place"
    if rec.get("phase") not in (None, "total"):
        name += f" ({rec['phase']})"
    return name


def summarize(records):
    """Per payload: rows with speed-up vs ring, the winner, the best chunk configuration."""
    totals = [r for r in records if not r.get("event") and r.get("phase") == "total"]
    by_size = {}
    for rec in records:
        if not rec.get("event"):
            by_size.setdefault(rec["size_bytes"], []).append(rec)
    summary = []
    for size, recs in sorted(by_size.items()):
        ring = next((r for r in recs if r["strategy"] == "ring"), None)
        for rec in recs:
            rec["_speedup"] = ring["time_us"] / rec["time_us"] if ring and rec.get("phase") == "total" else None
        mine = [r for r in totals if r["size_bytes"] == size]
        winner = min(mine, key=lambda r: r["time_us"]) if mine else None
        chunked = [r for r in mine if r["strategy"] == "chunked"]
        best_chunk = min(chunked, key=lambda r: r["time_us"]) if chunked else None
        summary.append({"size": size, "recs": recs, "winner": winner, "best_chunk": best_chunk})
    return summary


def print_compare(records):
    out = console()
    summary = summarize(records)
    columns = [("label", "strategy", None), ("chunk", "chunk", None), ("inflight", "in-flight", None),
               ("chunks", "chunks", None),
               ("time_us", "time us", ".1f"), ("algbw_gbps", "algbw GB/s", ".3f"),
               ("busbw_gbps", "busbw GB/s", ".3f"), ("link_utilization", "link util", ".2f"),
               ("_speedup", "vs ring", ".2f"), ("wrong", "#wrong", "d")]
    extra = any(r.get("max_abs_error") is not None for r in records)
    if extra:
        columns += [("wire", "wire bytes", None), ("max_abs_error", "max abs err", ".2e"),
                    ("max_rel_error", "max rel err", ".2e")]
    for entry in summary:
        rows = [{**r, "label": label(r), "chunk": format_size(r["chunk_bytes"]) if r.get("chunk_bytes") else "",
                 "inflight": str(r["inflight"]) if r.get("inflight") else "",
                 "chunks": r.get("chunks", ""),
                 "wire": format_size(r["wire_bytes"]) if r.get("wire_bytes") else ""} for r in entry["recs"]]
        first = entry["recs"][0]
        print_table(rows, columns, title=f"payload {format_size(entry['size'])}  ({first['backend']}, "
                    f"{first['world_size']} ranks on {first['nodes']} node(s))")
    rows, previous, crossovers = [], None, []
    for entry in summary:
        win, best = entry["winner"], entry["best_chunk"]
        if win and previous and label(win) != previous:
            crossovers.append(f"{format_size(entry['size'])} ({previous} -> {label(win)})")
        previous = label(win) if win else previous
        rows.append({"size": format_size(entry["size"]), "winner": label(win) if win else "n/a",
                     "speedup": win["_speedup"] if win else None,
                     "best_chunk": format_size(best["chunk_bytes"]) if best else "n/a",
                     "best_inflight": str(best["inflight"]) if best else "n/a"})
    print_table(rows, [("size", "payload", None), ("winner", "fastest", None), ("speedup", "vs ring", ".2f"),
                       ("best_chunk", "best chunk", None), ("best_inflight", "best in-flight", None)],
                title="summary")
    out.print("crossover: " + ("; ".join(crossovers) if crossovers else "none (one strategy wins at every payload)"))


def plot(records, path):
    series = {}
    for rec in records:
        if not rec.get("event") and rec.get("phase") == "total":
            series.setdefault(label(rec), []).append((rec["size_bytes"], rec["busbw_gbps"]))
    line_plot(path, series, "payload (bytes)", "busbw (GB/s)", "commbench compare")


def run_strategies(names, fmt, out, plot_path, kw):
    spec = launch.spec_from_options(kw)
    plan = base_plan(kw, spec)
    elt = torch.empty((), dtype=DTYPES[plan["dtype"]]).element_size()
    for size in plan["sizes"]:
        if size % elt:
            raise UserError(f"payload {size} B is not a multiple of the {elt} B {plan['dtype']} element")
    plan["strategies"] = strategy_configs(names, kw, plan["dtype"])
    expected = len(plan["sizes"]) * sum(PHASES_PER_STRATEGY.get(c["name"], 1) for c in plan["strategies"])
    holder = {}
    run_measurement(spec, plan, expected, fmt, lambda recs: (holder.update(recs=recs), print_compare(recs)), out,
                    "strategies")
    if plot_path and holder.get("recs"):
        plot(holder["recs"], plot_path)


@click.command()
@click.option("--strategies", default="ring,rs-ag,chunked", show_default=True,
              help="Comma list: " + ",".join(STRATEGIES))
@strategy_options
@measure_options("1M", "1G")
@launch.launch_options
def compare(strategies, fmt, out, plot, **kw):
    """Strategies side by side on the same payloads, interleaved per size.

    Every strategy leaves each rank holding the same N-byte tensor (see
    commbench/strategies.py for what each one moves); speed-up is ring's time
    over the strategy's time at the same payload.

    \b
    Example:
      commbench compare --strategies ring,rs-ag,chunked,compressed -b 1M -e 1G --chunk-size 1M,4M
    """
    run_strategies([s.strip() for s in strategies.split(",") if s.strip()], fmt, out, plot, kw)


@click.command()
@strategy_options
@measure_options("1M", "1G")
@launch.launch_options
def chunked(fmt, out, plot, **kw):
    """Sweep the chunked all_gather's chunk size and in-flight depth, with ring as the reference.

    \b
    Example:
      commbench chunked --chunk-size 512K,1M,2M,4M,8M --threshold 16M --inflight 1,2,4 -b 1M -e 1G
    """
    run_strategies(["ring", "chunked"], fmt, out, plot, kw)
