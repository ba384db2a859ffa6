"""`import` of nccl-tests output as people paste it: a tagged log indented into a document, and rows whose header
lines were cut (read with --collective, their columns inferred from the number of fields each version prints).

Real excerpts, kept as published:
- nccl-tests-2.13-indented-tagged-all_reduce.log: aws-ia/terraform-aws-eks-blueprints,
  patterns/nvidia-gpu-efa/README.md (commit 0426f2b9), the all_reduce_perf log of its EFA test, indented by four
  spaces inside a list item, each line tagged by mpirun ('[1,0]<stdout>:').
- nccl-tests-issue-167-rows-only.txt: the rows (no header) pasted in NVIDIA/nccl-tests issue #167
  ("all_reduce_perf(--op='sum') get wrong results when size is over specific value"), all_reduce_perf -o max/min.
- mscclpp-test-pr-87-rows-only.txt: a row of mscclpp-test's alltoall (microsoft/mscclpp pull request #87), a tool
  that prints nccl-tests' look without its type and op columns.
The other generations' rows are those of the logs test_import.py reads, their header lines cut here.
"""
import re
from pathlib import Path

import pytest

from benchcore.errors import UserError
from benchcore.importers.nccl_rows import inferred
from benchcore.results import read

FOREIGN = Path(__file__).resolve().parents[2] / "fixtures" / "foreign"


def measured(path, collective=None):
    recs = list(read.records_of(str(path), collective)[1])
    return ([(r["size_bytes"], r["op"], r["in_place"], r["time_us"], r["algbw_gbps"], r["busbw_gbps"], r["wrong"])
             for r in recs if not r.get("event")], [r["reason"] for r in recs if r.get("event")])


def test_an_indented_tagged_log_imports_whole():
    rows, events = measured(FOREIGN / "nccl-tests-2.13-indented-tagged-all_reduce.log")
    assert len(rows) == 2 * 32 and events == []          # 32 sizes, both placements; the footer was read
    assert rows[0] == (8, "sum", False, 87.96, 0.0, 0.0, 0)
    assert rows[-1] == (17179869184, "sum", True, 66717.0, 257.5, 482.82, 0)


def test_rows_without_a_header_import_with_collective():
    path = FOREIGN / "nccl-tests-issue-167-rows-only.txt"
    rows, events = measured(path, "all_reduce")
    assert len(rows) == 22
    assert rows[0] == (199680, "max", False, 125.8, 1.59, 2.98, 0)
    assert rows[-1] == (200704, "min", True, 125.4, 1.6, 3.0, 0)
    assert len(events) == 1 and "read as nccl-tests 2.13 on prints them" in events[0]
    with pytest.raises(UserError, match="no collective named: give it as --collective"):
        measured(path)


def test_rows_of_no_nccl_tests_layout_are_refused_by_their_field_count():
    with pytest.raises(UserError, match=r"rows without a header: 6 fields per row, which no nccl-tests version "
                                        r"prints for all_gather \(fields per row: 13 in 2.13 on;.* 11 in 2.0 - 2.12"):
        measured(FOREIGN / "mscclpp-test-pr-87-rows-only.txt", "all_gather")


@pytest.mark.parametrize("name, collective, versions", [
    ("nccl-tests-1.x.log", "all_reduce", "1.x"),                      # ms, 3 decimals, res: 12 fields as 2.0's
    ("nccl-tests-2.0-all_gather.log", "all_gather", "2.0 - 2.12"),
    ("nccl-tests-2.9-broadcast.log", "broadcast", "2.0 - 2.12"),
    ("nccl-tests-2.13-tag-output.log", "all_reduce", "2.13 on"),
])
def test_each_generation_reads_the_same_without_its_header(tmp_path, name, collective, versions):
    whole, _ = measured(FOREIGN / name)
    lines = (FOREIGN / name).read_text().splitlines()
    words = [re.sub(r"^\[\d+,\d+\]<stdout>:", "", ln).split() for ln in lines]
    first = next(i for i, w in enumerate(words) if len(w) > 1 and w[0].isdigit() and w[1].isdigit())
    cut = tmp_path / "excerpt.txt"                        # every line before the first row left out
    cut.write_text("\n".join(lines[first:]) + "\n")
    assert inferred(collective, words[first])[0] == versions
    rows, _ = measured(cut, collective)
    assert rows == whole and rows
