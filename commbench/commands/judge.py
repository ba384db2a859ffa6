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
from commbench.model.judge import FAILING, judge
from commbench.model.topology import MAX_RANKS, OVERSUBSCRIBE, layout_problem, resolve

UNJUDGED = ("latency", "rising")
COLUMNS = [("collective", "collective", None), ("size", "size", None), ("where", "ranks x nodes", None),
           ("busbw_gbps", "busbw GB/s", ".1f"), ("model", "model per algorithm", None),
           ("published", "published", None), ("link_utilization", "util", ".2f"), ("ceiling", "of ceiling", None),
           ("class", "class", None)]


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
                        passed=not failing, rows=[r.as_dict() for r in rows])


def run_verdict(records, topology_text):
    """run --judge: the verdict record of a run's measurements on the topology it named ([] where none is judged)."""
    topo = resolve(topology_text)
    rows, _ = judge(read.measurements(records), topo)
    return [verdict_record(rows, topo, records[0].get("run_id"))] if rows else []


def report_verdict(records, topology_text):
    """report --topology: the verdict of the records on that system, or a note saying why nothing was judged."""
    topo = resolve(topology_text)
    rows, skipped = judge(read.measurements(records), topo)
    if rows:
        return [verdict_record(rows, topo, records[0].get("run_id"))]
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
        shown_rows = [{**r.as_dict(), "where": f"{r.ranks} x {r.nodes}"} for r in rows]
        print_table(shown_rows, COLUMNS, title=f"judged against {topo.name} (ceilings: the datasheet's; util over "
                                              "the highest ceiling of the algorithms NCCL may have run)")
        for r in rows:
            if r.klass not in UNJUDGED:
                console().print(f"{r.collective} {format_size(r.size_bytes)} ({r.ranks} x {r.nodes}): {r.klass}: "
                                f"{r.line}")
        aside = [format_size(r.size_bytes) for r in rows if r.klass in UNJUDGED]
        if aside:
            console().print(f"not judged (latency-bound, or the busbw still rises): {', '.join(aside)}")
        console().print(("PASS: " if verdict["passed"] else "FAIL: ") + verdict["reason"])
    sys.exit(0 if verdict["passed"] else 1)
