"""iobench tables (mounts side by side per profile) and plots."""
import os

from benchcore.importers.fio_json import TIME_FIGURES
from benchcore.report import figures
from benchcore.report.render import WHOLE, console, print_table
from benchcore.units import format_size
from iobench import moved


def figure(field):
    """A table column of a latency or time figure: its one header (benchcore.importers.fio_json.TIME_FIGURES)."""
    header, fmt, _ = TIME_FIGURES[field]
    return field, header, fmt


# Per-I/O latency, per-file time and end-fsync time each have their own column (headers say which); the
# times to durable get a table of their own, for the rows that have them.
RESULT_COLUMNS = [("shown_mount", "mount", WHOLE), ("label", "profile", None), ("bw_mbps", "MB/s", ".1f"),
                  ("iops", "IOPS", ".0f")] + [figure(f) for f in ("lat_mean_us", "lat_p99_us", "lat_p999_us",
                                                                    "lat_samples")]
MIXED = {"rw", "readwrite", "randrw", "trimwrite", "randtrimwrite"}
EXTRA_COLUMNS = [("direct", "direct", "d"), ("clat", "I/O lat is", None), ("concurrent", "concurrent", None),
                 ("served", "served by", None)]
NOT_STORAGE = {"cache": "the MB/s is a cache's (the page cache's), not the storage's",
               "memory": "the MB/s is memory's, not storage's",
               "unproven": "nothing says whether storage or a cache served it"}
MOUNT_WIDTH = 20   # a mount path up to this long is shown whole in the tables (the rest within 100 columns)
DURABLE_COLUMNS = [figure(f) for f in ("file_lat_mean_us", "files_per_s", "fsync_lat_mean_us", "fsync_lat_p99_us",
                                       "fsync_samples", "end_fsync_s")]


def in_use(rows, cols, absent=(None, False)):
    """The columns some row has a value for (direct 0 and concurrent false count as none)."""
    return [c for c in cols if any(r.get(c[0]) not in absent for r in rows)]


def columns(rows):
    """RESULT_COLUMNS and the extras some row has (I/O lat is: 'clat' where fio gave completion latency only)."""
    return RESULT_COLUMNS + in_use(rows, EXTRA_COLUMNS)


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


def mount_names(mounts):
    """{mount: its name in the tables}: the path where it is at most MOUNT_WIDTH characters, else '…/' and its last
    components that no other mount ends with ('…/xfs0/data'), else 'mount N' (its place): a mount is one whole
    token in its cell, never folded, and the lines under the tables give each one's full path."""
    tails = {m: m.rstrip("/").split("/") for m in mounts}
    names = {}
    for i, (mount, parts) in enumerate(tails.items()):
        k = next((k for k in range(1, len(parts) + 1)
                  if all(other[-k:] != parts[-k:] for m, other in tails.items() if m != mount)), len(parts))
        short = mount if k >= len(parts) - 1 else "…/" + "/".join(parts[-k:])
        names[mount] = mount if len(mount) <= MOUNT_WIDTH else short if len(short) <= MOUNT_WIDTH else f"mount {i + 1}"
    return names


def print_results(records, title="iobench"):
    names = mount_names(list(dict.fromkeys(r["mount"] for r in side_by_side(records))))
    rows = [dict(r, label=r["profile"], clat="clat" if r.get("lat_kind") == "clat" else None, served=served(r),
                 shown_mount=names[r["mount"]])
            for r in side_by_side(records)]  # label: benchcore.report.render never cuts it
    if not rows:
        console().print("no measurements")
        return
    print_table(rows, columns(rows), title=title, compact=True)   # fio's and nccl-tests' look: within 100 columns
    durable = [r for r in rows if in_use([r], DURABLE_COLUMNS, (None,))]
    if durable:
        print_table(durable, RESULT_COLUMNS[:2] + in_use(durable, DURABLE_COLUMNS, (None,)),
                    title="time to durable: per file, per fsync() call, end fsync", compact=True)
    out = console()
    for mount, fs_type, storage, device in dict.fromkeys(
            (r["mount"], r.get("fs_type"), r.get("storage_class"), r.get("device")) for r in rows):
        shown = "" if names[mount] == mount else f"{names[mount]} is "
        out.print(f"{shown}{mount}: {fs_type}, storage class {storage}, device {device or 'n/a'}")
    for line in served_lines(rows):
        out.print(line)
    for r in rows:
        if r.get("files") and r.get("fsync_samples") is not None and r["fsync_samples"] < r["files"]:
            out.print(f"{r['profile']} on {r['mount']}: {r['fsync_samples']} fsyncs for {r['files']} files: fio issues "
                      f"fsync=1's fsync before a job's next write, so the last file of each of its {r['numjobs']} "
                      f"job(s) is closed without one (per-file us includes {r['files'] - r['fsync_samples']} such)")


def served(rec):
    """The 'served by' cell where it is not the storage (iobench/moved.py's proof): 'cache (0.02 moved)', 'memory',
    'unproven'; None where storage moved the bytes (or the record predates the proof)."""
    by = rec.get("served_by")
    if by in (None, "storage"):
        return None
    return f"{by} ({rec['bytes_moved_ratio']:.2f} moved)" if rec.get("bytes_moved_ratio") is not None else by


def served_lines(rows):
    """A line per row whose bytes no storage is shown to have moved: what the counter saw, what that means."""
    out = []
    for r in rows:
        by = r.get("served_by")
        if by in NOT_STORAGE:
            seen = (f"{r['bytes_moved_ratio']:.2f} of its {r.get('direction')} bytes reached storage by "
                    f"{r.get('byte_counter')} (below {moved.MIN_MOVED}: a cache served it)"
                    if r.get("bytes_moved_ratio") is not None else r.get("served_reason") or r.get("byte_counter"))
            out.append(f"served by {by}: {r['profile']} on {r['mount']}: {seen}: {NOT_STORAGE[by]}")
    return out


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


def bar_figure(records, title="iobench ckpt"):
    """MB/s and P99 latency per profile, one bar per mount, on linear axes with each bar's value written on it (a
    metadata profile's few MB/s beside a checkpoint's thousands is a short bar that says its number)."""
    rows = side_by_side(records)
    profiles = list(dict.fromkeys(r["profile"] for r in rows))
    mounts = list(dict.fromkeys(r["mount"] for r in rows))
    fig, axes = figures.pyplot().subplots(1, 2, figsize=(12, 5))
    width = 0.8 / max(1, len(mounts))
    for ax, key, label in ((axes[0], "bw_mbps", "MB/s"), (axes[1], "lat_p99_us", TIME_FIGURES["lat_p99_us"][0])):
        for i, mount in enumerate(mounts):
            values = [next((r[key] for r in rows if r["profile"] == p and r["mount"] == mount
                            and r.get(key) is not None), float("nan")) for p in profiles]   # nan: n/a, no bar
            figures.bar_values(ax, ax.bar([x + i * width for x in range(len(profiles))], values, width, label=mount))
        ax.set_xticks([x + width * (len(mounts) - 1) / 2 for x in range(len(profiles))])
        ax.set_xticklabels(profiles, rotation=15)
        ax.set_ylabel(label)
        ax.margins(y=0.15)                                   # room for the values above the tallest bar
        ax.grid(True, axis="y", alpha=0.3)
    figures.legend_beside(axes[1], title="mount")
    fig.suptitle(f"{title}: MB/s and P99 latency per profile and mount")
    fig.tight_layout()
    return fig


def bar_plot(path, records, title="iobench ckpt"):
    """bar_figure's PNG (or the format path's suffix names) at path."""
    figures.save(bar_figure(records, title), path)
