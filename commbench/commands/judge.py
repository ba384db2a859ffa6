"""`commbench judge`: is this number normal for this hardware? (commbench/model/judge.py)."""
import sys

import click

from benchcore.errors import UserError
from benchcore.importers import nccl_names
from benchcore.inputs import shown
from benchcore.report.render import console, print_table
from benchcore.results import read, schema
from benchcore.results.records import RecordWriter, dumps, new_output_option, new_run_id
from benchcore.units import format_size
from commbench.evidence import nccl as nccl_evidence
from commbench.model.judge import FAILING, PLATEAU, PLATEAU_SIZE, RISING, judge
from commbench.model.topology import MAX_RANKS, OVERSUBSCRIBE, layout_problem, resolve

UNJUDGED = ("latency", "rising")
COLUMNS = [("collective", "collective", None), ("size", "size", None), ("where", "ranks", None),
           ("busbw_gbps", "busbw GB/s", ".1f"), ("model", "model per algorithm", None),
           ("published", "published", None), ("link_utilization", "util", ".2f"), ("ceiling", "of ceiling", None),
           ("class", "class", None)]
RUN_NAMED = 4           # a run of more not-judged sizes than this reads 'first to last (N sizes)'


def where(row):
    """'16 ranks on 2 nodes' ('16 x 2' read like 32 GPUs)."""
    return f"{row.ranks} ranks on {row.nodes} node{'s' if row.nodes != 1 else ''}"


def _runs(rows):
    """Rows (one collective and layout, by size) in runs of consecutive sizes of one class: [[row, ...]]."""
    out = []
    for r in sorted(rows, key=lambda r: r.size_bytes):
        if out and out[-1][-1].klass == r.klass:
            out[-1].append(r)
        else:
            out.append([r])
    return out


def not_judged(rows):
    """Lines saying why each size was not judged, with the band that decides it: latency-bound (the model's busbw
    under PLATEAU of its large-size value) or still rising (under RISING of the best measured)."""
    lines, layouts = [], {}
    for r in rows:
        layouts.setdefault((r.collective, r.ranks, r.nodes), []).append(r)
    for (collective, *_), mine in layouts.items():
        for run in (run for run in _runs(mine) if run[0].klass in UNJUDGED):
            first, last = run[0], run[-1]
            if first.klass == "latency":
                why = (f"latency-bound: the model's busbw there is under {PLATEAU} of its {first.plateau_gbps:.0f} "
                       f"GB/s at {format_size(PLATEAU_SIZE)}, so latency, not the link, decides")
            else:
                why = (f"the busbw still rises: under {RISING} of the best measured, {first.best_gbps:.1f} GB/s at "
                       f"{format_size(first.best_size)} (judged from {RISING * first.best_gbps:.1f} GB/s)")
            named = run if len(run) <= RUN_NAMED else run[-2:] if first.klass == "rising" else []
            sizes = ", ".join(format_size(r.size_bytes) + (f" at {r.busbw / r.best_gbps:.2f} of the best"
                                                           if r.klass == "rising" else "") for r in named)
            if len(run) > RUN_NAMED:
                sizes = (f"{format_size(first.size_bytes)} to {format_size(last.size_bytes)} ({len(run)} sizes"
                         + (f"; the largest: {sizes})" if sizes else ")"))
            lines.append(f"not judged, {collective} {where(first)}: {sizes}: {why}")
    return lines


def shown_table(rows, topo):
    """(columns, rows, lines above the table) of judge's table: the published column only where the topology has
    references ('none' where none matches a row), else one line saying there is none; the layout and the placement
    the busbw is of in a line where every row shares it, else in a column."""
    columns, lines = list(COLUMNS), []
    if not topo.references:
        columns = [c for c in columns if c[0] != "published"]
        lines.append(f"no published reference for this topology ({topo.name}): the levels are the model's")
    placements, layouts = {r.placement for r in rows}, {where(r) for r in rows}
    if len(layouts) == 1:        # one layout: said once, the table keeps its width
        columns = [c for c in columns if c[0] != "where"]
        lines.append(f"every row: {layouts.pop()}")
    if len(placements) == 1:
        lines.append(f"busbw: the median of each size's {placements.pop()}")
    else:
        columns.insert(3, ("placement", "busbw of", None))
    shown = [{**r.as_dict(), "where": where(r), "published": r.published or "none"} for r in rows]
    return columns, shown, lines


def parse_env(pairs):
    """--env K=V (repeated) -> {K: V}: what the log's setup was where its lines do not say (NCCL_ALGO=Tree)."""
    out = {}
    for pair in pairs:
        key, eq, value = pair.partition("=")
        if not eq or not key.startswith("NCCL_") or not key.replace("_", "").isalnum():
            raise UserError(f"--env {shown(repr(pair), 60)}: expected NCCL_NAME=VALUE")
        out[key] = value
    return out


def verdict_record(rows, topo, run_id=None):
    """The verdict event, like compare's: passed unless a row's class fails, one row per size."""
    failing = [r for r in rows if r.klass in FAILING]
    reason = (f"{len(failing)} of {len(rows)} measurements are not what {topo.name} delivers: "
              + "; ".join(f"{r.collective} {format_size(r.size_bytes)}: {r.line}" for r in failing[:3])
              if failing else f"every judged measurement is what {topo.name} delivers")
    return schema.event("commbench", "verdict", reason, run_id=run_id or new_run_id(), check="judge",
                        passed=not failing, topology=topo.name, rows=[r.as_dict() for r in rows])


