"""report shows each run's evidence in its notes: a real nccl-tests log with NCCL INFO lines (the 2.22.3 sendrecv
run of tests/fixtures/nccl_info) and records that carry effective and applied."""
from pathlib import Path

from commbench.evidence.report import evidence_events, run_line
from tests.conftest import run_tool

LOG = Path(__file__).parents[2] / "fixtures" / "nccl_info" / "nccl-2.22.3-a100-sendrecv-nccl-tests-331.log"


def test_report_notes_say_what_each_run_ran(tmp_path):
    proc = run_tool("commbench", "report", LOG, "--out", tmp_path / "rep")
    assert proc.returncode == 0, proc.stderr
    md = (tmp_path / "rep" / "report.md").read_text()
    assert "evidence: run " in md and "NCCL 2.22.3, IB x4, NVLS off, algorithm unknown (no TUNING line)" in md


def test_one_line_per_run_with_the_settings():
    recs = [{"run_id": "a", "collective": "all_reduce", "size_bytes": 4096,
             "effective": {"transport": "nccl", "version": "2.27.7", "choices": [
                 {"collective": "AllReduce", "size_bytes": [4096, 4096], "algo": "Tree", "proto": "LL"}]},
             "applied": {"NCCL_ALGO": {"status": "not applied", "evidence": "AllReduce at 4096 bytes ran Tree/LL"}}},
            {"run_id": "b", "collective": "all_reduce", "size_bytes": 8}]
    assert run_line(recs[:1]) == ("NCCL 2.27.7, AllReduce Algo Tree/LL from 4K; settings: NCCL_ALGO not applied "
                                  "(AllReduce at 4096 bytes ran Tree/LL)")
    events = evidence_events(recs)
    assert [e["reason"] for e in events] == ["run a: " + run_line(recs[:1])]
