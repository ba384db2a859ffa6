"""The default table (tables.print_collective_tables) in a pipe, row by row as it is measured: a sweep's
rows reach a Slurm log or `tee` as nccl-tests' do, not all at its end (--format nccl-tests: nccltests.NcclStream)."""
import sys

from benchcore.report.render import print_piece
from commbench.cases.registry import CASES
from commbench.output.tables import (PLACE_COLUMNS, ROW_COLUMNS, SIDES, collective_rows, place_columns,
                                     print_collective_tables, row_key, row_order, table_console, table_title)

GAP = 2               # characters between two columns of a compact table (benchcore/report/render.py COMPACT)
BW_WIDTH = 7          # algbw, busbw: up to 999.999 GB/s
FLOAT_WIDTH = 7       # time, model (us): at least SLOW_US's 7 characters; up to what the largest size takes at
SLOW_US, BYTES_PER_US = 99999.9, 1e3   # 1 GB/s (BYTES_PER_US) where the console's width leaves room
FIXED = {"algbw_gbps": BW_WIDTH, "busbw_gbps": BW_WIDTH, "link_utilization": 4, "spread": 3}   # util: 0.00-9.99


def plan_widths(plan, side, width):
    """The first table's column widths before any row is measured, from the plan: its sizes (count is at most the
    size), types, ops and roots; the headers; BW_WIDTH; the time and model columns share what the console's width
    leaves (FLOAT_WIDTH each at least). A value wider still widens its own row (print_piece)."""
    big = max(plan.sizes)
    cfgs = plan.configs
    values = {"size": len(str(big)), "count": len(str(big)), "type": max(len(c["dtype"]) for c in cfgs),
              "redop": max(len(c.get("op") or "none") for c in cfgs),
              "root": max(len(str(c["root"] if c.get("root") is not None else -1)) for c in cfgs), **FIXED}
    heads = {key: max(len(line) for line in head.split("\n")) for key, head, _ in ROW_COLUMNS + PLACE_COLUMNS}
    widths = {key: max(values.get(key, 0), heads[key]) for key in heads}
    need = len(f"{max(big / BYTES_PER_US, SLOW_US):.1f}")
    room = width - GAP * (len(heads) - 1) - sum(w for k, w in widths.items() if k not in ("time_us",
                                                                                        "predicted_time_us"))
    widths["time_us"] = min(need, max(FLOAT_WIDTH, room - FLOAT_WIDTH))
    widths["predicted_time_us"] = max(heads["predicted_time_us"], min(need, room - widths["time_us"]))
    return [widths[key.removeprefix(f"{side}_")] for key, _, _ in place_columns(side)]


class TableStream:
    """A record writer (write; close(records) prints the rest) beside the user's --out: the first table (the first
    record's collective, its out-of-place table where the plan measures that placement, else its in-place one) has
    its title and head printed with its first row and each row as soon as its placement is measured, at the plan's
    widths (plan_widths); at the end, that table's rows of another type, op, root or cycle than the first row's (the
    table lists them after its sizes), every other table whole, and the footer lines (print_collective_tables)."""

    def __init__(self, plan, out=None):
        self.plan, self.out = plan, out or table_console()
        self.places = {}
        for cfg in plan.configs:
            self.places.setdefault(CASES[cfg["case"]].collective, set()).add(bool(cfg.get("in_place")))
        self.table, self.first, self.keys = None, None, []   # (collective, side); its first record; rows printed

    def write(self, rec):
        if rec.get("event") or rec.get("collective") is None:
            return
        if self.table is None:
            places = self.places.get(rec["collective"], {rec["in_place"]})
            self.table, self.first = (rec["collective"], SIDES[0][0] if False in places else SIDES[1][0]), rec
            self.columns = place_columns(self.table[1])
            self.widths = plan_widths(self.plan, self.table[1], self.out.width)
        key = row_key(rec)
        if (rec["collective"], SIDES[rec["in_place"]][0]) != self.table or key[:4] != row_key(self.first)[:4] \
                or key in self.keys:
            return
        title = None if self.keys else table_title(self.table[0], dict(SIDES)[self.table[1]], self.first)
        self.keys.append(key)
        try:
            print_piece(collective_rows([rec]), self.columns, self.widths, self.out, title)
            self.out.file.flush()
        except (BrokenPipeError, ValueError):   # the reader (head, a closed pager) left: the run goes on
            pass

    def finish(self, mine, recs, out):
        """The streamed table's rows not printed yet (mine: its rows, in collective_rows' order), at its widths."""
        keys = sorted({row_key(r) for r in recs if r["collective"] == self.table[0]}, key=row_order(recs))
        print_piece([row for key, row in zip(keys, mine) if key not in self.keys], self.columns, self.widths, out)

    def close(self, records):
        print_collective_tables(records, self.out, self if self.keys else None)


def table_stream(rounds, output):
    """A TableStream where stdout is a pipe and --format table, for one launch spec whose every row is measured once
    (with --repeats or a time budget a table shows a row's last repeat); else None (the tables at the end)."""
    spec, plan = rounds[0]
    if output.fmt != "table" or sys.stdout.isatty() or len(rounds) > 1 or plan.repeats > 1 or plan.time_budget \
            or spec.dry_run:
        return None
    return TableStream(plan)
