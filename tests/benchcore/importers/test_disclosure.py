"""A file that is not a result is named, never quoted (issue 38 item 6): `import secret.txt` printed `(it starts:
SECRET_TOKEN=...)`, and `diff DIR` followed a link in DIR to a file outside it and quoted that. Both tools share
the code (benchcore.results); iobench's command line is the one exercised here."""
import os
from pathlib import Path

from tests.conftest import assert_one_line_error, run_tool

FIO = Path(__file__).resolve().parents[2] / "fixtures" / "fio"
SECRET = "SECRET_TOKEN=hunter2-do-not-print"


def test_import_of_a_file_that_is_no_result_names_it_without_its_content(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text(SECRET + "\nsecond line\n")
    for command in (["import", secret], ["diff", secret, secret], ["report", secret, "--out", tmp_path / "r"]):
        done = run_tool("iobench", *command, timeout=120)
        assert_one_line_error(done, "secret.txt")
        assert "SECRET_TOKEN" not in done.stdout + done.stderr and "hunter2" not in done.stdout + done.stderr


def test_a_directory_argument_never_follows_a_link_out_of_it(tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text(SECRET + "\n")
    results = tmp_path / "results"
    results.mkdir()
    (results / "a.json").write_bytes((FIO / "shard-write.json").read_bytes())
    os.symlink(outside, results / "b.json")
    done = run_tool("iobench", "diff", results, results, timeout=120)
    assert "hunter2" not in done.stdout + done.stderr and "b.json" not in done.stdout + done.stderr, done.stderr
    assert "Traceback" not in done.stderr


SHAPED = {   # files shaped to reach a reader's later refusals, each holding the secret where a value goes
    "fio-ish.json": SECRET + ' "fio version"\n',
    "fio-keys.json": '{"' + SECRET + '": 1}\n',
    "nccl.json": '{"version":3,"args":["./all_reduce_perf"],"results":[{"size":"' + SECRET + '"}]}',
    "rccl.json": '[{"numCycle":0,"name":"' + SECRET + '","gpus":8}]',
    "fio-version.json": '{"fio version": "' + SECRET + '", "jobs": [{"jobname": "x"}]}',
}


def test_a_file_shaped_like_a_result_never_has_a_value_quoted(tmp_path):
    for name, text in SHAPED.items():
        path = tmp_path / name
        path.write_text(text)
        done = run_tool("commbench", "import", path, timeout=120)
        assert_one_line_error(done, name)
        assert "SECRET_TOKEN" not in done.stdout + done.stderr and "hunter2" not in done.stderr, done.stderr
