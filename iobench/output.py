"""iobench tables (mounts side by side per profile) and plots."""
import os

from benchcore.report import console, print_table
from benchcore.units import format_size

# What a row's latency columns show, first match wins: (test on the record, what it is, fields
# avg, P50, P99, P99.9, samples). Every row says what its latency measures (column "latency"):
# "lat"/"clat": fio's total/completion latency per I/O; "end fsync": mean time per rank in the
# fsync that makes a shard durable (MB/s includes it); "per file": mean create+write+fsync+close
# time per file in one job (fio measures no per-file percentile, so P99 is n/a).
LATENCY_VIEWS = (
    (lambda r: r.get("file_lat_mean_us") is not None, "per file",
     ("file_lat_mean_us", None, None, None, "files")),
    (lambda r: r.get("end_fsync_s") is not None, "end fsync",
     ("end_fsync_us", None, None, None, "numjobs")),
    (lambda r: True, None, ("lat_mean_us", "lat_p50_us", "lat_p99_us", "lat_p999_us", "lat_samples")),
)
VIEW_KEYS = ("lat_avg", "lat_p50", "lat_p99", "lat_p999", "lat_n")


def latency_view(rec):
    """rec plus the latency its table row shows (keys VIEW_KEYS and 'latency')."""
    for test, what, fields in LATENCY_VIEWS:
        if test(rec):
            row = dict(rec, end_fsync_us=None if rec.get("end_fsync_s") is None else rec["end_fsync_s"] * 1e6)
            row.update({k: (row.get(f) if f else None) for k, f in zip(VIEW_KEYS, fields)})
            row["latency"] = what or rec.get("lat_kind")
            return row


RESULT_COLUMNS = [("mount", "mount", None), ("profile", "profile", None), ("bw_mbps", "MB/s", ".1f"),
                  ("iops", "IOPS", ".0f"), ("latency", "latency", None), ("lat_avg", "avg us", ".1f"),
                  ("lat_p99", "P99 us", ".1f"), ("lat_p999", "P99.9 us", ".1f"), ("lat_n", "n", "d")]
MIXED = {"rw", "readwrite", "randrw", "trimwrite", "randtrimwrite"}
EXTRA_COLUMNS = [("direct", "direct", "d"), ("fsync_lat_mean_us", "fsync avg us", ".1f"),
                 ("fsync_lat_p99_us", "fsync P99 us", ".1f"), ("fsync_samples", "fsync n", "d"),
                 ("files_per_s", "files/s", ".0f"), ("concurrent", "concurrent", None)]


def columns(rows):
    """RESULT_COLUMNS, the latency kind in the avg header when every row has the same, and the extras in use."""
    kinds = {r["latency"] for r in rows}
    cols = [(k, f"avg {kinds.pop()} us" if k == "lat_avg" and len(kinds) == 1 else h, f) for k, h, f in RESULT_COLUMNS]
    return cols + [c for c in EXTRA_COLUMNS if any(r.get(c[0]) not in (None, False) for r in rows)]


def measured(records):
    return [r for r in records if not r.get("event") and r.get("profile")]


def side_by_side(records):
    """Rows grouped by profile (first-seen order), mounts in the order given within each.

    A job that both reads and writes (rw=randrw) gives two rows, named 'job (read)', 'job (write)'.
    """
    rows = [dict(r, profile=f"{r['profile']} ({r['direction']})") if r.get("rw") in MIXED else r
            for r in measured(records)]
    profiles = list(dict.fromkeys(r["profile"] for r in rows))
    mounts = list(dict.fromkeys(r["mount"] for r in rows))
    return sorted(rows, key=lambda r: (profiles.index(r["profile"]), mounts.index(r["mount"])))


def print_results(records, title="iobench"):
    rows = [latency_view(r) for r in side_by_side(records)]
    if not rows:
        console().print("no measurements")
        return
    print_table(rows, columns(rows), title=title)
    out = console()
    for mount, fs_type, storage, device in dict.fromkeys(
            (r["mount"], r.get("fs_type"), r.get("storage_class"), r.get("device")) for r in rows):
        out.print(f"{mount}: {fs_type}, storage class {storage}, device {device or 'n/a'}")


def mount_row(mount):
    """What `iobench mounts` shows of one mount (free bytes when statvfs answers)."""
    try:
        vfs = os.statvfs(mount.mount_point)
        free = vfs.f_bavail * vfs.f_frsize
    except OSError:
        free = None
    return {"mount_point": mount.mount_point, "fs_type": mount.fs_type, "storage_class": mount.storage_class,
            "device": mount.device, "mode": "ro" if mount.read_only else "rw", "free_bytes": free}


def print_mounts(rows):
    rows = [dict(r, free="n/a" if r["free_bytes"] is None else format_size(r["free_bytes"], approx=True)) for r in rows]
    print_table(rows, [("mount_point", "mount", None), ("fs_type", "fs type", None),
                       ("storage_class", "storage class", None), ("device", "device", None),
                       ("mode", "mode", None), ("free", "free", None)], title="mounts")


def log_axis(values, spread=10):
    """A log axis when the positive values differ by more than spread times (mounts 10x apart stay readable)."""
    values = [v for v in values if v]
    return bool(values) and max(values) > spread * min(values)


def bar_plot(path, records, title="iobench ckpt"):
    """PNG: MB/s and P99 latency per profile, one bar per mount; returns each panel's y scale."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = side_by_side(records)
    profiles = list(dict.fromkeys(r["profile"] for r in rows))
    mounts = list(dict.fromkeys(r["mount"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    width = 0.8 / max(1, len(mounts))
    scales = {}
    for ax, key, label in ((axes[0], "bw_mbps", "MB/s"), (axes[1], "lat_p99_us", "P99 latency (us)")):
        for i, mount in enumerate(mounts):
            values = [next((r.get(key) or 0 for r in rows if r["profile"] == p and r["mount"] == mount), 0)
                      for p in profiles]
            ax.bar([x + i * width for x in range(len(profiles))], values, width, label=mount)
        ax.set_xticks([x + width * (len(mounts) - 1) / 2 for x in range(len(profiles))])
        ax.set_xticklabels(profiles, rotation=15)
        ax.set_ylabel(label)
        if key == "lat_p99_us" or log_axis([r.get(key) for r in rows]):
            ax.set_yscale("log")
        scales[key] = ax.get_yscale()
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return scales
