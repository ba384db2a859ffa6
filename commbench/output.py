"""nccl-tests-style tables of commbench records."""
from benchcore.report import console, print_table
from benchcore.units import format_size

PLACE_COLUMNS = [("time_us", "time us", ".1f"), ("algbw_gbps", "algbw GB/s", ".3f"),
                 ("busbw_gbps", "busbw GB/s", ".3f"), ("wrong", "#wrong", "d")]


def collective_rows(records):
    """One row per (collective, size): out-of-place and in-place side by side, as nccl-tests prints."""
    rows = {}
    for rec in records:
        if rec.get("event") or rec.get("collective") is None:
            continue
        key = (rec["collective"], rec["size_bytes"])
        row = rows.setdefault(key, {"collective": rec["collective"], "size": rec["size_bytes"],
                                    "size_h": format_size(rec["size_bytes"]), "count": rec["count"],
                                    "type": rec["dtype"], "redop": rec.get("op") or "none",
                                    "root": rec.get("root") if rec.get("root") is not None else -1})
        side = "in" if rec["in_place"] else "out"
        for col, _, _ in PLACE_COLUMNS:
            row[f"{side}_{col}"] = rec.get(col)
    order = {name: i for i, name in enumerate(dict.fromkeys(k[0] for k in rows))}
    return sorted(rows.values(), key=lambda r: (order[r["collective"]], r["size"]))


def print_collective_tables(records):
    rows = collective_rows(records)
    if not rows:
        console().print("no measurements")
        return
    columns = [("size", "size (B)", "d"), ("size_h", "", None), ("count", "count", "d"),
               ("type", "type", None), ("redop", "redop", None), ("root", "root", "d")]
    for side, label in (("out", "out-of-place"), ("in", "in-place")):
        if all(r.get(f"{side}_time_us") is None for r in rows):
            continue
        columns += [(f"{side}_{key}", f"{label} {head}" if key == "time_us" else head, fmt)
                    for key, head, fmt in PLACE_COLUMNS]
    first = next(r for r in records if not r.get("event"))
    title_bits = [f"{first['backend']}", f"{first['world_size']} ranks on {first['nodes']} node(s)",
                  "blocking" if first["blocking"] else "non-blocking", f"agg {first.get('agg', 'avg')}"]
    for name in dict.fromkeys(r["collective"] for r in rows):
        print_table([r for r in rows if r["collective"] == name], columns,
                    title=f"{name}  ({', '.join(title_bits)})")
    busbws = [r["busbw_gbps"] for r in records if not r.get("event") and r.get("busbw_gbps") is not None]
    wrong = sum(r.get("wrong") or 0 for r in records if not r.get("event"))
    out = console()
    out.print(f"# Out of bounds values : {wrong} {'OK' if not wrong else 'FAILED'}")
    out.print(f"# Avg bus bandwidth    : {sum(busbws) / len(busbws):.4f} GB/s" if busbws else
              "# Avg bus bandwidth    : n/a")
