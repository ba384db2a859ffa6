"""`commbench health [HISTORY]`: each node's health history (commbench/commands/history.py) as a table or JSON."""
import json
import os

import click

from benchcore.errors import UserError
from benchcore.report.render import WHOLE, console, print_table
from commbench.commands.history import (DEFAULT_WINDOW, HISTORY_ENV, MAX_DEPTH, MAX_HELD, MAX_LINE_BYTES, MAX_NODES,
                                        read)

ORDER = {"fail": 0, "error": 1, "pass": 2}


def _when(text, year=None):
    """A recorded time to the minute (enough to tell runs apart); without its year where the title says it."""
    return None if not text else text[5:16] if year and text.startswith(year) else text[:16]


@click.command()
@click.argument("history", required=False, metavar="[HISTORY]")
@click.option("--last", "window", type=click.IntRange(1, 10000), default=DEFAULT_WINDOW, show_default=True,
              help="Runs per node that failures and flaps count over.")
@click.option("--node", "nodes", multiple=True, metavar="NAME", help="Only this node (repeat for more).")
@click.option("--format", "fmt", type=click.Choice(["table", "json"]), default="table", show_default=True,
              help="json: one object per node (JSONL).")
def health(history, window, nodes, fmt):
    """Per node: last result, last pass, failures and flaps in the last runs, drained/resumed by commbench, what
    failed; failing nodes first.

    HISTORY is the file `accept --history` and `pairs --history` append to [default: $COMMBENCH_HISTORY].

    \b
    Example:
      commbench accept --spec acceptance/healthcheck.yaml --history /var/lib/commbench/health.jsonl
      commbench health /var/lib/commbench/health.jsonl --last 20
    """
    history = history or os.environ.get(HISTORY_ENV)
    if not history:
        raise UserError(f"give the history file (commbench health FILE, or {HISTORY_ENV})")
    summaries, skipped, left_out = read(history, window, set(nodes) if nodes else None)
    if nodes:
        missing = [n for n in nodes if n not in summaries]
        if missing:
            raise UserError(f"--node {missing[0]}: not in the history")
    rows = sorted(summaries.values(), key=lambda s: (ORDER[s["last_result"]], -s["failures"], s["node"]))
    if fmt == "json":
        for row in rows:
            click.echo(json.dumps(row, separators=(",", ":")))
    else:
        times = [r[k] for r in rows for k in ("last_run", "last_pass", "drained", "resumed") if r[k]]
        years = {t[:4] for t in times}
        year = years.pop() if len(years) == 1 else None   # one year: said once in the title, not in every cell
        shown = [{**r, "label": r["node"], "last_run": _when(r["last_run"], year),
                  "last_pass": _when(r["last_pass"], year) or "never",
                  "fails": f"{r['failures']}/{r['window']}", "drained": _when(r["drained"], year),
                  "resumed": _when(r["resumed"], year)} for r in rows]
        # a timestamp is one token: never wrapped inside (the failure's text wraps instead); compact as nccl-tests,
        # so that it keeps within 100 columns
        print_table(shown, [("label", "node", None), ("last_result", "last", None), ("last_run", "at", WHOLE),
                            ("last_pass", "last pass", WHOLE), ("fails", f"fails/{window}", None),
                            ("flaps", "flaps", None), ("drained", "drained", WHOLE), ("resumed", "resumed", WHOLE),
                            ("last_failed", "what failed (last failure)", None)],
                    title=f"node health: {len(rows)} nodes, {sum(s['runs'] for s in rows)} verdicts"
                    + (f" (times in {year}, to the minute, as recorded)" if year else ""), compact=True)
    if skipped:
        console(stderr=True).print(f"note: {skipped} lines of the history are not node verdicts (or are longer than "
                                   f"{MAX_LINE_BYTES} bytes or nested deeper than {MAX_DEPTH}); skipped", markup=False)
    if left_out:
        console(stderr=True).print(f"note: {left_out} verdicts of nodes past the first {len(summaries)} left out "
                                   f"(at most {MAX_NODES} nodes, {MAX_HELD} results held: fewer --last, or --node)",
                                   markup=False)
