"""Readers never quote a file they refuse: a user links a file only root may read (/etc/shadow's shape) where root's
command reads a host list, a job file, a spec, a topology or results, and the refusal gives the file's name, a line
number and the reason, never the file's words.

Needs root (the link is planted by nobody, the secret is root's 0600 file); cheap, one process per reader."""
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import assert_one_line_error, run_tool

pytestmark = [pytest.mark.root,
              pytest.mark.skipif(os.geteuid() != 0, reason="plants a link as another user: needs root")]

SECRET = "root:$6$SALTSALT$HASHHASHHASH:20228:0:99999:7:::\ndaemon:*:20228:0:99999:7:::\n"
WORDS = ("SALTSALT", "HASHHASH", "root:", "20228", "daemon")
LOG = Path(__file__).resolve().parent.parent / "fixtures" / "gpu_logs" / "h100-1node-aws-p5-batch-all_reduce.log"


@pytest.fixture(scope="module")
def planted():
    """/tmp/.../link, made by nobody, to root's 0600 secret (pytest's own tmp directories are closed to nobody)."""
    base = Path(tempfile.mkdtemp(prefix="commbench-disclose-", dir="/tmp"))
    base.chmod(0o1777)
    secret = base / "secret"
    secret.write_text(SECRET)
    secret.chmod(0o600)
    nobody = pwd.getpwnam("nobody")
    subprocess.run(["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups",
                    "ln", "-s", str(secret), str(base / "link")], check=True, timeout=30)
    assert (base / "link").lstat().st_uid == nobody.pw_uid
    yield base / "link"
    shutil.rmtree(base)


READERS = {   # N2 (host lists), N3 (job files), and every other reader of a file a user names
    "run --hostfile": (["commbench", "run", "--hostfile", "{f}", "-b", "1K", "-e", "1K", "--dry-run"], ":", "line 1"),
    "pairs --hostfile": (["commbench", "pairs", "--hostfile", "{f}", "--dry-run"], ":", "line 1"),
    "accept --hostfile": (["commbench", "accept", "--spec", "acceptance/localhost.yaml", "--hostfile", "{f}",
                           "--out", "{out}"], ":", "line 1"),
    "iobench run JOB": (["iobench", "run", "{f}", "--directory", "{out}"], ":1:", "not allowed"),
    "accept --spec": (["commbench", "accept", "--spec", "{f}", "--out", "{out}"], ":1:", "unknown key"),
    "model --topology": (["commbench", "model", "--topology", "{f}", "--nodes", "1"], "topology file", "unknown"),
    "judge --topology": (["commbench", "judge", LOG, "--topology", "{f}"], "topology file", "unknown"),
    "import": (["commbench", "import", "{f}"], "neither", "nor"),
    "diff": (["commbench", "diff", "{f}", "{f}"], "neither", "nor"),
    "report": (["iobench", "report", "{f}", "--out", "{out}/r"], "neither", "nor"),
}


@pytest.mark.parametrize("reader", READERS)
def test_a_refused_file_is_never_quoted(planted, tmp_path, reader):
    argv, where, why = READERS[reader]
    (tmp_path / "o").mkdir()
    tool, *args = [str(a).format(f=planted, out=tmp_path / "o") for a in argv]
    proc = run_tool(tool, *args, timeout=120)
    assert_one_line_error(proc, why)
    assert str(planted) in proc.stderr and where in proc.stderr
    assert not [w for w in WORDS if w in proc.stdout + proc.stderr], proc.stderr
