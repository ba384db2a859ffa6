"""`commbench compare` and `commbench chunked`: strategies side by side on the same payloads."""
import click

from benchcore.errors import UserError
from benchcore.report import console, line_plot, print_table
from benchcore.units import format_size
from commbench import launch
from commbench.case import TOTAL
from commbench.plan import case_options, measure_options
from commbench.registry import STRATEGY_NAMES, parse_names, record_label
from commbench.runner import measure

PLOT_OPTION = click.option("--plot", type=click.Path(dir_okay=False), default=None, help="busbw vs payload PNG.")

def summarize(records, baseline):
    """Per payload: rows with speed-up vs the baseline strategy, the winner, the best chunk configuration."""
    totals = [r for r in records if not r.get("event") and r.get("phase") == TOTAL]
    by_size = {}
    for rec in records:
        if not rec.get("event"):
            by_size.setdefault(rec["size_bytes"], []).append(rec)
    summary = []
    for size, recs in sorted(by_size.items()):
        base = next((r for r in recs if r["strategy"] == baseline and r.get("phase") == TOTAL), None)
        for rec in recs:
            rec["_speedup"] = base["time_us"] / rec["time_us"] if base and rec.get("phase") == TOTAL else None
        mine = [r for r in totals if r["size_bytes"] == size]
        winner = min(mine, key=lambda r: r["time_us"]) if mine else None
        chunked = [r for r in mine if r.get("chunk_bytes")]
        best_chunk = min(chunked, key=lambda r: r["time_us"]) if chunked else None
        summary.append({"size": size, "recs": recs, "winner": winner, "best_chunk": best_chunk})
    return summary


def print_compare(records, baseline="ring"):
    out = console()
    summary = summarize(records, baseline)
    columns = [("label", "strategy", None), ("chunk", "chunk", None), ("inflight", "in-flight", None),
               ("chunks", "chunks", None),
               ("time_us", "time us", ".1f"), ("algbw_gbps", "algbw GB/s", ".3f"),
               ("busbw_gbps", "busbw GB/s", ".3f"), ("link_utilization", "link util", ".2f"),
               ("_speedup", f"vs {baseline}", ".2f"), ("wrong", "#wrong", "d")]
    extra = any(r.get("max_abs_error") is not None for r in records)
    if extra:
        columns += [("wire", "wire bytes", None), ("max_abs_error", "max abs err", ".2e"),
                    ("max_rel_error", "max rel err", ".2e")]
    for entry in summary:
        rows = [{**r, "label": record_label(r), "chunk": format_size(r["chunk_bytes"]) if r.get("chunk_bytes") else "",
                 "inflight": str(r["inflight"]) if r.get("inflight") else "",
                 "chunks": r.get("chunks", ""),
                 "wire": format_size(r["wire_bytes"]) if r.get("wire_bytes") else ""} for r in entry["recs"]]
        first = entry["recs"][0]
        print_table(rows, columns, title=f"payload {format_size(entry['size'])}  ({first['backend']}, "
                    f"{first['world_size']} ranks on {first['nodes']} node(s))")
    rows, previous, crossovers = [], None, []
    for entry in summary:
        win, best = entry["winner"], entry["best_chunk"]
        if win and previous and record_label(win) != previous:
            crossovers.append(f"{format_size(entry['size'])} ({previous} -> {record_label(win)})")
        previous = record_label(win) if win else previous
        rows.append({"size": format_size(entry["size"]), "winner": record_label(win) if win else "n/a",
                     "speedup": win["_speedup"] if win else None,
                     "best_chunk": format_size(best["chunk_bytes"]) if best else "n/a",
                     "best_inflight": str(best["inflight"]) if best else "n/a"})
    print_table(rows, [("size", "payload", None), ("winner", "fastest", None), ("speedup", f"vs {baseline}", ".2f"),
                       ("best_chunk", "best chunk", None), ("best_inflight", "best in-flight", None)],
                title="summary")
    out.print("crossover: " + ("; ".join(crossovers) if crossovers else "none (one strategy wins at every payload)"))


def plot(records, path):
    series = {}
    for rec in records:
        if not rec.get("event") and rec.get("phase") == TOTAL:
            series.setdefault(record_label(rec), []).append((rec["size_bytes"], rec["busbw_gbps"]))
    line_plot(path, series, "payload (bytes)", "busbw (GB/s)", "commbench compare")


def run_strategies(names, baseline, kw):
    measure(names, kw, lambda recs: print_compare(recs, baseline), "strategies", plot)


@click.command()
@click.option("--strategies", default="ring,rs-ag,chunked", show_default=True,
              help="Comma list: " + ",".join(STRATEGY_NAMES))
@click.option("--baseline", default="ring", show_default=True, help="Strategy the speed-up is measured against.")
@case_options()
@PLOT_OPTION
@measure_options("1M", "1G")
@launch.launch_options
def compare(strategies, baseline, **kw):
    """Strategies side by side on the same payloads, interleaved per size.

    Every strategy leaves each rank holding the same N-byte tensor (see
    commbench/strategies.py for what each one moves); speed-up is the baseline's
    time over the strategy's time at the same payload.

    \b
    Example:
      commbench compare --strategies ring,rs-ag,chunked,compressed -b 1M -e 1G --chunk-size 1M,4M
      commbench compare --strategies ring,hierarchical --nodes 2 --nproc-per-node 2 -b 1M -e 256M
    """
    names = parse_names(strategies, "strategy", "--strategies")
    if baseline not in names:
        raise UserError(f"--baseline {baseline} is not one of --strategies {','.join(names)}")
    run_strategies(names, baseline, kw)


@click.command()
@case_options()
@PLOT_OPTION
@measure_options("1M", "1G")
@launch.launch_options
def chunked(**kw):
    """Sweep the chunked all_gather's chunk size and in-flight depth, with ring as the reference.

    \b
    Example:
      commbench chunked --chunk-size 512K,1M,2M,4M,8M --threshold 16M --inflight 1,2,4 -b 1M -e 1G
    """
    run_strategies(["ring", "chunked"], "ring", kw)
