"""--format nccl-tests: the plain text of nccl-tests (src/util.cu), one block per collective or strategy label, printed
whole or streamed row by row to a pipe (NcclStream)."""
import sys

from benchcore.vocabulary import TYPES
from commbench.cases.registry import record_label
from commbench.output.tables import measurements, nccl_count, ranks_on, row_key, row_order, spread_line

NCCL_PROGRAMS = {"all_to_all": "alltoall"}             # binary name stem where nccl-tests spells it otherwise
NA = "N/A"
HEADERS = [
    "# %10s  %12s  %8s  %6s  %6s           out-of-place                       in-place          " % (("",) * 5),
    "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s " % (
        "size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
        "#wrong"),
    "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s  %7s  %6s  %6s  %6s " % (
        "(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", ""),
]


def nccl_float(value, width):
    """nccl-tests' getFloatStr: 2, else 1, else 0 decimals, whichever fits width; else an exponent."""
    for text in (f"{value:{width}.2f}", f"{value:{width}.1f}", f"{value:{width}.0f}"):
        if len(text) <= width:
            return text
    return f"{value:{width}.{1 if width >= 7 else 0}e}"[:width]


def _side(rec):
    """time algbw busbw #wrong of one placement; N/A for each where the placement was not measured."""
    if rec is None:
        return f"  {NA:>7}  {NA:>6}  {NA:>6}  {NA:>6}"
    wrong = f"{float(rec['wrong']):6g}" if rec.get("wrong") is not None else f"{NA:>6}"
    return (f"  {nccl_float(rec['time_us'], 7)}  {nccl_float(rec['algbw_gbps'], 6)}"
            f"  {nccl_float(rec['busbw_gbps'], 6)}  {wrong}")


def _nccl_type(dtype):
    """nccl-tests' name of a type (the suite's name in); one it has no name for as it is."""
    return TYPES[dtype].nccl_tests if dtype in TYPES else dtype


def nccl_blocks(records):
    """{name: records}: one block per collective, or per strategy label with both placements together."""
    blocks = {}
    for rec in measurements(records):
        blocks.setdefault(block_name(rec), []).append(rec)
    return blocks


def nccl_rows(recs):
    """[(out record or None, in record or None)] in row_key order; a repeated placement opens a new row."""
    rows, within = [], row_order(recs)
    for rec in sorted(recs, key=lambda r: within(row_key(r))):
        slot = 1 if rec["in_place"] else 0
        row = next((r for r in rows if row_key(r[0]) == row_key(rec) and r[1][slot] is None), None)
        if row is None:
            row = (rec, [None, None])
            rows.append(row)
        row[1][slot] = rec
    return [tuple(pair) for _, pair in rows]


def nccl_header(name, first, sizes):
    """A block's opening lines, from its first record (and the sizes known: all of them, or the first alone when
    the rows are printed as they are measured; the record's min_bytes/max_bytes/step_factor say what was asked)."""
    program = name if first.get("strategy") else NCCL_PROGRAMS.get(name, name) + "_perf"
    step = sizes[1] // sizes[0] if len(sizes) > 1 else 1
    lines = [f"# Collective test starting: {program}",
             f"# nThread 1 nGpus 1 minBytes {first.get('min_bytes', sizes[0])} maxBytes "   # as requested (-b -e -f)
             f"{first.get('max_bytes', sizes[-1])} step: {first.get('step_factor', step)}(factor) "
             f"warmup iters: {first['warmup']} iters: {first['iters']} agg iters: {first.get('agg_iters', 1)} "
             f"validation: {int(first.get('wrong') is not None)} "
             f"graph: {int(first.get('time_source') == 'cuda_graph')} unalign: 0"]
    if first.get("blocking"):
        lines.append("# Blocking Enabled: wait after each inner iteration (-m), no barrier ")
    return lines + ["#", f"# commbench: {first['backend']}, {ranks_on(first)} "
                    f"({', '.join(first.get('hosts') or [])}), time over ranks: {first.get('agg', 'avg')}", "#",
                    *HEADERS]


