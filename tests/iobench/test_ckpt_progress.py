"""What a long storage run says while it runs (issue 49 item 1): its phase, write or read k/N, the time one
checkpoint took and the time left, read from a real run's stderr in a pipe (a line a second here: PROGRESS_EVERY_S)."""
import re

import pytest

from tests.conftest import run_tool

EVERY_S = {"PROGRESS_EVERY_S": "1"}   # a line a second: a quick run on a quiet machine ends before 10 s

LINE = re.compile(r"\[(\d+)/(\d+)\] (write|read) (\d+)/(\d+): (fio's reference run of the same files|saving "
                  r"\(torch-save\)|loading \(torch-save\)), (\S+) elapsed, (\d+s|\d+m\d\ds) per checkpoint and its "
                  r"fio run, ~\S+ left")


@pytest.mark.slow
@pytest.mark.host_mount   # iobench on /tmp's file system: one such test at a time
def test_model_ckpt_says_its_phase_and_time_left(tmp_path):
    """4 writes and 4 reads of 22 MB with fio's reference beside each (about 3 s a checkpoint here): the lines in
    the checkpoints' window name the step, the phase and k/N, the time per checkpoint and the time left."""
    done = run_tool("iobench", "model-ckpt", tmp_path, "--model", "llama3-8b", "--scale", "0.0002", "--ranks", "2",
                    "--writes", "4", "--reads", "4", "--out", tmp_path / "r.jsonl", timeout=300, env=EVERY_S)
    assert done.returncode == 0, done.stderr
    shown = [m for line in done.stderr.splitlines() for m in [LINE.fullmatch(line)] if m]
    assert shown, done.stderr
    for m in shown:
        step, steps, kind, k, n = int(m[1]), int(m[2]), m[3], int(m[4]), int(m[5])
        assert steps == 8 and n == 4 and step == (k if kind == "write" else 4 + k), m[0]
    assert [int(m[1]) for m in shown] == sorted(int(m[1]) for m in shown)
    assert "elapsed" not in done.stdout   # stdout holds the table only


TORCH = re.compile(r"\[(\d)/4\] (warm-up \(untimed: fio and each format once\)|repeat (\d)/3): (fio's reference run|"
                   r"torch-save write, then read|dcp write, then read), (\S+) elapsed, (?:(\d+s) per repeat, ~\S+ left|"
                   r"estimating the time left)")


@pytest.mark.slow
@pytest.mark.host_mount
def test_torch_ckpt_says_its_repeat_and_phase(tmp_path):
    """3 repeats of 48 MiB after the warm-up (about 6 s a repeat here): the repeat, fio's reference or the format
    under way, the time a repeat took and the time left."""
    done = run_tool("iobench", "torch-ckpt", tmp_path, "--size", "48M", "--repeats", "3", "--format", "json",
                    timeout=300, env=EVERY_S)
    assert done.returncode == 0, done.stderr
    shown = [m for line in done.stderr.splitlines() for m in [TORCH.fullmatch(line)] if m]
    assert shown, done.stderr
    for m in shown:
        assert int(m[1]) == (int(m[3]) + 1 if m[3] else 1), m[0]
    assert any(m[6] for m in shown), done.stderr   # a time per repeat once one is done
