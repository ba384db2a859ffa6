"""The fixture scripts never take over a directory someone else controls (issue 38 item 2): another user's
edited state.json drove root's `down` (it removed another cluster's namespaces). A --dir that is a symbolic link,
another user's, or writable by others is refused in one line before anything is read from it or done.

Needs root (a directory of nobody's; `down` needs root); cheap: nothing comes up."""
import json
import os
import pwd
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from benchcore.emulate.skeleton import Fail
from benchcore.errors import UserError
from benchcore.processes import procs
from tests.benchcore.emulate.sleeper_fixture import Sleeper
from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes directories of another user: needs root")
NOBODY = pwd.getpwnam("nobody")
SCRIPTS = ["loop-fs", "cephfs-local", "slurm-cluster"]


@pytest.fixture
def base():
    """A directory under /tmp that nobody may enter (pytest's own are closed to nobody)."""
    d = Path(tempfile.mkdtemp(prefix="commbench-foreign-", dir="/tmp"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d)


def planted(base, how):
    """A --dir holding a state.json that would drive `down` (harmless names, should a regression act on it), made the
    way `how` says."""
    d = base / "cluster"
    d.mkdir()
    (d / "state.json").write_text(json.dumps({"version": 1, "created_dir": True, "prefix": "victim", "nodes": 2,
                                              "device": "/dev/no-such-loop", "daemons": {"mon": 4194305}}))
    if how == "nobody's":
        for p in (d, d / "state.json"):
            os.chown(p, NOBODY.pw_uid, NOBODY.pw_gid)
        return d, "owned by another user"
    if how == "writable by others":
        d.chmod(0o777)
        return d, "writable by other users"
    link = base / "link"
    link.symlink_to(d)
    return link, "symbolic link"


@pytest.mark.parametrize("script", SCRIPTS)
@pytest.mark.parametrize("how", ["nobody's", "writable by others", "a link"])
def test_down_refuses_a_directory_it_does_not_control(base, script, how):
    d, why = planted(base, how)
    done = procs.run([sys.executable, "-S", ROOT / "scripts" / script, "down", "--dir", d], 60)
    assert done.returncode == 1 and why in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert (base / "cluster" / "state.json").exists()     # nothing of it was touched


def test_a_state_file_that_is_a_link_or_anothers_is_not_read(base):
    d = base / "mine"
    d.mkdir()
    secret = base / "secret.json"
    secret.write_text('{"version": 1}')
    (d / "state.json").symlink_to(secret)
    with pytest.raises(Fail, match="unreadable state file"):
        Sleeper(str(d))
    (d / "state.json").unlink()
    (d / "state.json").write_text('{"version": 1}')
    os.chown(d / "state.json", NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(Fail, match="not a regular file of this user's"):
        Sleeper(str(d))


def test_up_in_a_directory_of_nobodys_is_refused_and_the_state_is_private(base):
    theirs = base / "theirs"
    theirs.mkdir()
    os.chown(theirs, NOBODY.pw_uid, NOBODY.pw_gid)
    with pytest.raises(UserError, match="owned by another user"):
        Sleeper(str(theirs))
    mine = Sleeper(str(base / "new"))
    mine.claim(pid=None)
    assert (base / "new" / "state.json").stat().st_mode & 0o777 == 0o600
