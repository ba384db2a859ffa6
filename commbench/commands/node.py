"""`commbench node`: this node's health under the numbers, one table per GPU and per InfiniBand port, each line a
verdict with its threshold and source (commbench/health/)."""
import sys

import click

from benchcore.inputs import shown
from benchcore.report.render import print_table
from benchcore.results import schema
from benchcore.results.metrics import metrics_options, publish
from benchcore.results.records import RecordWriter, dumps, hostname, new_run_id, output_file
from commbench.health import copies
from commbench.health.survey import LEVELS, failing, subjects, survey
from commbench.model.topology import resolve

COLUMNS = [("item", "check", None), ("value", "read", None), ("verdict", "verdict", None),
           ("threshold", "threshold", None), ("source", "source", None)]
MAX_SECONDS = 3600


def records(result, run_id):
    """One health event per line, then the verdict (passed: None when nothing could be judged here)."""
    out = []
    for subject, rows in subjects(result):
        for row in rows:
            out.append(schema.event("commbench", "health", row["value"], run_id=run_id, subject=subject,
                                    item=row["item"], value=row["value"], health=row["verdict"],
                                    threshold=row["threshold"], source=row["source"], level=result["level"]))
    failed = failing(result)
    nothing = not result["gpus"] and not result["ports"]
    reason = ("; ".join(failed) if failed else
              f"nothing to check here: {'; '.join(result['notes'])}" if nothing else
              f"no check failed ({result['level']} level, {result['seconds']:g} s)")
    out.append(schema.event("commbench", "verdict", reason, run_id=run_id, check="node", level=result["level"],
                            passed=False if failed else None if nothing else True,
                            bad_nodes=[hostname()] if failed else []))
    return out


def show(result):
    for title, rows in [(f"node {hostname()} ({result['level']} level, {result['seconds']:g} s; expected: "
                         f"{result['expect']['from']})", result["node"])] + \
            [(f"{hostname()} {s}", r) for s, r in result["gpus"]] + \
            [(f"{hostname()} InfiniBand {s}", r) for s, r in result["ports"]]:
        print_table(rows, COLUMNS, title=title)
    copy = result.get("copy")
    if copy:
        print_table(copy["rows"], COLUMNS, title=f"{hostname()} copy-engine bandwidth (as nvbandwidth's CE cases)")
        if copy["d2d"]:
            print_table(copies.matrix(copy["d2d"], copy["flagged"]), copies.columns(len(copy["d2d"])),
                        title="D2D write CE, GB/s, GPU(row) -> GPU(column); ! below "
                              f"{copies.SLOW} x the reference")
    for note in result["notes"]:
        click.echo(note)


@click.command("node")
@click.option("--level", type=click.Choice(list(LEVELS)), default="quick", show_default=True,
              help="quick: counters and state, no load (a Prolog's few seconds); full: a load on every GPU "
                   "(GEMMs and pinned copies) while the links, clocks and counters are read.")
@click.option("--seconds", type=click.FloatRange(0.2, MAX_SECONDS), default=None,
              help=f"How long the window between the counter reads lasts [default: quick {LEVELS['quick']:g}, "
                   f"full {LEVELS['full']:g}].")
@click.option("--topology", default=None, metavar="FILE|NAME",
              help="What the node should have (GPUs, NVLinks, IB ports and rate) [default: from the GPU model].")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="json: the records (JSONL) on stdout.")
@click.option("--out", default=None, metavar="FILE", help="Append the records (JSONL).")
@metrics_options
def node(level, seconds, topology, fmt, out):
    """This node's GPUs (NVML) and InfiniBand ports (sysfs), each line a verdict (ok, warn, fail, unknown) with its
    threshold and source: DCGM's health watch and hardware limits, NVIDIA's row-remap policy, gpud's ports.

    Exit 0 when no line fails (warnings and unknowns are shown), 1 when one fails ('error: verdict: ...' names
    them), 2 for bad input. Without GPUs or InfiniBand it says so and judges nothing.

    \b
    Example:
      commbench node                                   # quick: a Prolog's check
      commbench node --level full --topology dgx-h100 --out node.jsonl
    """
    topo = resolve(topology) if topology else None
    path = output_file(out)
    run_id = new_run_id()
    result = survey(level, seconds, topo)
    recs = records(result, run_id)
    if path:
        with RecordWriter(path) as writer:
            for rec in recs:
                writer.write(rec)
    publish(recs, "commbench")
    if fmt == "json":
        for rec in recs:
            click.echo(dumps(rec))
    else:
        show(result)
        click.echo(f"verdict: {recs[-1]['reason']}")
    if recs[-1]["passed"] is False:
        click.echo(f"error: verdict: {shown(recs[-1]['reason'], 1000)}", err=True)
        sys.exit(1)
