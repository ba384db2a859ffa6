"""judge takes the algorithm from NCCL's own TUNING lines in a log before NCCL_ALGO and says which it used. The
table is the real p5 log of tests/fixtures/gpu_logs; the INFO lines put among its rows are cut from NCCL's format
strings (src/init.cc VERSION_STRING, src/enqueue.cc l.745 of v2.27.7-1): no public log with 2.24+ TUNING lines
and a table was found."""
from pathlib import Path

from tests.conftest import run_tool

GPU_LOGS = Path(__file__).parents[2] / "fixtures" / "gpu_logs"


def with_tuning(tmp_path, algo):
    rows = (GPU_LOGS / "h100-1node-aws-p5-batch-all_reduce.log").read_text().splitlines(keepends=True)
    info = ["[1,0]<stdout>:p5:1:1 [0] NCCL INFO NCCL version 2.27.7+cuda12.9\n"] + [
        f"[1,0]<stdout>:p5:1:1 [0] NCCL INFO AllReduce: {size} Bytes -> Algo {algo} proto SIMPLE "
        "channel{Lo..Hi}={0..15}\n" for size in (8 << 30, 16 << 30)]
    path = tmp_path / f"all_reduce-{algo}.log"        # the file name names the collective, as the original
    path.write_text("".join(rows[:3] + info + rows[3:]))
    return path


def judge(path, *more):
    return run_tool("commbench", "judge", path, "--topology", "dgx-h100", "--ranks", 8, "--nodes", 1, *more)


def test_the_algorithm_comes_from_the_log_before_nccl_algo(tmp_path):
    proc = judge(with_tuning(tmp_path, "NVLS"), "--env", "NCCL_ALGO=Ring")
    last = [ln for ln in proc.stdout.splitlines() if ln.startswith("all_reduce 16G")]
    assert last and "[algorithm NVLS: NCCL's own TUNING line]" in last[0], proc.stdout
    assert "ceiling" in proc.stdout and "NVLS 700" in proc.stdout
    proc = judge(with_tuning(tmp_path, "RING"))
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("all_reduce 16G"))
    assert "[algorithm Ring: NCCL's own TUNING line]" in line and "Ring" in line
    plain = judge(GPU_LOGS / "h100-1node-aws-p5-batch-all_reduce.log", "--env", "NCCL_ALGO=NVLS")
    assert "[algorithm from NCCL_ALGO=NVLS]" in plain.stdout
