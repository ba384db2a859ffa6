"""Import gaps met in real logs (issue 47 item 7), on real logs of tests/fixtures/gpu_logs cut or prefixed as the
case says: a collective named only by a wrapper script's arguments, a header-less excerpt whose '# Collective test
concluded' line comes after its rows, a header and then nothing, an all_reduce named by nothing but its bus
factor (inferred, and said how)."""
from pathlib import Path

import pytest

from benchcore.errors import UserError
from benchcore.results import read

GPU_LOGS = Path(__file__).parents[2] / "fixtures" / "gpu_logs"
P5 = (GPU_LOGS / "h100-1node-aws-p5-batch-all_reduce.log").read_text()
A3 = (GPU_LOGS / "h100-2node-gcp-a3mega.md").read_text()


def load(tmp_path, text, name="log.txt"):
    path = tmp_path / name
    path.write_text(text)
    recs = read.load(path).records
    return [r for r in recs if not r.get("event")], [r for r in recs if r.get("event")]


def test_a_wrapper_scripts_arguments_name_the_collective(tmp_path):
    for command in ("$ ./run_nccl.sh allreduce 8 -b 8 -e 16G\n", "srun -N1 bash nccl.sh --op all-reduce\n"):
        recs, _ = load(tmp_path, command + P5)
        assert len(recs) == 64 and {r["collective"] for r in recs} == {"all_reduce"}
    with pytest.raises(UserError, match="no collective named"):       # two named: neither is taken
        load(tmp_path, "$ ./run.sh allreduce allgather\n" + P5)


def test_a_headless_excerpt_named_by_its_closing_line(tmp_path):
    rows = [ln.replace("[1,0]<stdout>:", "") for ln in P5.splitlines(keepends=True)
            if ln.startswith("[1,0]<stdout>:  ")]
    recs, events = load(tmp_path, "".join(rows[:8]) + "# Collective test concluded: all_reduce_perf\n")
    assert len(recs) == 16 and {r["collective"] for r in recs} == {"all_reduce"} and not events
    with pytest.raises(UserError, match="rows without a header, and no collective named"):
        load(tmp_path, "".join(rows[:8]))


def test_a_header_and_then_nothing_says_so(tmp_path):
    head = A3[:A3.index("           8 ")]                   # the run as far as its table's header
    recs, events = load(tmp_path, head)
    assert recs == [] and [e["event"] for e in events] == ["truncated"]
    assert "all_reduce table ends after its header, with no row (0 measurements)" in events[0]["reason"]


def test_an_all_reduce_named_only_by_its_bus_factor(tmp_path):
    unnamed = "".join(ln for ln in A3.splitlines(keepends=True) if "all_reduce_perf" not in ln)
    recs, events = load(tmp_path, unnamed)
    assert len(recs) == 62 and {r["collective"] for r in recs} == {"all_reduce"}
    assert [e["event"] for e in events] == ["inferred"]
    assert "busbw/algbw is 1.875 in all 32 rows" in events[0]["reason"] and "n = 16 ranks" in events[0]["reason"]
    half = "".join(ln for ln in unnamed.splitlines(keepends=True) if not ("#  Rank " in ln and "gq73" in ln))
    with pytest.raises(UserError, match="no collective named"):    # 8 ranks listed: 1.875 is not 2(n-1)/n = 1.75
        load(tmp_path, half)
