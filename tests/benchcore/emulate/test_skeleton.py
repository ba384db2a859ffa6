"""benchcore.emulate.skeleton, the skeleton of scripts/loop-fs, cephfs-local and netns-cluster, with real processes.

tests/benchcore/emulate/sleeper_fixture.py is the smallest fixture built on it; it runs here as the scripts do:
a process of its own, without site-packages.
"""
import json
import sys
import time

import pytest

from benchcore.emulate.skeleton import EXIT, Fail, Script, alive, live_pids
from benchcore.processes import procs
from tests.benchcore.emulate.sleeper_fixture import Sleeper
from tests.conftest import ROOT


def sleeper(*args):
    return procs.run([sys.executable, "-S", "-m", "tests.benchcore.emulate.sleeper_fixture", *args], 30, cwd=ROOT)


def one_error_line(done, needle):
    lines = done.stderr.splitlines()
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert lines[0].startswith("sleeper: error: ") and needle in lines[0], lines[0]


def test_state_file_round_trip(tmp_path):
    d = tmp_path / "fx"
    first = Sleeper(d)
    assert first.state is None and not first.started
    first.claim(pid=None, sizes=[1, 2])
    first.state["pid"] = 42
    first.save()
    again = Sleeper(d)
    assert again.state == {"version": 1, "created_dir": True, "pid": 42, "sizes": [1, 2]}
    assert sorted(p.name for p in d.iterdir()) == ["mnt", "state.json"]
    (d / "state.json").write_text("{not json")
    with pytest.raises(Fail, match="unreadable state file"):
        Sleeper(d)


def test_status_exit_codes_follow_up_partial_and_down(tmp_path):
    d = tmp_path / "fx"
    assert sleeper("status", "--dir", d).returncode == EXIT["stopped"] == 3
    up = sleeper("up", "--dir", d)
    assert up.returncode == 0 and up.stdout.startswith("sleeper: up: sleep "), up.stderr
    st = sleeper("status", "--json", "--dir", d)
    pid = json.loads(st.stdout)["pid"]
    assert st.returncode == EXIT["running"] == 0 and alive(pid)  # it outlived `up`
    assert sleeper("up", "--dir", d).stdout.startswith("sleeper: already up")
    procs.kill(pid)
    while alive(pid):
        time.sleep(0.01)
    st = sleeper("status", "--dir", d)
    assert st.returncode == EXIT["partial"] == 1 and st.stdout.startswith(f"sleeper: partial in {d}: sleep {pid}")
    down = sleeper("down", "--dir", d)
    assert down.returncode == 0 and f"removed {d}" in down.stdout and not d.exists(), down.stderr
    assert sleeper("status", "--dir", d).returncode == 3
    assert "nothing to do" in sleeper("down", "--dir", d).stdout


def test_a_failed_step_is_one_line_naming_the_clean_up(tmp_path):
    d = tmp_path / "fx"
    up = sleeper("up", "--dir", d, "--then-sh", "echo first; echo second >&2; exit 7")
    one_error_line(up, "sh -c echo first; echo second >&2; exit 7 failed (exit 7): second")
    assert up.stderr.rstrip().endswith(f"; run 'sleeper down --dir {d}' to clean up")
    pid = json.loads(sleeper("status", "--json", "--dir", d).stdout)["pid"]
    down = sleeper("down", "--dir", d)
    assert down.returncode == 0 and f"ended sleep {pid}" in down.stdout and not alive(pid)


def test_a_directory_that_is_not_ours_is_refused_and_untouched(tmp_path):
    (tmp_path / "keep.txt").write_text("user data")
    one_error_line(sleeper("up", "--dir", tmp_path), "is not empty and holds no sleeper state")
    one_error_line(sleeper("down", "--dir", tmp_path), "holds no sleeper state; not touching it")
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


def test_run_timeout_stops_the_child_and_is_a_fail():
    with pytest.raises(Fail, match=r"^timed out after 1 s: sleep 31\.4159$"):
        Script("t", {}).run(["sleep", "31.4159"], timeout=1)
    assert live_pids("31.4159") == []


def test_a_missing_program_names_its_package():
    script = Script("t", {"no-such-program-x": "pkg-x"})
    with pytest.raises(Fail, match=r"^no-such-program-x not found \(apt-get install pkg-x\)$"):
        script.run(["no-such-program-x", "--version"])
    with pytest.raises(Fail, match=r"^no-such-program-x, nor-this-y not found \(apt-get install pkg-x nor-this-y\)$"):
        script.need("sh", "no-such-program-x", "nor-this-y")


@pytest.mark.parametrize("script", ["loop-fs", "cephfs-local", "netns-cluster"])
def test_the_scripts_run_without_site_packages(script):
    done = procs.run([sys.executable, "-S", ROOT / "scripts" / script, "--help"], 30)
    assert done.returncode == 0 and "status" in done.stdout and not done.stderr, done.stderr


@pytest.mark.parametrize("script, args", [
    ("netns-cluster", ["up", "--prefix", "ab cd"]), ("netns-cluster", ["down", "--prefix", "a;b"]),
    ("netns-cluster", ["status", "--prefix", "Cb"]), ("slurm-cluster", ["up", "--prefix", "a" * 13]),
])
def test_a_prefix_down_could_not_find_again_is_refused_before_anything_is_made(script, args):
    """'netns-cluster up --prefix "ab cd"' came up, and `down` left it: a prefix is [a-z][a-z0-9-]{0,11}."""
    done = procs.run([sys.executable, "-S", ROOT / "scripts" / script, *args], 30)
    assert done.returncode == 2 and "argument --prefix: a lower-case letter" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
