"""Numbers beyond any run's (N18): a size, count or rank of 2**63 or more read from a foreign file is refused in one
line naming the file and the row, never quoted; in the suite's own records such a record is skipped with a warning,
and report, diff and the CSV never end in an OverflowError."""
import json
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, run_tool

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FOREIGN = FIXTURES / "foreign"
BIG = 10 ** 30


@pytest.fixture
def rccl_big(tmp_path):
    doc = json.loads((FOREIGN / "rccl-tests-Z-json-all_gather.json").read_text())
    doc[2]["size"] = BIG
    path = tmp_path / "rccl-big-all_gather.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.mark.parametrize("command", ["import", "diff", "report"])
def test_a_foreign_size_beyond_2_63_is_refused_naming_the_row(tmp_path, rccl_big, command):
    args = {"import": [rccl_big], "diff": [rccl_big, rccl_big], "report": [rccl_big, "--out", tmp_path / "r"]}
    done = run_tool("commbench", command, *args[command], timeout=120)
    assert_one_line_error(done, f"{rccl_big}: rccl-tests JSON line 1 [2].size is beyond 2**63 - 1")
    assert str(BIG) not in done.stderr and "931322574615478515625" not in done.stdout + done.stderr
    assert not (tmp_path / "r").exists()


def test_a_log_row_beyond_2_63_is_skipped_naming_its_line(tmp_path):
    text = (FOREIGN / "nccl-tests-2.9-broadcast.log").read_text()
    row = next(ln for ln in text.splitlines() if ln.split()[:1] == ["4194304"])
    log = tmp_path / "big.log"
    log.write_text(text.replace(row, row.replace("4194304", str(BIG), 1)))
    done = run_tool("commbench", "import", log, timeout=120)
    assert done.returncode == 0 and str(BIG) not in done.stdout + done.stderr, done.stderr
    assert "1 row(s) of the broadcast table fit no header (or hold a number beyond any run's) and are not read; " \
           "the first on line 12" in done.stderr


def test_records_beyond_2_63_are_skipped_by_report_and_diff(tmp_path):
    lines = (FIXTURES / "overlap-ddp-pipelined-gloo.jsonl").read_text().splitlines()
    first, second = json.loads(lines[0]), json.loads(lines[1])
    first["size_bytes"], second["busbw_gbps"], second["time_us"] = BIG, BIG, 1e300
    path = tmp_path / "big.jsonl"
    path.write_text("\n".join([json.dumps(first), json.dumps(second), *lines[2:]]) + "\n")
    done = run_tool("commbench", "report", path, "--out", tmp_path / "r", timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert "1 record skipped: size_bytes is beyond 2**63 - 1" in done.stderr
    assert len((tmp_path / "r" / "results.csv").read_text().splitlines()) == len(lines)   # a header and the rest
    done = run_tool("commbench", "diff", path, path, timeout=120)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
