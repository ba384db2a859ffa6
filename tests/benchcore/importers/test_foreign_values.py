"""Values of foreign result files that no writer of them would put there: a size or count that is no whole number
is refused in one line by import, diff and report (no traceback); a text of 200,000 characters (a type, an op, a
host, an environment value, a fio job) is cut where the record is made, and the record says so, so that tables,
legends and plots of it stay small."""
import json
import re
from pathlib import Path

import pytest

from benchcore.inputs import MAX_FIELD_CHARS
from benchcore.results import read
from tests.conftest import assert_one_line_error, run_tool

FOREIGN = Path(__file__).resolve().parents[2] / "fixtures" / "foreign"
LONG = "x" * 100000   # Python's csv reads a field of 131,072 characters at most
CUT = re.compile(r"\.\.\. \(cut from \d+ characters\)")


def nccl_json(edit):
    def make():
        doc = json.loads((FOREIGN / "nccl-tests-2.19-J-all_reduce.json").read_text())
        edit(doc)
        return json.dumps(doc)
    return make


def replaced(name, old, new):
    def make():
        text = (FOREIGN / name).read_text()
        assert old in text
        return text.replace(old, new, 1)
    return make


def _set(path, value):
    def edit(doc):
        *keys, last = path
        for k in keys:
            doc = doc[k]
        doc[last] = value
    return edit


NOT_WHOLE = [   # (file name, its text, the field named)
    ("a.json", nccl_json(_set(("results", 0, "size"), "\u00b2")), "results[0].size is text, not a count"),
    ("a.json", nccl_json(_set(("results", 0, "count"), "\u00b2")), "results[0].count is text, not a count"),
    ("a.json", nccl_json(_set(("results", 0, "size"), "1" * 5000)), "results[0].size is beyond 2**63 - 1"),
    ("b.json", replaced("rccl-tests-Z-json-all_gather.json", '"size":1048576', '"size":"\u00b2"'),
     "[0].size is text, not a count"),
    ("c.csv", replaced("rccl-tests-Z-csv-all_reduce.csv", ",1024,", ",\u00b2,"),
     "[0].size is text, not a count"),
]


@pytest.mark.parametrize("command", ["import", "diff", "report"])
@pytest.mark.parametrize("name, make, needle", NOT_WHOLE, ids=[n[2][:40] for n in NOT_WHOLE])
def test_a_size_or_count_that_is_no_whole_number_is_one_line(tmp_path, command, name, make, needle):
    path = tmp_path / name
    path.write_text(make())
    args = {"import": [path], "diff": [path, path], "report": [path, "--out", tmp_path / "report"]}[command]
    done = run_tool("commbench", command, *args, timeout=120)
    assert_one_line_error(done, needle)
    assert done.returncode == 2


LONG_TEXTS = [   # (file name, its text, the record field that holds the long text)
    ("type.json", nccl_json(lambda d: d["results"][0].update(type="t" + LONG)), "dtype"),
    ("op.json", nccl_json(lambda d: d["results"][0].update(redop="o" + LONG)), "op"),
    ("host.json", nccl_json(lambda d: d["config"]["devices"][0].update(hostname="h" + LONG)), "hosts"),
    ("env.json", nccl_json(lambda d: d["env"].append("NCCL_ALGO=a" + LONG)), "env"),
    ("type-rccl.json", replaced("rccl-tests-Z-json-all_gather.json", '"type":"float"', f'"type":"t{LONG}"'), "dtype"),
    ("type-rccl.csv", replaced("rccl-tests-Z-csv-all_reduce.csv", '"half"', f'"t{LONG}"'), "dtype"),
    ("type.log", replaced("nccl-tests-2.0-all_gather.log", "   float     4.51", f"   t{LONG}     4.51"), "dtype"),
    ("host.log", replaced("nccl-tests-2.0-all_gather.log", "on     node01 device  0", f"on h{LONG} device  0"),
     "hosts"),
    ("env.log", replaced("nccl-tests-2.0-all_gather.log", "environment to ib0", f"environment to i{LONG}"), "env"),
    ("job.json", replaced("fio-3.1.json", '"jobname": "restore-read"', f'"jobname": "j{LONG}"'), "profile"),
    ("version.json", replaced("fio-3.1.json", '"fio version": "fio-3.1"', f'"fio version": "fio-3.1{LONG}"'),
     "fio_version"),
]


def texts(value):
    """Every text in a record's field (a list's, a mapping's keys and values)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, (list, dict)):
        for v in (value if isinstance(value, list) else [*value, *value.values()]):
            yield from texts(v)


@pytest.mark.parametrize("name, make, field", LONG_TEXTS, ids=[n for n, _, _ in LONG_TEXTS])
def test_a_long_text_is_cut_where_the_record_is_made_and_says_so(tmp_path, name, make, field):
    path = tmp_path / name
    path.write_text(make())
    records = [r for r in read.load(str(path)).records if not r.get("event")]
    assert records
    for rec in records:   # the file's name is the caller's own, an event's reason is bounded where it is written
        assert all(len(t) <= MAX_FIELD_CHARS or CUT.fullmatch(t, MAX_FIELD_CHARS) for k, v in rec.items()
                   if k != "source_file" for t in texts(v)), rec
    assert any(CUT.fullmatch(t, MAX_FIELD_CHARS) for t in texts(records[0][field]))


def test_an_escape_sequence_in_a_foreign_value_never_reaches_the_terminal_or_a_report(tmp_path):
    """An nccl-tests JSON whose type holds an OSC sequence (retitle the terminal) and a newline: diff printed it
    raw and report.md/html kept it (issue 38 item 6). The record holds the text with each one a space."""
    good = FOREIGN / "nccl-tests-2.19-J-all_reduce.json"
    evil = tmp_path / "evil.json"
    evil.write_text(re.sub(r'"type": ?"float"', '"type": "float\\\\u001b]0;pwned\\\\u0007\\\\n"', good.read_text()))
    assert "\\u001b" in evil.read_text()
    diff = run_tool("commbench", "diff", good, evil, timeout=120)
    report = run_tool("commbench", "report", evil, "--out", tmp_path / "rep", timeout=120)
    assert report.returncode == 0, report.stderr
    shown = diff.stdout + diff.stderr + report.stdout + report.stderr + (tmp_path / "rep" / "report.md").read_text() \
        + (tmp_path / "rep" / "report.html").read_text()
    assert "\x1b" not in shown and "\x07" not in shown
    assert {r["dtype"] for r in read.load(str(evil)).records if not r.get("event")} == {"float  "}   # the OSC sequence one space, the newline another
