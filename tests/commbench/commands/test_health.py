"""`commbench health`: a node's history read back. The history written by real runs is checked where they run
(accept: tests/commbench/commands/test_accept.py; pairs over ssh: tests/netns/test_ssh.py); here the reader's
counts on a history written line by line as accept writes it (commbench.history.entry), and its refusals."""
import json
import os

import pytest

from commbench.commands import history
from tests.conftest import assert_one_line_error, run_tool

RUNS = {   # node -> its results, oldest first, and what commbench did to it in Slurm on that run
    "n1": ["pass", "fail", "pass", "fail", "fail"],
    "n2": ["pass"] * 12,
    "n3": ["pass", "error", "fail", "pass"],
}
ACTIONS = {("n1", 3): "drained", ("n3", 2): "drained", ("n3", 3): "resumed"}


@pytest.fixture
def written(tmp_path):
    path = tmp_path / "health.jsonl"
    for node, results in RUNS.items():
        for i, result in enumerate(results):
            failed = [] if result == "pass" else [f"node-all_reduce: run {i} {result}"]
            e = history.entry(node, result, failed, ["node-all_reduce"], f"run{i}", "accept", "healthcheck.yaml",
                              ACTIONS.get((node, i)), None)
            history.append(path, [{**e, "time": f"2026-12-0{1 + i // 9}T0{i % 9}:00:00+00:00"}])
    with open(path, "a") as f:
        f.write("not a verdict\n" + json.dumps({"history": 1, "node": "n9", "result": "maybe"}) + "\n")
    return path


def health(*args):
    return run_tool("commbench", "health", *args, timeout=60, env={"COLUMNS": "200"})   # no cell wrapped


def test_json_counts_per_node(written):
    done = health(written, "--format", "json", "--last", 4)
    assert done.returncode == 0, done.stderr
    rows = {r["node"]: r for r in map(json.loads, done.stdout.splitlines())}
    assert list(rows) == ["n1", "n3", "n2"]          # failing first
    n1, n2, n3 = rows["n1"], rows["n2"], rows["n3"]
    assert (n1["last_result"], n1["failures"], n1["window"], n1["runs"]) == ("fail", 3, 4, 5)
    assert n1["flaps"] == 2 and n1["last_pass"] == "2026-12-01T02:00:00+00:00"   # fail pass fail fail
    assert n1["drained"] == "2026-12-01T03:00:00+00:00" and n1["resumed"] is None
    assert n1["what_failed"] == "node-all_reduce: run 4 fail"
    assert (n2["failures"], n2["flaps"], n2["window"], n2["runs"]) == (0, 0, 4, 12) and n2["what_failed"] is None
    assert n2["last_pass"] == "2026-12-02T02:00:00+00:00"
    assert (n3["last_result"], n3["failures"], n3["errors"], n3["flaps"]) == ("pass", 1, 1, 2)   # error not a flap
    assert n3["resumed"] == "2026-12-01T03:00:00+00:00" and n3["last_failed"] == "node-all_reduce: run 2 fail"
    assert "2 lines of the history are not node verdicts" in done.stderr


def test_table_and_one_node(written):
    done = health(written, "--node", "n1")
    assert done.returncode == 0, done.stderr
    assert "n1" in done.stdout and "n2" not in done.stdout and "3/5" in done.stdout
    assert "12-01T03:00" in done.stdout and "times in 2026" in done.stdout   # the year said once, in the title
    assert "node-all_reduce: run 4 fail" in done.stdout
    env = run_tool("commbench", "health", env={history.HISTORY_ENV: str(written)})
    assert env.returncode == 0 and "n3" in env.stdout


def test_at_100_columns_a_timestamp_is_never_wrapped_inside(written, tmp_path):
    """A piped table at COLUMNS=100 (issue 49 item 7): within 100 columns where the times share a year (said once
    in the title), each time whole on its row; a history over a new year shows whole times, wider (as the docs say)."""
    done = run_tool("commbench", "health", written, timeout=60, env={"COLUMNS": "100"})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert max(len(ln) for ln in lines) <= 100 and "(times in 2026, to the minute, as recorded)" in lines[0], lines
    rows = {ln.split()[0]: ln.split() for ln in lines if ln.split() and ln.split()[0] in RUNS}
    assert rows["n1"][:8] == ["n1", "fail", "12-01T04:00", "12-01T02:00", "3/5", "3", "12-01T03:00", "n/a"], lines
    assert rows["n3"][6:8] == ["12-01T02:00", "12-01T03:00"] and rows["n2"][2] == "12-02T02:00", lines
    years = tmp_path / "years.jsonl"
    years.write_text(written.read_text().replace('"time": "2026-12-02', '"time": "2027-01-02'))
    wide = run_tool("commbench", "health", years, timeout=60, env={"COLUMNS": "100"})
    n2 = next(ln.split() for ln in wide.stdout.splitlines() if ln.startswith("n2 "))
    assert n2[2:4] == ["2027-01-02T02:00", "2027-01-02T02:00"], wide.stdout


