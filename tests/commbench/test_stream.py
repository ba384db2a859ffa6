"""In a pipe each row is printed as it is measured, as nccl-tests does (issue 49 item 7), in --format nccl-tests and
in the default table: read line by line from a real run's stdout while it runs."""
import io
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
from rich.console import Console

from commbench.output.nccltests import nccl_tests_text
from commbench.output.stream import TableStream, table_stream
from commbench.output.tables import print_collective_tables
from tests.commbench.test_output import HEAD, table_heads
from tests.conftest import BIN, read_records


def read_while_running(out, first_row, *args):
    """Run `commbench run --nproc-per-node 2 ARGS --quiet --out out` with stdout a pipe at 100 columns, reading it line
    by line: (its lines, whether it still ran when first_row(line) first held, the records --out had by then: --out
    has each record as measured)."""
    proc = subprocess.Popen([BIN / "commbench", "run", "--collective", "all_reduce,all_gather", "--nproc-per-node", "2",
                             *args, "--quiet", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "100"})
    try:
        lines, running_at_first_row, recorded = [], None, None
        for line in proc.stdout:
            lines.append(line)
            if running_at_first_row is None and first_row(line):
                running_at_first_row, recorded = proc.poll() is None, len(out.read_text().splitlines())
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return lines, running_at_first_row, recorded


@pytest.mark.slow
def test_rows_reach_a_pipe_while_the_run_goes_on(tmp_path):
    """all_reduce and all_gather, 1K to 4M: the first row is read while the run still measures (the larger
    sizes take seconds more); all_reduce's rows stream, all_gather's block follows whole; the text is the same
    nccl-tests text the records make, printed once."""
    out = tmp_path / "r.jsonl"
    lines, running_at_first_row, recorded = read_while_running(
        out, lambda line: line[:1] != "#", "-b", "1K", "-e", "4M", "-f", "4", "-n", "10", "-w", "1", "--format",
        "nccl-tests")
    text = "".join(lines)
    # still running alone holds for text printed at the end too (the process exits after it): the records tell
    assert running_at_first_row and recorded < len(read_records(out)) // 2, ("the first row came after the run",
                                                                             recorded, text)
    assert text == nccl_tests_text(read_records(out))    # printed once, in the records' order
    assert text.count("# Collective test starting: all_reduce_perf") == 1
    assert text.index("# Collective test concluded: all_reduce_perf") < text.index(
        "# Collective test starting: all_gather_perf")


def words(text):
    """A table's text as its words, rules left out: the same table whatever its columns' widths or title's wrap."""
    return [w for w in text.split() if set(w) != {"\u2500"}]


@pytest.mark.slow
def test_table_rows_reach_a_pipe_while_the_run_goes_on(tmp_path):
    """The default table in a pipe: all_reduce (in place on Gloo) and all_gather, 8 B to 64K: the first table's first
    row is read while the run still measures; the whole text is the table the records make (the same titles, heads,
    cells and footer), within the pipe's 100 columns; a value wider than the plan's widths widens its row alone."""
    out = tmp_path / "r.jsonl"
    lines, running_at_first_row, recorded = read_while_running(
        out, lambda line: line.split()[:1] == ["8"], "-b", "8", "-e", "64K", "-f", "2", "-n", "10", "-w", "1")
    text, recs = "".join(lines), read_records(out)
    assert running_at_first_row and recorded < len(recs) // 2, ("the first row came after the run", recorded, text)
    whole = io.StringIO()
    print_collective_tables(recs, out=Console(file=whole, width=100, highlight=False, markup=False, soft_wrap=False))
    assert words(text)[:len(words(whole.getvalue()))] == words(whole.getvalue()), text
    assert [t.split("  (")[0] for t, _ in table_heads(text)] == [
        "all_reduce in-place", "all_gather out-of-place", "all_gather in-place"], text
    assert all(head == HEAD for _, head in table_heads(text)), text
    assert max(len(line) for line in lines if not line.startswith("#")) <= 100, text
    rows = [line for line in lines if line.split()[:1] and line.split()[0].isdigit()]
    assert len(rows) == 3 * 14 and lines.index(rows[0]) < lines.index(next(ln for ln in lines if "all_gather" in ln))
    # a time no plan foresaw (an hour): its row is wider, the number whole, every other row as wide as before
    slow = [{**r, "time_us": 3.6e9} if r["size_bytes"] == 256 else r for r in recs]
    printed = io.StringIO()
    stream = TableStream(SimpleNamespace(sizes=[8, 65536], configs=[{"case": c, "dtype": "float32", "op": "sum",
                                                                       "in_place": True, "root": None}
                                                                      for c in ("all_reduce", "all_gather")]),
                         out=Console(file=printed, width=100, highlight=False, markup=False, soft_wrap=False))
    for rec in slow:
        stream.write(rec)
    stream.close(slow)
    first = printed.getvalue().split(" out-of-place")[0].splitlines()
    widths = {len(line) for line in first if line.split()[:1] and line.split()[0].isdigit()}
    assert "3600000000.0" in printed.getvalue() and "\u2026" not in printed.getvalue() and len(widths) == 2, first


@pytest.mark.parametrize("fmt, rounds, repeats, budget, streams", [
    ("table", 1, 1, None, True), ("json", 1, 1, None, False), ("nccl-tests", 1, 1, None, False),
    ("table", 2, 1, None, False), ("table", 1, 3, None, False), ("table", 1, 1, 60.0, False)])
def test_the_table_streams_only_where_each_row_is_measured_once(fmt, rounds, repeats, budget, streams, monkeypatch):
    """In a pipe (stdout not a terminal), --format table alone; not with --backends (several launch specs),
    --repeats or a time budget (a table shows a row's last repeat): those print at the end, as a terminal does."""
    plan = SimpleNamespace(sizes=[8], configs=[{"case": "all_reduce", "dtype": "float32", "op": "sum", "root": None}],
                           repeats=repeats, time_budget=budget)
    spec = SimpleNamespace(dry_run=False)
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    found = table_stream([(spec, plan)] * rounds, SimpleNamespace(fmt=fmt))
    assert isinstance(found, TableStream) if streams else found is None
