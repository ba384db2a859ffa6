"""The skeleton of the fixture scripts (scripts/loop-fs, scripts/cephfs-local, scripts/netns-cluster).

Each brings something real up and down: errors end as one line `PROG: error: ...` and exit 1,
child processes run through benchcore.processes.procs with a timeout, a fixture kept in a directory records
what it created in DIR/state.json, and `status` exits 0 running, 1 partial, 3 stopped.

Standard library only: the scripts run under the system python3, without the virtualenv.
"""
import argparse
import json
import os
import shutil
import stat
import sys
import time

from benchcore.errors import UserError, name
from benchcore.files import output_dir, replace_text, trusted_dir
from benchcore.processes import procs

EXIT = {"running": 0, "partial": 1, "stopped": 3}  # `status` exit codes


class Fail(UserError):
    """A step that failed; the script says it in one line and exits 1."""


def alive(pid):
    """Whether pid runs (a zombie counts as dead)."""
    st = procs.proc_stat(pid)
    return st is not None and st.state != "Z"


def live_pids(text):
    """PIDs of live processes other than this one with text in an argument (a path they were given)."""
    return [pid for pid in procs.pids()
            if pid != os.getpid() and any(text in a for a in procs.proc_cmdline(pid) or []) and alive(pid)]


def need_root(why):
    if os.geteuid() != 0:
        raise Fail(f"needs root ({why})")


class Script:
    """A fixture script: its name in messages, and the Debian package of each program it runs."""

    def __init__(self, prog, packages):
        self.prog = prog
        self.packages = packages

    def log(self, msg):
        print(f"{self.prog}: {msg}", flush=True)

    def _install(self, programs):
        return f"apt-get install {' '.join(dict.fromkeys(self.packages.get(p, p) for p in programs))}"

    def need(self, *programs):
        """Fail naming the packages when a program is not installed."""
        missing = [p for p in programs if not shutil.which(p)]
        if missing:
            raise Fail(f"{', '.join(missing)} not found ({self._install(missing)})")

    def run(self, argv, timeout=120, check=True):
        """procs.run(argv, timeout); a timeout, a missing program or (with check) a failure is a Fail."""
        argv = [str(a) for a in argv]
        what = " ".join(argv[:4])
        try:
            done = procs.run(argv, timeout)
        except FileNotFoundError:
            raise Fail(f"{argv[0]} not found ({self._install(argv[:1])})") from None
        if done.timed_out:
            raise Fail(f"timed out after {timeout:.0f} s: {what}")
        if check and done.returncode != 0:
            raise Fail(f"{what} failed (exit {done.returncode}): {procs.one_line(done.stderr or done.stdout)}")
        return done


class Cli:
    """`PROG COMMAND OPTION ...`: argparse sub-commands sharing one option (--dir, --prefix)."""

    def __init__(self, prog, description, epilog, *flags, **option):
        self.prog = prog
        self.parser = argparse.ArgumentParser(prog=prog, description=description, epilog=epilog,
                                              formatter_class=argparse.RawDescriptionHelpFormatter)
        self.commands = self.parser.add_subparsers(dest="cmd", required=True)
        self.common = argparse.ArgumentParser(add_help=False)
        self.common.add_argument(*flags, **option)

    def command(self, name, help):
        return self.commands.add_parser(name, parents=[self.common], help=help)

    def status_command(self, help="say what is set up (exit 0 running, 1 partial, 3 stopped)"):
        self.command("status", help).add_argument("--json", action="store_true", help="machine-readable output")

    def main(self, argv, act):
        """act(parsed args) -> exit code (None: 0); a Fail, UserError or OSError ends as one line, exit 1."""
        args = self.parser.parse_args(argv)
        try:
            return act(args) or 0
        except (UserError, OSError) as e:
            print(f"{self.prog}: error: {e}", file=sys.stderr)
            return 1