@pytest.mark.parametrize("args, needle", [
    ([], "give the history file"), (["/nonexistent/h.jsonl"], "no such file"), (["/"], "is a directory"),
    (["--node", "n7", "HIST"], "--node n7: not in the history")])
def test_refusals(written, args, needle):
    assert_one_line_error(health(*[str(written) if a == "HIST" else a for a in args]), needle)


def test_a_history_that_is_a_symlink_is_never_appended_through(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("")
    os.symlink(target, tmp_path / "h.jsonl")
    done = run_tool("commbench", "pairs", "--nodes", 2, "--size", "1K", "--history", tmp_path / "h.jsonl")
    assert_one_line_error(done, "symbolic link")
    assert target.read_text() == ""


def test_an_append_after_a_torn_last_line_starts_on_a_fresh_line(tmp_path):
    """The reproduction: a history whose last line was cut by a crash; the next verdict is its own line and is read
    back, the torn line skipped and counted."""
    path = tmp_path / "h.jsonl"
    path.write_text('{"history":1,"node":"vm","result":"fail","failed":["torn')
    history.append(path, [history.entry("n1", "pass", [], ["io"], "r1", "accept")])
    summaries, skipped, _ = history.read(path)
    assert list(summaries) == ["n1"] and summaries["n1"]["last_result"] == "pass" and skipped == 1
    assert path.read_text().count("\n") == 2


def test_a_line_nested_200000_deep_or_longer_than_the_cap_is_skipped_with_one_note(tmp_path):
    """The reproduction's line nested 200,000 deep (json.loads raised RecursionError), a 100 KB line and a line
    nested 9 deep beside real entries: health counts them in one note and shows the nodes; no traceback."""
    path = tmp_path / "h.jsonl"
    deep = '{"history":1,"node":"n1","result":"pass","failed":' + "[" * 200_000 + "]" * 200_000 + "}\n"
    long = json.dumps(history.entry("n2", "fail", ["x" * 100_000], ["io"], "r0", "accept")) + "\n"
    nine = json.dumps({**history.entry("n3", "pass", [], ["io"], "r0", "accept"), "x": [[[[[[[[[]]]]]]]]]}) + "\n"
    path.write_text(deep + long + nine)
    history.append(path, [history.entry(n, "pass", [], ["io"], "r1", "accept") for n in ("n1", "n2")])
    done = health(path, "--format", "json")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert [json.loads(ln)["node"] for ln in done.stdout.splitlines()] == ["n1", "n2"]
    assert done.stderr.count("note:") == 1 and "3 lines of the history are not node verdicts" in done.stderr


def rchar():
    """Bytes this process has read so far (/proc/self/io)."""
    return int(next(ln for ln in open("/proc/self/io") if ln.startswith("rchar:")).split()[1])


def test_accept_reads_only_the_histories_end_whatever_its_age(tmp_path):
    """tail reads backwards: a node's last 10 entries among 300 other nodes' (the same as a whole read gives), and
    no more than its budget of a history with 1 GiB of old entries before them (a hole here: reading it whole would
    take seconds and return nothing); the summary then says it is partial."""
    path = tmp_path / "h.jsonl"
    with open(path, "w") as f:
        f.truncate(1 << 30)
        f.seek(1 << 30)
        f.write("\n")
    runs = [history.entry(f"n{i % 300}", "fail" if i % 7 == 0 else "pass", [], ["io"], f"r{i}", "accept")
            for i in range(6000)]
    history.append(path, runs)
    before = rchar()
    found, whole = history.tail(path, ["n7", "absent"], budget=1 << 20)
    assert rchar() - before <= (1 << 20) + history.BLOCK_BYTES and not whole
    assert [e["run_id"] for e in found["n7"]] == [e["run_id"] for e in runs if e["node"] == "n7"][-10:]
    assert found["absent"] == []
    small = tmp_path / "small.jsonl"
    history.append(small, runs[:900])
    found, whole = history.tail(small, ["n7"], window=10_000)
    assert whole and [e["run_id"] for e in found["n7"]] == ["r7", "r307", "r607"]
    summaries, _, _ = history.read(small, 10_000, {"n7"})
    assert summaries["n7"]["runs"] == 3 and summaries["n7"]["failures"] == 1   # r7 failed (7 % 7 == 0)
