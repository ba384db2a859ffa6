"""CSV through benchcore.report.render.emit, as both tools write it."""
import csv
import io
import json

from benchcore.report.render import emit


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
