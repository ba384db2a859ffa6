"""A scratch marker's words reach a terminal only through the printable filter (D23): a marker planted with a run id
of ESC ] (window title), ESC c (terminal reset) and BEL shows as spaces in `iobench ckpt`'s stale-directory warning
and in `iobench clean`'s refusal."""
import json
import re
import socket

from tests.conftest import run_tool

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
EVIL = "X\x1b]0;PWNED\x1b\\\x1bc\x07"


def plant(tmp_path, host):
    d = tmp_path / "iobench-evil"
    d.mkdir(mode=0o700)
    (d / ".iobench-run").write_text(json.dumps({"run_id": EVIL, "pid": 999999, "host": host}))
    return d


def test_a_planted_marker_reaches_ckpt_s_warning_as_spaces(tmp_path):
    plant(tmp_path, socket.gethostname())
    done = run_tool("iobench", "ckpt", tmp_path, "--quick", "--profile", "metadata", "--dry-run", timeout=120)
    assert done.returncode == 0, done.stderr
    assert "was left by iobench run X" in done.stderr and "PWNED" not in done.stderr   # the OSC dropped whole
    assert not CONTROL.search(done.stderr + done.stdout)


def test_a_planted_marker_reaches_clean_s_error_as_spaces(tmp_path):
    d = plant(tmp_path, "else\x1bcwhere")     # another host: its run may be alive, nothing is removed
    done = run_tool("iobench", "clean", tmp_path, timeout=60)
    assert done.returncode == 2 and "belongs to run X" in done.stderr and "host else where" in done.stderr
    assert not CONTROL.search(done.stderr) and d.exists()
