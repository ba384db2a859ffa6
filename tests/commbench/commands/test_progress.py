"""A run a user can follow (issue 39 items 1-2): without a terminal (a Slurm log, a pipe) a long command says on stderr,
at least every 10 s, which step it is at, how long it has run and when it will end; --quiet says none of it; a
--time-budget ends a compare near its budget and says what it scaled, and refuses in one line a budget that holds no
measurement. The two-at-a-time set runs a compare of 40 s beside its --quiet twin and a budget too small (what they
print); the alone one a compare of 30 s (the lines' gaps, the budget held)."""
import os
import re
import subprocess
import threading
import time

import pytest

from tests.conftest import BIN, assert_one_line_error

ALONE_S, LOADED_S = 30, 40   # beside other tests a run's start-up and calibration take longer: more room to measure


def compare(budget):
    return ["compare", "--time-budget", budget, "--strategies", "ring,plain,chunked", "-b", "1M", "-e", "16M",
            "--out", "/dev/null"]


LINE = re.compile(r"\[(\d+)/(\d+)\] (.+), ((?:\d+m)?\d+s) elapsed, (~(?:\d+[hms])+ left|estimating the time left)")
STEP = re.compile(r"(calibrating the time budget|(ring|plain|chunked 2M x1 >16M) (1M|2M|4M|8M|16M)"
                  r"( repeat \d+/\d+)?)")
SUMMARY = re.compile(r"time budget \d+ s: (\d+) repeats per size, the first at 1 iteration \(the calibration, "
                     r"[0-9.]+ s\)(, then \d+(-\d+)? iterations per measurement)?; the run took \d+ s")


