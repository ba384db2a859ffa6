"""iobench tables (mounts side by side per profile) and plots."""
import os

from benchcore.report import console, print_table
from benchcore.units import format_size

RESULT_COLUMNS = [("mount", "mount", None), ("storage_class", "storage class", None), ("fs_type", "fs type", None),
                  ("profile", "profile", None), ("lat_mean_us", "avg lat us", ".1f"), ("lat_p99_us", "P99 us", ".1f"),
                  ("lat_p999_us", "P99.9 us", ".1f"), ("bw_mbps", "MB/s", ".1f"), ("iops", "IOPS", ".0f")]
MIXED = {"rw", "readwrite", "randrw", "trimwrite", "randtrimwrite"}
EXTRA_COLUMNS = [("direct", "direct", "d"), ("fsync_lat_p99_us", "fsync P99 us", ".1f")]


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
    rows = side_by_side(records)
    if not rows:
        console().print("no measurements")
        return
    extra = [c for c in EXTRA_COLUMNS if any(r.get(c[0]) is not None for r in rows)]
    print_table(rows, RESULT_COLUMNS + extra, title=title)
    out = console()
    for mount, device in dict.fromkeys((r["mount"], r.get("device")) for r in rows):
        out.print(f"{mount}: device {device or 'n/a'}")


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


def bar_plot(path, records, title="iobench ckpt"):
    """PNG: MB/s and P99 latency per profile, one bar per mount."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = side_by_side(records)
    profiles = list(dict.fromkeys(r["profile"] for r in rows))
    mounts = list(dict.fromkeys(r["mount"] for r in rows))
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    width = 0.8 / max(1, len(mounts))
    for ax, key, label in ((axes[0], "bw_mbps", "MB/s"), (axes[1], "lat_p99_us", "P99 latency (us)")):
        for i, mount in enumerate(mounts):
            values = [next((r.get(key) or 0 for r in rows if r["profile"] == p and r["mount"] == mount), 0)
                      for p in profiles]
            ax.bar([x + i * width for x in range(len(profiles))], values, width, label=mount)
        ax.set_xticks([x + width * (len(mounts) - 1) / 2 for x in range(len(profiles))])
        ax.set_xticklabels(profiles, rotation=15)
        ax.set_ylabel(label)
        if key == "lat_p99_us":
            ax.set_yscale("log")
        ax.grid(True, axis="y", alpha=0.3)
    axes[0].legend(fontsize="small")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
