"""The smallest DirFixture, for tests/benchcore/emulate/test_skeleton.py: `up` starts a `sleep` that outlives it.

Run from the repository root as `python -S -m tests.benchcore.emulate.sleeper_fixture up --dir DIR`
(-S: without site-packages, as the scripts run without the virtualenv).
"""
import sys
import time

from benchcore.emulate.skeleton import Cli, DirFixture, alive
from benchcore.processes import procs

PROG = "sleeper"


class Sleeper(DirFixture):
    OWNED = ("sleep.out",)

    def __init__(self, d):
        super().__init__(PROG, {"sleep": "coreutils"}, d)

    def summary(self):
        pid = (self.state or {}).get("pid")
        state = "running" if pid and alive(pid) else ("partial" if self.state else "stopped")
        return {"dir": self.dir, "state": state, "pid": pid}

    def describe(self, s):
        return [f": sleep {s['pid']}", f"log {self.path('sleep.out')}"]

    def up(self, args):
        if self.running():
            return self.log(f"already up in {self.dir}")
        self.claim(pid=None)
        with open(self.path("sleep.out"), "ab") as out:
            self.state["pid"] = procs.spawn(["sleep", "300"], stdout=out, stderr=out, die_with_parent=False).pid
        self.save()
        if args.then_sh:
            self.run(["sh", "-c", args.then_sh], timeout=10)
        self.log(f"up: sleep {self.state['pid']}")

    def teardown(self):
        pid = self.state.get("pid")
        if not pid or not alive(pid):
            return []
        procs.kill(pid)
        while alive(pid):
            time.sleep(0.01)
        return [f"ended sleep {pid}"]


def main(argv=None):
    cli = Cli(PROG, "A sleep in the background, as a fixture.", None, "--dir", required=True)
    cli.command("up", "start it").add_argument("--then-sh", help="then run this shell command (it may fail)")
    cli.command("down", "end it")
    cli.status_command()
    return cli.main(argv, lambda args: Sleeper(args.dir).command(args))


if __name__ == "__main__":
    sys.exit(main())
