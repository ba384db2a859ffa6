"""Reports label what they show: a strategy's phases, cycles and repeats are columns, its phases separate series
(repeats pooled), the model is one line per phase, the peak line says which peak, each threshold sits on the axis of
the field it bounds, storage's legends never cover bars and its baseline bars are hatched (issue 25 items 9 and 18)."""
from matplotlib.container import ErrorbarContainer
from matplotlib.transforms import Bbox

from benchcore.report import page, plots
from benchcore.results import schema

PHASES = {"reduce_scatter": 0.5, "all_gather": 0.5, "total": 1.0}
SIZES = (1 << 18, 1 << 20, 1 << 22)


def rsag(repeats=2):
    """rs-ag's records as the worker writes them: three phases per size and repeat, the model per phase."""
    out = []
    for repeat in range(repeats):
        for size in SIZES:
            for phase, share in PHASES.items():
                t = share * size / 1e3 * (1 + 0.1 * repeat)
                out.append(schema.measurement(
                    "commbench", run_id="r1", strategy="rs-ag", phase=phase, repeat=repeat,
                    size_bytes=size, dtype="float32", op="sum", in_place=True, world_size=2, nodes=1, time_us=t,
                    algbw_gbps=size / t / 1e3, busbw_gbps=size / t / 1e3, wrong=0, topology="localhost",
                    link_tier="intra-node", link_peak_gbps=1.6, predicted_time_us=share * size / 1.6e3))
    return out


def test_phases_and_repeats_are_columns_and_one_run_is_no_column():
    (section,) = page.sections(page.compared(rsag())[0])
    caption, columns, rows = section.tables[0]
    keys = [k for k, _, _ in columns]
    assert "phase" in keys and "repeat" in keys and "run" not in keys and caption == "run r1"
    assert len(rows) == 2 * 3 * len(SIZES)
    assert {(r["size_bytes"], r["phase"], r["repeat"]) for r in rows} == \
        {(s, p, k) for s in SIZES for p in PHASES for k in range(2)}
    md = page.markdown(page.Doc("t", sections=[section]))
    assert "| 256K | all_gather | float32 | sum | in | 2 | 1 | 131.07 |" in md


def lines(ax):
    """Every labelled line of ax, a measured series' data line included (an errorbar's)."""
    out = {line.get_label(): line for line in ax.get_lines() if not line.get_label().startswith("_")}
    return {**out, **{c.get_label(): c.lines[0] for c in ax.containers if isinstance(c, ErrorbarContainer)}}


def test_every_phase_is_its_own_series_its_repeats_one_line_and_the_model_one_line_per_phase():
    fig = plots.busbw_figure("rs-ag", rsag(), [], [("time_us", "time_us <= 2 ms at 1M", [(1 << 20, 2000.0)]),
                                                   ("busbw_gbps", "busbw >= 0.5 GB/s", [(1 << 20, 0.5)])])
    busbw, large, time = fig.axes      # large: the largest sizes' busbw, linear
    assert busbw.get_ylabel() == "busbw (GB/s)" and time.get_ylabel() == "time (us)"
    assert large.get_ylabel() == "busbw (GB/s, linear)" and "threshold: busbw >= 0.5 GB/s" in lines(large)
    for ax in (busbw, time):
        named = lines(ax)
        for phase in PHASES:
            xs = list(named[f"{phase} in-place float32"].get_xdata())
            assert xs == list(SIZES)                         # one point per size: no zig-zag between phases
            assert not any("repeat" in label for label in named)  # repeats pooled: their min-max the bars
            model = named[f"model {phase} in-place float32 (localhost)"]
            assert list(model.get_xdata()) == list(SIZES)
    assert list(lines(time)["model total in-place float32 (localhost)"].get_ydata()) == \
        [s / 1.6e3 for s in SIZES]
    peak = [label for label in lines(busbw) if label.startswith("link peak")]
    assert sorted(peak) == [f"link peak 1.6 GB/s busbw of {phase} (localhost, intra-node)" for phase in sorted(PHASES)]
    assert "threshold: time_us <= 2 ms at 1M" in lines(time) and "threshold: time_us <= 2 ms at 1M" not in lines(busbw)
    assert set(lines(time)["threshold: time_us <= 2 ms at 1M"].get_ydata()) == {2000.0}
    assert "threshold: busbw >= 0.5 GB/s" in lines(busbw)


def io(mount, bw, lat):
    return schema.measurement("iobench", run_id=mount, mount=mount, profile="shard-write", direction="write",
                              rw="write", bs_bytes=1 << 20, bw_mbps=bw, lat_mean_us=lat, lat_p50_us=lat,
                              lat_p99_us=lat * 3, lat_p999_us=lat * 5)


def test_storage_legends_never_cover_bars_and_baseline_bars_are_hatched():
    fig = plots.storage_figure([io("/mnt/a", 900.0, 300.0), io("/mnt/b", 950.0, 310.0)],
                               [io("/mnt/a", 1000.0, 250.0)], [(0, "shard-write MB/s >= 800", 800.0)])
    renderer = fig.canvas.get_renderer()
    fig.canvas.draw()
    for ax in fig.axes:
        legend = ax.get_legend().get_window_extent(renderer)
        bars = [p for p in ax.patches if p.get_height() > 0]
        assert bars
        for bar in bars:      # what is drawn of a bar: its part inside the axes (a log axis clips bars from 0)
            drawn = Bbox.intersection(bar.get_window_extent(renderer), ax.get_window_extent(renderer))
            assert drawn and not Bbox.intersection(legend, drawn), (ax.get_title(), bar.get_label())
        for container in ax.containers:
            baseline = container.get_label().startswith("baseline ")
            assert all((p.get_hatch() == plots.BASELINE_HATCH) == baseline for p in container.patches), \
                (ax.get_title(), container.get_label())
    assert sum(c.get_label().startswith("baseline ") for ax in fig.axes for c in ax.containers) == 1 + 4


def test_thousands_of_runs_are_pooled_into_a_few_lines_of_a_plot_of_bounded_size():
    """A report of 10,000 records in 5,000 runs drew 5,000 lines and an 80,590-pixel-tall legend in 80 s and 1.7 GB
    (issue 38 item 7): past plots.MAX_SERIES lines, the runs of each phase, placement and type are one line whose bars
    span them."""
    recs = [dict(r, run_id=f"run{k}") for k in range(2000) for r in rsag(repeats=1)[:3]]
    fig = plots.busbw_figure("rs-ag", recs, [])
    labels = fig.axes[0].get_legend_handles_labels()[1]
    assert len(labels) <= plots.MAX_SERIES + 4, labels         # + the model lines and the link peak
    assert any("2000 runs pooled" in label for label in labels), labels
    assert fig.get_figheight() * fig.dpi < 2000