def nccl_row(out, inp):
    """One row: a size's two placements (either None where not measured)."""
    rec = out or inp
    root = rec.get("root") if rec.get("root") is not None else -1
    return (f"{rec['size_bytes']:12d}  {nccl_count(rec):12d}  {_nccl_type(rec['dtype']):>8}"
            f"  {rec.get('op') or 'none':>6}  {root:6d}{_side(out)}{_side(inp)}")


def nccl_footer(name, recs):
    """A block's closing lines, over all its records."""
    program = name if recs[0].get("strategy") else NCCL_PROGRAMS.get(name, name) + "_perf"
    checked = any(r.get("wrong") is not None for r in recs)
    failed = sum(1 for r in recs if r.get("wrong"))
    line, _ = spread_line(recs)
    lines = [line] if line else []
    busbws = [r["busbw_gbps"] for r in recs if r.get("busbw_gbps") is not None]
    lines.append(f"# {'Out of bounds values':<20} : {failed} {'FAILED' if failed else 'OK'}" if checked else
                 f"# {'Out of bounds values':<20} : {NA} (not checked: --no-check)")
    lines.append(f"# {'Avg bus bandwidth':<20} : {sum(busbws) / len(busbws) if busbws else 0:g} ")
    return lines + ["#", f"# Collective test concluded: {program}"]


def nccl_block(name, recs):
    return (nccl_header(name, recs[0], sorted({r["size_bytes"] for r in recs}))
            + [nccl_row(out, inp) for out, inp in nccl_rows(recs)] + nccl_footer(name, recs))


def block_name(rec):
    """The block a record belongs to: its collective, or its strategy's label (both placements together)."""
    return record_label({**rec, "in_place": None}) if rec.get("strategy") else rec["collective"]


def nccl_tests_text(records):
    return "".join(line + "\n" for name, recs in nccl_blocks(records).items() for line in nccl_block(name, recs))


def print_nccl_tests(records):
    sys.stdout.write(nccl_tests_text(records))
    sys.stdout.flush()


class NcclStream:
    """--format nccl-tests in a pipe, as nccl-tests prints it: each row on stdout as soon as it is measured (both
    placements of a size, or one where the next record shows the other will not come), the block's header before
    its first row, its footer when the run ends. A run of several collectives measures them interleaved, size by
    size: the first block's rows stream; the others' are held and printed whole after it. A record writer (write,
    close) beside the user's --out. places: {collective: the placements its configs measure} (the plan's), so that a
    row is printed the moment its last placement is measured; a strategy's block learns them from its rows."""

    def __init__(self, places=None, stream=None):
        self.stream, self.places = stream or sys.stdout, places or {}
        self.blocks, self.pending = {}, None    # name -> records; the streamed block's row waiting for its pair

    def write(self, rec):
        if rec.get("event") or rec.get("collective") is None:
            return
        name = block_name(rec)
        recs = self.blocks.setdefault(name, [])
        recs.append(rec)
        if name != next(iter(self.blocks)):
            return
        if len(recs) == 1:
            self._lines(nccl_header(name, rec, [rec["size_bytes"]]))
        slot = 1 if rec["in_place"] else 0
        if self.pending and (row_key(self.pending[0] or self.pending[1]) != row_key(rec) or self.pending[slot]):
            self._flush()
        self.pending = self.pending or [None, None]
        self.pending[slot] = rec
        places = self.places.get(rec["collective"]) if not rec.get("strategy") else None
        if places is None:  # a strategy: what its rows so far measured
            places = {r["in_place"] for r in recs}
        if all(self.pending[1 if p else 0] for p in places):
            self._flush()

    def _flush(self):
        if self.pending:
            self._lines([nccl_row(*self.pending)])
        self.pending = None

    def _lines(self, lines):
        try:
            self.stream.write("".join(line + "\n" for line in lines))
            self.stream.flush()
        except (BrokenPipeError, ValueError):   # the reader (head, a closed pager) left: the run goes on
            pass

    def close(self):
        """The streamed block's last row and footer, then every other block whole."""
        self._flush()
        for i, (name, recs) in enumerate(self.blocks.items()):
            self._lines(nccl_footer(name, recs) if i == 0 else nccl_block(name, recs))
        self.blocks = {}