def run_verdict(records, topology_text):
    """run --judge: the verdict record of a run's measurements on the topology it named ([] where none is judged)."""
    topo = resolve(topology_text)
    rows, _ = judge(read.measurements(records), topo)
    return [verdict_record(rows, topo, records[0].get("run_id"))] if rows else []


def report_verdict(records, topology_text):
    """report --topology: the verdict of the records on that system, or a note saying why nothing was judged."""
    topo = resolve(topology_text)
    rows, skipped = judge(read.measurements(records), topo)
    if rows:      # and, as judge prints them, why each size left out was not judged, and what no reference means
        said = not_judged(rows) + ([f"no published reference for this topology ({topo.name}): the levels are the "
                                    "model's"] if not topo.references else [])
        return [verdict_record(rows, topo, records[0].get("run_id"))] + [
            schema.event("commbench", "judge", line, run_id=records[0].get("run_id")) for line in said]
    why = "; ".join(f"{count} record(s): {reason}" for reason, count in skipped.items()) or "no measurement"
    return [schema.event("commbench", "judge", f"nothing judged against {topo.name}: {why} (commbench judge takes "
                                              "--ranks, --nodes and --env where the records do not say)")]


def _check_counts(topo, ranks, nodes, oversubscribed):
    """--ranks and --nodes bounded, and checked against each other and topo's GPUs per node where both are given:
    UserError in one line saying which."""
    if ranks is not None and ranks > MAX_RANKS:
        raise UserError(f"--ranks {ranks}: more than {MAX_RANKS:,} ranks, which no job has")
    if nodes is not None and nodes > MAX_RANKS // 2:
        raise UserError(f"--nodes {nodes}: more than {MAX_RANKS // 2:,} nodes, which no job of 2 ranks or more per "
                        f"node has")
    why = layout_problem(topo, ranks, nodes, oversubscribed) if ranks is not None and nodes is not None else None
    if why:
        raise UserError(f"--ranks {ranks} --nodes {nodes}: {why}")


@click.command("judge")
@click.argument("files", nargs=-1, required=True)
@click.option("--topology", required=True, metavar="FILE|NAME", help="The system the numbers came from.")
@click.option("--ranks", type=click.IntRange(1), default=None, help="Ranks in all, where the log does not say.")
@click.option("--nodes", type=click.IntRange(1), default=None, help="Nodes, where the log does not say.")
@click.option("--env", "env_pairs", multiple=True, metavar="NCCL_X=V",
              help="An NCCL setting the run had, where the log does not say (repeatable): NCCL_ALGO=Tree.")
@click.option("--out", default=None, metavar="FILE", callback=new_output_option("--out", (".jsonl",)),
              help="Write the verdict record here (a new file).")
@click.option(OVERSUBSCRIBE, "oversubscribe", is_flag=True,
              help="Ranks shared GPUs: more ranks per node than the topology's GPUs per node.")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True)
@click.option("--collective", default=None, metavar="NAME",
              help="The collective of nccl-tests tables whose log does not name it (as import's).")
def judge_command(files, topology, ranks, nodes, env_pairs, out, oversubscribe, fmt, collective):
    """Is my number normal? Measured busbw against the model per algorithm, each algorithm's ceiling and the
    topology's published references, with one diagnosis per size: NVLS-level, ring-level where NVLS is expected,
    slow, or above every ceiling. Exit status 1 when a measurement fails (commbench/model/judge.py).

    \b
    Example:
      commbench judge all_reduce_perf.log --topology dgx-h100
      commbench judge results.jsonl --topology hgx-h200 --out verdict.jsonl
      commbench judge rows.txt --topology dgx-h100 --ranks 2 --nodes 2 --env NCCL_ALGO=Tree
    """
    topo, env = resolve(topology), parse_env(env_pairs)
    _check_counts(topo, ranks, nodes, oversubscribe)
    records, refused = read.load_many(files, nccl_names.option(collective) if collective is not None else None)
    records = nccl_evidence.attach(records)         # a log's NCCL INFO lines: the algorithm NCCL says it ran
    for why in refused:
        console(stderr=True).print(f"skipped: {why}")
    rows, skipped = judge(read.measurements(records), topo, ranks, nodes, env, oversubscribe)
    for why, count in skipped.items():
        console(stderr=True).print(f"left out {count} record(s): {why}")
    if not rows:
        raise UserError("no measurement to judge" + (f" ({'; '.join(skipped)})" if skipped else ""))
    verdict = verdict_record(rows, topo)
    if out:
        with RecordWriter(out) as writer:
            writer.write(verdict)
    if fmt == "json":
        click.echo(dumps(verdict))
    else:
        columns, shown_rows, lines = shown_table(rows, topo)
        for line in lines:
            console().print(line)
        print_table(shown_rows, columns, title=f"judged against {topo.name} (ceilings: the datasheet's; util over "
                                               "the highest ceiling of the algorithms NCCL may have run)")
        for r in rows:
            if r.klass not in UNJUDGED:
                console().print(f"{r.collective} {format_size(r.size_bytes)} ({where(r)}): {r.klass}: {r.line}")
        for line in not_judged(rows):
            console().print(line)
        console().print(("PASS: " if verdict["passed"] else "FAIL: ") + verdict["reason"])
    sys.exit(0 if verdict["passed"] else 1)
