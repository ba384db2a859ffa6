"""How a results file is recognised (N22): the suite's own JSONL is read as records whatever the length of its lines
up to a stated cap (a 5,000-node run's record line is 87 KB, a 100,000-node run's about 2 MB), and a first line too
deep to parse ends in one clear line or a warning naming it, never in another format's error or a RecursionError."""
import json
from pathlib import Path

from benchcore.inputs import MAX_RECORD_BYTES
from benchcore.results import read
from tests.conftest import assert_one_line_error, run_tool

FIXTURE = Path(__file__).resolve().parents[2] / "fixtures" / "overlap-ddp-pipelined-gloo.jsonl"
LINES = FIXTURE.read_text().splitlines()


def fleet(tmp_path, nodes, lines=LINES):
    """The fixture's records as a run on `nodes` nodes wrote them (every record lists its hosts)."""
    path = tmp_path / f"fleet-{nodes}.jsonl"
    with open(path, "w") as out:
        for line in lines:
            rec = json.loads(line)
            rec["hosts"] = [f"gpu-node-{i:06d}" for i in range(nodes)]
            out.write(json.dumps(rec) + "\n")
    return path


def test_records_of_a_5000_node_run_diff_and_report(tmp_path):
    path = fleet(tmp_path, 5000)
    assert len(path.read_text().splitlines()[0]) > read.SNIFF_BYTES      # no line whole in the old sniff
    done = run_tool("commbench", "diff", path, path, timeout=120)
    assert done.returncode == 0 and "fio" not in done.stderr, done.stderr
    assert "summary ddp: geometric mean unchanged over 3 rows" in done.stdout
    done = run_tool("commbench", "report", path, "--out", tmp_path / "r", timeout=120)
    assert done.returncode == 0 and done.stderr.startswith("wrote report.md"), done.stderr


def test_a_100000_node_record_is_within_the_line_cap(tmp_path):
    path = fleet(tmp_path, 100_000, LINES[:2])
    assert 1 << 20 < path.stat().st_size // 2 < MAX_RECORD_BYTES
    fmt, recs = read.records_of(str(path))
    assert fmt == "records" and [len(r["hosts"]) for r in recs] == [100_000] * 2


def test_a_record_too_deep_to_parse_is_skipped_with_a_warning_and_the_rest_kept(tmp_path, capsys):
    path = tmp_path / "deep.jsonl"
    first = LINES[0][:-1] + ', "x": ' + "[" * 200_000 + "]" * 200_000 + "}"
    path.write_text("\n".join([first, *LINES]) + "\n")
    fmt, recs = read.records_of(str(path))
    assert fmt == "records" and len(list(recs)) == len(LINES)
    assert f"{path}:1: not a JSON record" in capsys.readouterr().err


def test_a_deep_or_long_file_that_is_no_record_ends_in_one_line(tmp_path):
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000 + "\n")
    assert_one_line_error(run_tool("commbench", "diff", deep, deep, timeout=120), "neither")
    deep.write_text('{"a": ' + "[" * 200_000 + "]" * 200_000 + "}\n")
    assert_one_line_error(run_tool("commbench", "report", deep, "--out", tmp_path / "r", timeout=120), "deep")
    long = tmp_path / "long.jsonl"       # a record line past the cap: cut, so skipped with a warning; none left
    long.write_text(LINES[0][:-1] + ', "x": "' + "y" * MAX_RECORD_BYTES + '"}\n')
    done = run_tool("commbench", "diff", long, long, timeout=120)
    assert "Traceback" not in done.stderr and "fio" not in done.stderr and f"{long}:1:" in done.stderr, done.stderr
