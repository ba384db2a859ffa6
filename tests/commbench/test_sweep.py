"""commbench sweep: one real launch per config, failures recorded, resume after a kill."""
import os
import signal
import subprocess
import time

import pytest

from tests.conftest import BIN, assert_one_line_error, read_records, run_tool
from commbench.sweep import build_configs

SMALL = ["--nproc-per-node", 2, "-b", "4K", "-e", "4K", "-n", 2, "-w", 1]


def configs_done(recs):
    return [r["sweep_config"] for r in recs if r.get("event") == "config_done"]


@pytest.mark.slow
def test_two_by_two_matrix_is_five_launches_with_the_env_the_workers_saw(tmp_path):
    out = tmp_path / "sweep.jsonl"
    proc = run_tool("commbench", "sweep", "--env", "NCCL_ALGO=Ring,Tree", "--env", "NCCL_PROTO=LL,Simple",
                    *SMALL, "--out", out, env={"NCCL_ALGO": "Tree"})  # a shell value must not leak into baseline
    assert proc.returncode == 0, proc.stderr
    recs = read_records(out)
    measured = [r for r in recs if not r.get("event")]
    assert len({r["run_id"] for r in measured}) == 5 and len(configs_done(recs)) == 5
    for rec in measured:
        config = dict(kv.split("=") for kv in rec["sweep_config"].split()) if rec["sweep_config"] != "baseline" else {}
        seen = {k: v for k, v in rec["env"].items() if k in ("NCCL_ALGO", "NCCL_PROTO")}
        assert seen == config, (rec["sweep_config"], rec["env"])
        assert rec["wrong"] == 0
    assert "sweep ranking" in proc.stdout and "baseline" in proc.stdout


@pytest.mark.slow
def test_failing_config_is_recorded_and_the_rest_complete(tmp_path):
    matrix = tmp_path / "m.yaml"
    matrix.write_text("env:\n  NCCL_PROTO: [LL]\nconfigs:\n  - {COMMBENCH_TEST_EXIT_RANK: 1}\n")
    out = tmp_path / "sweep.jsonl"
    proc = run_tool("commbench", "sweep", "--matrix", matrix, *SMALL, "--out", out, "--timeout", 30)
    assert proc.returncode == 1 and "1 of 3 configs failed" in proc.stderr
    recs = read_records(out)
    failed = [r for r in recs if r.get("event") == "failed"]
    assert [r["sweep_config"] for r in failed] == ["COMMBENCH_TEST_EXIT_RANK=1"]
    assert failed[0]["reason"].startswith("crash")
    assert sorted(configs_done(recs)) == ["NCCL_PROTO=LL", "baseline"]


@pytest.mark.slow
def test_resume_after_a_killed_sweep_runs_only_the_missing_configs(tmp_path):
    out = tmp_path / "sweep.jsonl"
    args = [str(BIN / "commbench"), "sweep", "--env", "NCCL_PROTO=LL,LL128,Simple", *map(str, SMALL),
            "--out", str(out), "--resume"]
    sweep = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,  # its log dir lands in
                             env={**os.environ, "TMPDIR": str(tmp_path)})                 # tmp_path: it is killed
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(configs_done(read_records(out))) < 1:
        time.sleep(0.2)
    sweep.send_signal(signal.SIGKILL)  # no clean-up: the agents must die with it (PR_SET_PDEATHSIG)
    sweep.wait()
    before = read_records(out)
    done_before = configs_done(before)
    assert 1 <= len(done_before) < 4
    time.sleep(1)
    proc = run_tool("commbench", *args[1:])
    assert proc.returncode == 0, proc.stderr
    assert f"resuming: {len(done_before)} of 4 configs done, {4 - len(done_before)} to run" in proc.stderr
    after = read_records(out)
    assert after[:len(before)] == before  # nothing measured before the kill is lost
    assert sorted(configs_done(after)) == sorted(["baseline", "NCCL_PROTO=LL", "NCCL_PROTO=LL128",
                                                  "NCCL_PROTO=Simple"])
    new_runs = {r["run_id"] for r in after[len(before):] if r.get("event") == "config_done"}
    assert len(new_runs) == 4 - len(done_before)


def test_matrix_product_exclusions_and_explicit_configs(tmp_path):
    matrix = tmp_path / "m.yaml"
    matrix.write_text("env:\n  NCCL_ALGO: [Ring, Tree]\n  NCCL_PROTO: [LL, Simple]\n"
                      "exclude:\n  - {NCCL_ALGO: Tree, NCCL_PROTO: LL}\n"
                      "configs:\n  - {NCCL_MAX_NCHANNELS: 4}\n")
    configs = build_configs([], str(matrix), False)
    assert configs == [{}, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "LL"}, {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"},
                       {"NCCL_ALGO": "Tree", "NCCL_PROTO": "Simple"}, {"NCCL_MAX_NCHANNELS": "4"}]


@pytest.mark.parametrize("args, needle", [
    (["--env", "NCCL_ALOG=Ring"], "did you mean NCCL_ALGO?"),
    (["--env", "NCCL_PROTO=LL,Fast"], "NCCL_PROTO=Fast: must be one of LL, LL128, Simple"),
    (["--env", "NCCL_MAX_NCHANNELS=100"], "must be in 1..64"),
    (["--env", "GLOO_SOCKET_IFNAM=eth0"], "did you mean GLOO_SOCKET_IFNAME?"),
    (["--env", "NCCL_ALGO"], "is not NAME=VALUE"),
    ([], "nothing to sweep"),
    (["--matrix", "/nonexistent.yaml"], "No such file"),
])
def test_typos_and_bad_values_are_refused(args, needle):
    assert_one_line_error(run_tool("commbench", "sweep", *args, timeout=60), needle)


def test_allow_unknown_lets_experts_pass_anything():
    proc = run_tool("commbench", "sweep", "--env", "NCCL_FUTURE_KNOB=7", "--allow-unknown", "--dry-run", *SMALL)
    assert proc.returncode == 0, proc.stderr
    assert "NCCL_FUTURE_KNOB=7" in proc.stdout


def test_env_lists_the_catalogue():
    proc = run_tool("commbench", "env")
    assert proc.returncode == 0
    for name in ("NCCL_ALGO", "NCCL_IB_QPS_PER_CONNECTION", "TORCH_NCCL_BLOCKING_WAIT", "GLOO_SOCKET_IFNAME"):
        assert name in proc.stdout
