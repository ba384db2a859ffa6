"""model-ckpt --save-mode's output: the modes side by side per mount (what training felt of each), the interval each
affords (iobench.interval), the published anchors beside them (iobench.anchors), and the plot of step time across a
save (the dip a training dashboard shows)."""
import os

from benchcore.report import figures
from benchcore.report.render import console, print_table
from iobench import anchors


def mode_rows(records):
    return [r for r in records if r.get("save_mode")]


def print_modes(records):
    rows = mode_rows(records)
    out = console()
    for mount in dict.fromkeys(r["mount"] for r in rows):
        mine = [dict(r, lost_pct=100 * r["training_lost"] if r.get("training_lost") is not None else None,
                     interval_min=r["interval_s"] / 60 if r.get("interval_s") else None,
                     rate=f"{r['step_rate_during']:.2f}" if r.get("step_rate_during") is not None else "n/a",
                     bw=r["bw_mbps"] if r.get("bw_mbps") is not None else f"({r['served_by']})")
                for r in rows if r["mount"] == mount]
        first = mine[0]
        print_table(mine, [("save_mode", "save mode", None), ("blocked_s", "blocked s", ".3f"),
                           ("staging_s", "staging s", ".3f"), ("background_s", "to last byte s", ".3f"),
                           ("durable_s", "to durable s", ".3f"), ("steps_during", "steps during", "g"),
                           ("rate", "step rate during", None), ("step_lost_s", "step time lost s", ".3f"),
                           ("cost_s", "cost s", ".3f"), ("bw", "MB/s to last byte", ",.0f"),
                           ("bytes_moved_ratio", "moved x", ".2f")],
                    title=f"save modes on {mount}: {first['model']} {first['size_bytes'] / 1e6:,.0f} MB by "
                          f"{first['numjobs']} ranks, medians of {first['repeats']} checkpoints (worst rank each)")
        print_table(mine, [("save_mode", "save mode", None), ("cost_s", "cost s", ".3f"),
                           ("mtbf_h", "job MTBF h", ",.0f"), ("interval_min", "checkpoint every min", ",.1f"),
                           ("lost_pct", "training lost %", ".3f")],
                    title=f"the checkpoint interval {mount} affords (Young: sqrt(2 x cost x MTBF))")
        out.print(f"MTBF: {first['mtbf_source']}; training lost = cost / interval + (interval / 2 + the time the save "
                  f"was not yet durable after training resumed + restart) / MTBF; the interval is never shorter "
                  f"than the background save")
        out.print(f"step: a {first['step_n']} x {first['step_n']} GEMM on {first['step_device']} "
                  f"({first['step_flops'] / 1e6:,.0f} MFLOP); staging: "
                  + "; ".join(f"{r['save_mode']}: {r['staging']}" for r in mine)
                  + f"; plan caching {'on' if first['plan_cache'] else 'off'}; each mode's first save untimed ("
                  + ", ".join(f"{r['save_mode']} {r['first_save_s']:.2f} s" for r in mine) + ")")
        cores = os.cpu_count() or 1
        slow = [r for r in mine if r.get("step_rate_during") is not None]
        if first["step_device"] == "cpu" and slow:
            out.print(f"{first['numjobs']} ranks stepping on {cores} CPU cores: a background save's writer takes its "
                      f"cores from the steps, which ran at "
                      + ", ".join(f"{r['step_rate_during']:.2f} ({r['save_mode']})" for r in slow)
                      + " of their undisturbed rate while it ran; on a GPU node the steps run on the GPU and the "
                        "writer on host cores")
        for r in records:
            if r.get("restart_ranks") and r["mount"] == mount:
                out.print(f"restart: the latest checkpoint ({mine[-1]['save_mode']}'s, saved by {first['numjobs']} "
                          f"ranks as whole tensors) loaded by {r['restart_ranks']} fresh rank(s), each holding its rows of every "
                          f"tensor (DCP reshards), the cache dropped: "
                          f"{r['restart_s']:.2f} s from starting torchrun to the first step, every one of "
                          f"{r['tensors']} tensors compared ({r['restart_wrong']} wrong); the load served by "
                          f"{r['served_by']}" + (f" ({r['bytes_moved_ratio']:.2f} of its bytes)"
                                                 if r.get("bytes_moved_ratio") is not None else "")
                          + (": a client cache held it (dcp.load reads through it), so this restart is faster than "
                             "one on another node" if r["served_by"] == "cache" else ""))
    sync = {r["mount"]: r["blocked_s"] for r in rows if r["save_mode"] == "sync"}
    ours = [{"anchor": f"this run on {r['mount']}: {r['save_mode']}", "sync_s": sync.get(r["mount"]),
             "blocked_s": r["blocked_s"], "background_s": r["background_s"],
             "ratio": sync[r["mount"]] / r["blocked_s"] if r["mount"] in sync and r["blocked_s"] else None,
             "source": "measured here"} for r in rows if r["save_mode"] != "sync"]
    print_table(anchors.rows() + ours, [("anchor", "published anchor", None), ("sync_s", "sync save s", ",.2f"),
                                        ("blocked_s", "async blocked s", ",.2f"),
                                        ("background_s", "async background s", ",.1f"),
                                        ("ratio", "sync / blocked", ",.1f"), ("source", "source", None)],
                title="beside published checkpoints (not scaled: each at full size on its own GPUs and storage; "
                      "the ratio carries over, the seconds do not)")


def step_figure(records):
    """Step seconds against seconds from the save call, one series per mode and mount (rank 0's last checkpoint):
    the dip a training dashboard shows while a save runs."""
    plt = figures.pyplot()
    fig, ax = plt.subplots(figsize=(11, 5.5))
    for r in mode_rows(records):
        trace = r.get("step_trace") or []
        ax.plot([t for t, _ in trace], [s * 1e3 for _, s in trace], marker=".", linewidth=0.8,
                label=f"{r['save_mode']} on {r['mount']}")
        if r.get("background_s"):
            ax.axvline(r["background_s"], linestyle=":", linewidth=0.8, color=ax.lines[-1].get_color())
    ax.axvline(0, color="grey", linewidth=0.8)
    ax.set(xlabel="seconds from the save call (dotted: its last byte)", ylabel="step ms",
           title="step time across a checkpoint save (rank 0, the last checkpoint of each mode)")
    ax.grid(True, alpha=0.3)
    figures.legend_beside(ax)
    return fig


def step_plot(path, records):
    figures.save(step_figure(records), path)
