"""CSV through benchcore.report.render.emit, as both tools write it; tables piped at the README's 100 columns."""
import csv
import io
import json

from benchcore.report.render import emit, print_table


def test_csv_writes_lists_and_objects_as_json_and_keeps_integers_whole(capsys):
    records = [{"tool": "commbench", "root": 0, "hosts": ["a", "b"], "env": {"NCCL_ALGO": "Ring"}, "time_us": 1.5},
               {"tool": "commbench", "root": None, "hosts": ["a"], "env": {}, "time_us": 2.0},
               {"tool": "commbench", "root": 3, "hosts": [], "env": {"X": "1"}, "time_us": None}]
    emit(records, "csv", None)
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["root"] for r in rows] == ["0", "", "3"]  # before: 0.0, '', 3.0
    assert [json.loads(r["hosts"]) for r in rows] == [["a", "b"], ["a"], []]  # before: Python repr "['a', 'b']"
    assert [json.loads(r["env"]) for r in rows] == [{"NCCL_ALGO": "Ring"}, {}, {"X": "1"}]  # before: env.X columns
    assert [r["time_us"] for r in rows] == ["1.5", "2.0", ""]


def test_a_piped_table_wraps_its_texts_to_100_columns_and_never_cuts_a_name_or_number(capsys, monkeypatch):
    """A text cell (a sentence, a path) wraps; a name (label) and a number stay whole (commbench env was 735 columns
    wide piped, iobench mounts 519 with a loop device's backing file)."""
    monkeypatch.delenv("COLUMNS", raising=False)
    meaning = "What PyTorch does on a NCCL error/timeout: 0 none, 1 tear down, 2 clean up only, 3 skip clean-up."
    device = "loop0 (loop device, backing file /tmp/pytest-of-root/pytest-225/loop-xfs0/fs/disk.img)"
    rows = [{"label": "TORCH_NCCL_ASYNC_ERROR_HANDLING", "meaning": meaning, "device": device, "n": 123456789.125}]
    print_table(rows, [("label", "variable", None), ("meaning", "meaning", None), ("device", "device", None),
                       ("n", "n", ".3f")])
    text = capsys.readouterr().out
    assert max(len(line) for line in text.splitlines()) <= 100, text
    assert "TORCH_NCCL_ASYNC_ERROR_HANDLING" in text and "123456789.125" in text and "\u2026" not in text
    words = " ".join(part.strip() for line in text.splitlines() for part in line.split("\u2502")[2:3])
    assert " ".join(words.split()) == meaning, text   # the sentence whole, in its column's lines


def test_a_table_whose_columns_cannot_narrow_enough_is_printed_wider_never_with_an_empty_column(capsys, monkeypatch):
    """At 80 columns torch-ckpt's table had its 'ratio range' column squeezed to nothing (rich narrows a column
    below its words when the least widths do not fit); pairs --simulate lost four columns so: printed wider."""
    monkeypatch.setenv("COLUMNS", "80")
    rows = [{"label": "torch-save write", "ranks": 2, "reps": 3, "mbps": 600.0, "ratio": 0.86, "spread": "0.80-0.90",
             "device": None, "tensors": 8, "wrong": 0}]
    print_table(rows, [("label", "checkpoint", None), ("ranks", "ranks", "d"), ("reps", "reps", "d"),
                       ("mbps", "MB/s median", ".1f"), ("ratio", "ratio to fio", ".2f"), ("spread", "ratio range", None),
                       ("device", "device x", ".2f"), ("tensors", "tensors", "d"), ("wrong", "wrong", "d")],
                title="torch checkpoint (durable write incl. directory fsync; buffered read after a cache drop)")
    text = capsys.readouterr().out
    assert "0.80-0.90" in text and "\u2502\u2502" not in text and "\u2533\u2533" not in text, text
