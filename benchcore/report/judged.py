"""What a tool's judge said of the report's records (`report --topology`: commbench judge's verdict rows, passed in
through the judge hook of benchcore.results.commands): per collective, size, ranks and nodes, the model's busbw per
algorithm, the ceiling util is over and the published references with their sources. The report's tables take
util, model and class columns from it, its plots the model lines, the link peak and the references: the same
figures `judge` prints for the same file. benchcore reads the rows' fields only; the tool made them."""
import math

from benchcore.errors import shown

# the columns a commbench table gets where its rows were judged: (field, header, format)
COLUMNS = [("judge_util", "util", ".2f"), ("judge_ceiling", "of ceiling", None),
           ("judge_model", "model GB/s per algorithm", None), ("judge_class", "judged", None)]
TABLE_NOTE = ("; util, of ceiling, model and judged: commbench judge's, of each size's busbw as judge takes it "
              "(the median of its records: out-of-place and in-place alike)")
TEXT = 200              # characters of a text from a verdict row (a file's): a label, a source, a topology
REFERENCE = dict(marker="D", markersize=6, linestyle="none", capsize=4, color="black")


def _count(v):
    return isinstance(v, int) and not isinstance(v, bool) and 0 < v < 1 << 63


def _rate(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and v >= 0


def _sound(row):
    """A verdict row (read back from any file) with every figure the plots and tables use of its type, its text
    fields text; None where one is not (left out, never a traceback)."""
    if not (isinstance(row, dict) and _count(row.get("size_bytes")) and _count(row.get("ranks"))
            and _count(row.get("nodes")) and isinstance(row.get("model_gbps"), dict)):
        return None
    refs = row.get("references") or []
    if not isinstance(refs, list) or not all(isinstance(r, dict) and _rate(r.get("low")) and _rate(r.get("high"))
                                             and _count(r.get("size_bytes")) for r in refs):
        return None
    refs = [dict(r, **{k: shown(str(r[k]), TEXT) for k in ("label", "source", "date") if r.get(k) is not None})
            for r in refs]
    return dict(row, model_gbps={shown(str(a), TEXT): v for a, v in row["model_gbps"].items() if _rate(v)},
                ceiling_gbps=row.get("ceiling_gbps") if _rate(row.get("ceiling_gbps")) else None, references=refs,
                **{k: shown(str(row[k]), TEXT) for k in ("ceiling", "model", "class", "collective")
                   if row.get(k) is not None},
                link_utilization=row.get("link_utilization") if _rate(row.get("link_utilization")) else None)


def rows_of(records):
    """{(collective, size_bytes, ranks, nodes): verdict row} of the judge's verdict events among records, each row
    with its event's topology (a row whose figures are not of their types is left out)."""
    out = {}
    for ev in records:
        if ev.get("event") == "verdict" and ev.get("check") == "judge" and isinstance(ev.get("rows"), list):
            for row in filter(None, map(_sound, ev["rows"])):
                out[row.get("collective"), row["size_bytes"], row["ranks"], row["nodes"]] = \
                    dict(row, topology=shown(str(ev.get("topology") or "the topology"), TEXT))
    return out


def key(rec):
    return rec.get("collective"), rec.get("size_bytes"), rec.get("world_size"), rec.get("nodes")


def with_judged(rec, judged):
    """rec with the judge's figures for its size as table fields (none where it was not judged)."""
    row = judged.get(key(rec))
    if not row:
        return rec
    return dict(rec, judge_util=row.get("link_utilization"), judge_ceiling=row.get("ceiling"),
                judge_model=row.get("model"), judge_class=row.get("class"))


def of_group(judged, recs):
    """The verdict rows of the layouts (collective, ranks, nodes) recs measured, by size."""
    layouts = {(k[0], k[2], k[3]) for k in map(key, recs)}
    return sorted((row for k, row in judged.items() if (k[0], k[2], k[3]) in layouts),
                  key=lambda row: row["size_bytes"])


def _layout(row, several):
    return f", {row['ranks']} ranks on {row['nodes']} node{'s' if row['nodes'] != 1 else ''}" if several else ""


def draw(ax, rows, smallest=0):
    """On a busbw axis: the model's busbw per algorithm (a dotted line each), the ceiling util is over (the link
    peak, dash-dot) and each published reference (its range as a bar; [n] in the legend: its source in the
    caption, a URL too long for a legend beside another panel's), of rows at
    sizes from smallest; the labels name the topology. Returns the largest value drawn (for the axis' limit)."""
    several = len({(r["ranks"], r["nodes"]) for r in rows}) > 1
    lines, peaks, refs, top, numbered = {}, {}, {}, 0.0, sources(rows)
    for row in rows:
        where = f"{row['topology']}{_layout(row, several)}"
        if row["size_bytes"] >= smallest:
            for algo, value in row["model_gbps"].items():
                if isinstance(value, (int, float)) and value > 0:
                    lines.setdefault(f"model {algo} ({where}; as judge)", []).append((row["size_bytes"], value))
        if isinstance(row.get("ceiling_gbps"), (int, float)):
            peaks[f"link peak: {row.get('ceiling')} GB/s busbw ({where}, datasheet; util is over it)"] = \
                row["ceiling_gbps"]
        for ref in row.get("references") or ():
            if ref.get("size_bytes", 0) >= smallest:
                refs[f"published {ref.get('label')} [{numbered[_source(ref)]}]"] = ref
    for label, points in lines.items():
        ax.plot([p[0] for p in points], [p[1] for p in points], ":", linewidth=1.5, label=label)
        top = max([top] + [p[1] for p in points])
    for label, value in peaks.items():
        ax.axhline(value, color="dimgrey", linestyle="-.", linewidth=1.2, label=label)
        top = max(top, value)
    for label, ref in refs.items():
        mid = (ref["low"] + ref["high"]) / 2
        ax.errorbar([ref["size_bytes"]], [mid], yerr=[[mid - ref["low"]], [ref["high"] - mid]], label=label,
                    **dict(REFERENCE, marker="v" if ref.get("kind") == "threshold" else "D"))
        top = max(top, ref["high"])
    return top


def _source(ref):
    return f"{ref.get('source')}" + (f" ({ref['date']})" if ref.get("date") else "")


def sources(rows):
    """{a reference's source and date: its number [n]}, in the order the rows cite them."""
    found = dict.fromkeys(_source(ref) for row in rows for ref in row.get("references") or ())
    return {source: n for n, source in enumerate(found, 1)}


def caption(rows):
    """What the plot's judged lines are, for the page's caption: '' where nothing was judged."""
    if not rows:
        return ""
    topologies = ", ".join(dict.fromkeys(r["topology"] for r in rows))
    cited = sources(rows)
    return (f"; dotted: the model per algorithm on {topologies}, dash-dot: the link peak util is over (as commbench "
            "judge); " + ("diamonds: published references" + (" (triangles: a provider's pass mark)" if any(
                ref.get("kind") == "threshold" for r in rows for ref in r.get("references") or ()) else "")
                + ": " + "; ".join(
                f"[{n}] {source}" for source, n in cited.items()) if cited else
                "no published reference for this topology"))
