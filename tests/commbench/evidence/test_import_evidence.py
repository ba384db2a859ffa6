"""import gives each record of an nccl-tests log the NCCL evidence of the run its table belongs to: two runs of the
real 2.22.3 log (tests/fixtures/nccl_info) in one file, the second's version line edited to tell them apart."""
from pathlib import Path

from tests.conftest import read_records, run_tool

LOG = Path(__file__).parents[2] / "fixtures" / "nccl_info" / "nccl-2.22.3-a100-sendrecv-nccl-tests-331.log"


def test_each_table_gets_its_own_runs_evidence(tmp_path):
    text = LOG.read_text()
    both = tmp_path / "sendrecv_perf.log"
    both.write_text(text + text.replace("NCCL version 2.22.3+cuda12.2", "NCCL version 2.21.5+cuda12.4"))
    out = tmp_path / "r.jsonl"
    proc = run_tool("commbench", "import", both, "--out", out)
    assert proc.returncode == 0, proc.stderr
    recs = [r for r in read_records(out) if not r.get("event")]
    first, second = recs[:58], recs[58:]
    assert len(second) == 58 and max(r["source_line"] for r in first) < min(r["source_line"] for r in second)
    assert {r["effective"]["version"] for r in first} == {"2.22.3"}
    assert {(r["effective"]["version"], r["effective"]["cuda"]) for r in second} == {("2.21.5", "12.4")}
    assert second[0]["effective"]["nics"] == ["mlx5_0:1/IB", "mlx5_1:1/IB", "mlx5_2:1/IB", "mlx5_3:1/IB"]
    plain = tmp_path / "plain.jsonl"                     # a log without NCCL lines: records as before
    assert run_tool("commbench", "import", Path(__file__).parents[2] / "fixtures" / "gpu_logs" /
                    "h100-1node-aws-p5-batch-all_reduce.log", "--out", plain).returncode == 0
    assert not any(r.get("effective") for r in read_records(plain))