def started(args):
    """(process, [(seconds since the start, stderr line)], [stdout], readers, start) of commbench args, its output
    piped (read as it comes, stamped)."""
    t0 = time.monotonic()
    proc = subprocess.Popen([str(BIN / "commbench"), *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    lines, out = [], []

    def read_err():
        for line in proc.stderr:
            lines.append((time.monotonic() - t0, line.rstrip("\n")))
    readers = [threading.Thread(target=read_err, daemon=True),
               threading.Thread(target=lambda: out.append(proc.stdout.read()), daemon=True)]
    for reader in readers:
        reader.start()
    return proc, lines, out, readers, t0


def finished(run, timeout=300):
    """(exit status, stdout, [(t, stderr line)], seconds the command ran)."""
    proc, lines, out, readers, t0 = run
    try:
        proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    took = time.monotonic() - t0
    for reader in readers:
        reader.join(timeout=10)
    return proc.returncode, "".join(out), lines, took


def seconds(text):
    """'3m10s' -> 190."""
    minutes, _, rest = text.rpartition("m")
    return int(minutes or 0) * 60 + int(rest.rstrip("s"))


def progress(lines):
    return [(t, m) for t, line in lines for m in [LINE.fullmatch(line)] if m]


@pytest.fixture(scope="module")
def side_by_side():
    """The compare, its --quiet twin and one whose budget cannot hold a measurement, at the same time (what they
    print, not when)."""
    runs = [started(compare(LOADED_S)), started(compare(LOADED_S) + ["--quiet"]),
            started(["compare", "--time-budget", 1, "-b", "1M", "-e", "1M", "--out", "/dev/null"])]
    return [finished(run) for run in runs]


@pytest.mark.slow
def test_a_piped_run_says_its_step_elapsed_time_and_time_left(side_by_side):
    code, out, lines, _ = side_by_side[0]
    assert code == 0, lines
    shown = progress(lines)
    assert len(shown) >= 2, lines    # the budget is 40 s: a line at 10 s and at 20 s at least
    for _, m in shown:
        assert STEP.fullmatch(m[3]), m[0]   # a strategy at a size and its repeat, or the budget's calibration
        assert 1 <= int(m[1]) <= int(m[2]), m[0]
    assert any(m[5].endswith(" left") and m[5] != "estimating the time left" for _, m in shown), lines
    elapsed = [seconds(m[4]) for _, m in shown]
    assert elapsed == sorted(elapsed) and elapsed[-1] >= 10, elapsed
    assert not LINE.search(out), out   # stdout holds the tables only
    assert "payload 16M" in out
    summary = [line for _, line in lines if SUMMARY.fullmatch(line)]
    assert summary, lines   # what the budget scaled, said once
    assert int(SUMMARY.fullmatch(summary[0])[1]) >= 2   # at least 2 repeats: a spread


@pytest.mark.slow
def test_quiet_prints_no_progress(side_by_side):
    code, out, lines, _ = side_by_side[1]
    assert code == 0, lines
    assert not progress(lines), lines
    assert "payload 16M" in out and [line for _, line in lines if SUMMARY.fullmatch(line)]


@pytest.mark.slow
@pytest.mark.alone
def test_progress_every_10_s_and_a_time_budget_of_30_s_holds():
    code, out, lines, took = finished(started(compare(ALONE_S)))
    assert code == 0, lines
    assert 20 <= took <= 45, (took, lines)
    times = [t for t, _ in progress(lines)]
    assert len(times) >= 2, lines
    gaps = [b - a for a, b in zip(times, times[1:])]
    assert all(9 <= g <= 11 for g in gaps), (gaps, lines)   # one line per 10 s, no more, no fewer
    assert times[0] <= 15 and took - times[-1] <= 15, (times, took, lines)   # from the start (imports) and to the end


@pytest.mark.slow
def test_a_budget_too_small_to_measure_anything_is_one_line(side_by_side):
    code, out, lines, _ = side_by_side[2]
    errors = [line for _, line in lines if line.startswith("error:")]
    assert code != 0 and not out, lines
    assert errors == [errors[0]] and errors[0].startswith("error: --time-budget 1 s is too small: the start-up alone "
                                                          "took "), lines
    assert not [line for _, line in lines if "Traceback" in line], lines


def test_a_dry_run_says_the_estimated_duration_on_stderr(tool):
    budgeted = tool("commbench", "compare", "--time-budget", 60, "--dry-run")
    assert budgeted.returncode == 0 and budgeted.stderr.splitlines()[-1] == \
        "estimated duration: about 60 s (--time-budget), start-ups included", budgeted.stderr
    plain = tool("commbench", "overlap", "--patterns", "ddp,pipelined,pipelined-rs", "--compute-ratio", "0.5,1,2",
                 "-b", "4M", "-e", "64M", "-n", 7, "--dry-run")
    measurements = 3 * 3 * 5 * 3   # patterns x compute ratios x sizes 4M..64M x the 3 repeats
    assert plain.stderr.splitlines()[-1].startswith(f"estimated duration: not known before a run: 1 launch, "
                                                    f"{measurements} measurements of 5 warm-up + 7 iterations each "
                                                    "(the operations' time: the model gives ddp "), plain.stderr
    assert "--plan-file" in plain.stdout.splitlines()[-1]   # stdout stays the script a shell runs
    # where the work is known: the topology's time per call and the start-up, each part said (issue 49 item 1)
    ring = tool("commbench", "ring", "-b", "1K", "-e", "1M", "-f", "4", "-n", 20, "-w", 5, "--dry-run")
    said = re.fullmatch(r"estimated duration: about (\d+) s \(1 launch, 6 measurements of 5 warm-up \+ 20 iterations "
                        r"each\): the operations ([\d.]+) s by topology (\S+)'s (?:model \(|reference rate and latency "
                        r"\(it states no ceiling; )26 calls a measurement\) \+ 1 start-up of about ([\d.]+) s "
                        r"\(measured on a 2-core CPU VM\)", ring.stderr.splitlines()[-1])
    assert said and 0 < float(said[2]) and int(said[1]) == round(float(said[2]) + float(said[4])), ring.stderr


@pytest.mark.parametrize("tool_name, value", [("commbench", "abc"), ("iobench", "0.5")])
def test_a_progress_interval_that_is_not_1_s_to_a_day_is_one_line(tool, tool_name, value, tmp_path):
    """PROGRESS_EVERY_S (seconds between two plain lines) is checked before anything runs."""
    args = ["compare", "--out", tmp_path / "r.jsonl"] if tool_name == "commbench" else ["ckpt", tmp_path, "--quick"]
    done = tool(tool_name, *args, env={"PROGRESS_EVERY_S": value})
    assert_one_line_error(done, f"PROGRESS_EVERY_S is {value!r}: give the seconds between two progress lines")
    assert done.returncode == 2 and os.listdir(tmp_path) == []
