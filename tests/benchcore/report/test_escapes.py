"""One printable filter (benchcore.errors.printable) between the text of a record, a file, a marker or a host and a
terminal or a written file (D21, D22): a record whose run_id or env holds ESC c (terminal reset), a C1 CSI or BEL
reaches report.md, report.html, results.csv, the plots and diff's table as spaces; the error printer, the table
renderer and the CSV writer apply it whatever the caller passed."""
import json
import re
from pathlib import Path

import click
import pytest

from benchcore.errors import UserError, printable, run_cli
from benchcore.report.render import csv_frame, print_table
from tests.conftest import run_tool

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "overlap-ddp-pipelined-gloo.jsonl"
EVIL = "R\x1bc\x9b2J\x07X\x1b]0;PWNED\x1b\\"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")     # what no output may hold (tab and newline are layout)


@pytest.fixture
def evil_records(tmp_path):
    path = tmp_path / "evil.jsonl"
    with open(path, "w") as out:
        for line in FIXTURE.read_text().splitlines():
            rec = json.loads(line)
            rec["run_id"], rec["env"] = EVIL, {"NCCL_ALGO": "v\x1bc\x9b31mred"}
            out.write(json.dumps(rec) + "\n")
    return path


def test_report_and_diff_of_records_holding_escapes_show_them_as_spaces(tmp_path, evil_records):
    done = run_tool("commbench", "report", evil_records, "--out", tmp_path / "r", timeout=120)
    assert done.returncode == 0 and "Glyph" not in done.stderr, done.stderr    # the plots drew no control glyph
    for name in ("report.md", "report.html", "results.csv"):
        text = (tmp_path / "r" / name).read_text(encoding="utf-8")
        assert not CONTROL.search(text), (name, CONTROL.findall(text))
    assert "*run R X*" in (tmp_path / "r" / "report.md").read_text()     # the readable rest stays
    assert ",R   X ,all_reduce," in (tmp_path / "r" / "results.csv").read_text()
    done = run_tool("commbench", "diff", evil_records, evil_records, timeout=120)
    assert done.returncode == 0 and "NCCL_ALGO=v  red" in done.stdout
    assert not CONTROL.search(done.stdout + done.stderr)


def test_the_table_renderer_and_the_csv_writer_filter_whatever_they_are_given(capsys):
    print_table([{"label": EVIL, "v": "ok\x07"}], [("label", "what\x1bc", None), ("v", "v", None)], title=EVIL)
    out = capsys.readouterr().out
    assert "R   X" in out and "PWNED" not in out and not CONTROL.search(out)   # an OSC is dropped whole
    frame = csv_frame([{"run_id": EVIL, "host": "h\u00e9\u4e2d"}])
    assert frame["run_id"][0] == printable(EVIL) and frame["host"][0] == "h\u00e9\u4e2d"   # Unicode kept


def test_the_error_printer_filters_every_error_line(capsys):
    @click.group()
    def group():
        pass

    @group.command()
    def bad():
        raise UserError(f"run {EVIL} failed")

    with pytest.raises(SystemExit) as exit_:
        run_cli_with(group, ["bad"])
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("error: run R") and not CONTROL.search(err)


def run_cli_with(group, argv):
    import sys
    saved, sys.argv = sys.argv, ["prog", *argv]
    try:
        run_cli(group)
    finally:
        sys.argv = saved


def test_every_console_note_is_filtered_line_by_line(capsys):
    """judge's diagnoses, health's notes, model's lines: whatever a command prints through render.console()."""
    from benchcore.report.render import console
    console().print(f"[algorithm from NCCL_ALGO=Ring{EVIL}]\nsecond line\x07")
    out = capsys.readouterr().out
    assert out.splitlines() == ["[algorithm from NCCL_ALGO=RingR   X ]", "second line "] and not CONTROL.search(out)