class DirFixture(Script):
    """A fixture whose every file lives in DIR (mounted at DIR/mnt), recorded in DIR/state.json.

    A subclass names what it creates in DIR (OWNED) and why up and down need root (ROOT_FOR; empty:
    they do not), and supplies up(args), teardown(), summary() (a dict with "state": running, partial
    or stopped) and describe(summary) (status lines). `down` removes only a DIR whose state file
    says it is ours.
    """
    OWNED = ()
    ROOT_FOR = ""

    def __init__(self, prog, packages, d):
        super().__init__(prog, packages)
        if os.path.lexists(d):   # root's `down` must never be driven by a state file someone else could edit
            trusted_dir(d, "--dir")
        self.dir = os.path.realpath(d)
        self.mnt = self.path("mnt")
        self.state_file = self.path("state.json")
        self.started = False  # set once `up` has begun to create things
        self.state = self._read_state()

    def _read_state(self):
        """The state file's content (None: there is none), opened without following a link and only when it is
        the caller's regular file."""
        try:
            fd = os.open(self.state_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        except FileNotFoundError:
            return None
        except OSError as e:
            raise Fail(f"unreadable state file {name(self.state_file)}: {e.strerror}") from None
        with os.fdopen(fd) as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                raise Fail(f"unreadable state file {name(self.state_file)}: not a regular file of this user's; not "
                           "using it")
            try:
                return json.load(f)
            except (OSError, ValueError):
                raise Fail(f"unreadable state file {name(self.state_file)}: not JSON this script wrote") from None

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def save(self):
        """The state file replaced whole (benchcore.files.replace_text), the caller's alone (0600)."""
        replace_text(self.state_file, json.dumps(self.state, indent=1), mode=0o600)

    def command(self, args):
        """Carry out the parsed `status`, `up` or `down`; the exit code."""
        if args.cmd == "status":
            return self.status(args.json)
        if self.ROOT_FOR:
            need_root(self.ROOT_FOR)
        if args.cmd == "down":
            return self.down()
        try:
            return self.up(args)
        except (Fail, OSError, KeyboardInterrupt) as e:  # once up created something, name the clean-up
            why = "interrupted" if isinstance(e, KeyboardInterrupt) else str(e)
            if self.started:
                why += f"; run '{self.prog} down --dir {self.dir}' to clean up"
            raise Fail(why) from None

    # -- up -------------------------------------------------------------------------------------
    def running(self):
        """The summary when what DIR records runs; a partial set-up is taken down first (None then)."""
        if not self.state:
            return None
        s = self.summary()
        if s["state"] == "running":
            return s
        self.log(f"found a partial set-up in {self.dir}; removing it and starting afresh")
        self.down(quiet=True)
        return None

    def claim(self, **state):
        """Take DIR (new or empty) and DIR/mnt; from the saved state on, `down` knows they are ours."""
        created = output_dir(self.dir, "--dir")   # made now, or the caller's alone (trusted_dir)
        if not created and os.listdir(self.dir):
            raise Fail(f"{self.dir} is not empty and holds no {self.prog} state; choose another --dir")
        os.makedirs(self.mnt, exist_ok=True)
        self.state = {"version": 1, "created_dir": created, **state}
        self.started = True
        self.save()

    # -- down -----------------------------------------------------------------------------------
    def down(self, quiet=False):
        """teardown() (a list of what it did), then remove OWNED, DIR/mnt, the state file, and DIR if up made it."""
        t0 = time.monotonic()
        if not os.path.exists(self.dir):
            done = f"nothing to do: {self.dir} does not exist"
        elif self.state is None:
            if os.listdir(self.dir):
                raise Fail(f"{self.dir} holds no {self.prog} state; not touching it")
            done = f"nothing to do: {self.dir} is empty"
        else:
            said = self.teardown() + [self._remove()]
            done = f"down in {time.monotonic() - t0:.1f} s: {', '.join(said)}"
        if not quiet:
            self.log(done)

    def _remove(self):
        if procs.mount_at(self.mnt):
            raise Fail(f"{self.mnt} is still mounted; state kept in {self.dir}")
        for part in self.OWNED:
            p = self.path(part)
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p)
            elif os.path.lexists(p):
                os.unlink(p)
        if os.path.isdir(self.mnt):
            os.rmdir(self.mnt)  # an empty mount point: what someone wrote there is not ours to remove
        for part in [p for p in os.listdir(self.dir) if p.startswith(".state.json.")] + ["state.json"]:
            if os.path.lexists(self.path(part)):   # a save cut short, then the state file last
                os.unlink(self.path(part))
        created, self.state = self.state.get("created_dir"), None
        if not created:
            return f"removed its files in {self.dir}"
        try:
            os.rmdir(self.dir)
        except OSError as e:
            raise Fail(f"could not remove {self.dir}: {e.strerror}") from None
        return f"removed {self.dir}"

    # -- status ---------------------------------------------------------------------------------
    def report(self):
        """What `status` prints: summary() (a subclass may add what costs a round trip)."""
        return self.summary()

    def status(self, as_json):
        """Print what is set up; the exit code: 0 running, 1 partial, 3 stopped."""
        s = self.report()
        if as_json:
            print(json.dumps(s, indent=1))
        elif s["state"] == "stopped":
            self.log(f"stopped: nothing set up in {self.dir}")
        else:
            head, *lines = self.describe(s)
            self.log(f"{s['state']} in {self.dir}{head}")
            for line in lines:
                print(f"  {line}")
        return EXIT[s["state"]]
