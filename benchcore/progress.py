"""Where a long command is and when it will end, on stderr (stdout stays a table, JSON or CSV): one mechanism for
both tools. On a terminal a rich bar (the step, how many, elapsed, time left); without one (a Slurm log, a pipe) one
plain line every EVERY_S seconds (PROGRESS_EVERY_S in the environment: another interval, 1 s or more) while the
work goes on, e.g. `[7/24] overlap ddp R=1 16M repeat 2/3, 3m10s elapsed, ~5m left`; --quiet: nothing.

The time left is read from what was measured so far: the time the steps done took over their weight (a step's
expected share of the work: its payload, or 1 where each step gets an equal share), times the weight left; before
the first step ends, an estimate given up front (a time budget), else 'estimating'. rich is imported only for a bar.
"""
import math
import os
import sys
import threading
import time

from benchcore.errors import UserError
from benchcore.files import open_append

EVERY_S = 10.0      # a plain line this often, no more, no less (PROGRESS_EVERY_S: every_s())
MAX_EVERY_S = 86400.0
BAR_REFRESH_S = 1.0
_state = {"quiet": False}


def set_quiet(quiet):
    _state["quiet"] = bool(quiet)


def quiet():
    return _state["quiet"]


def every_s():
    """Seconds between two plain lines: PROGRESS_EVERY_S where set (1 to a day), else EVERY_S."""
    text = os.environ.get("PROGRESS_EVERY_S", "").strip()
    if not text:
        return EVERY_S
    try:
        value = float(text) if len(text) <= 12 else math.nan
    except ValueError:
        value = math.nan
    if not 1 <= value <= MAX_EVERY_S:   # NaN and inf fail too
        raise UserError(f"PROGRESS_EVERY_S is {text[:20]!r}: give the seconds between two progress lines, "
                        f"from 1 to {MAX_EVERY_S:.0f}")
    return value


def quiet_option(fn):
    """--quiet on a command: no progress on stderr (records, tables and errors are unchanged)."""
    import click
    return click.option("--quiet", is_flag=True, expose_value=False, is_eager=True,
                        callback=lambda ctx, param, value: set_quiet(value) or every_s(),   # checked up front
                        help="No progress lines or bar on stderr.")(fn)


def duration(seconds):
    """'45s', '3m10s', '2h05m': a duration as a person reads it."""
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def rough(seconds):
    """'~5m', '~40s', '~1h10m': a time left, rounded as far as an estimate deserves."""
    seconds = max(0, seconds)
    if seconds < 60:
        return f"~{max(1, round(seconds / 5) * 5 if seconds > 10 else round(seconds))}s"
    if seconds < 3600:
        minutes = round(seconds / 60)
        return f"~{minutes}m" if minutes >= 10 else f"~{duration(round(seconds / 10) * 10)}"
    return f"~{duration(round(seconds / 300) * 300)}"


FOLLOW_READ = 1 << 16   # bytes of a followed file read per look: its lines are a few dozen bytes each


def announce(path, index, total, text):
    """A worker's side of Reporter.follow (a process the launcher runs, e.g. under torchrun): step index (from 0)
    of total is under way, said in one line appended to path; nothing where path is empty."""
    if path:
        with open_append(path, "progress file") as f:
            f.write(f"{index} {total} {time.time():.3f} {' '.join(text.split())}\n")


class Reporter:
    """A command's progress over steps of known weights. step(i, text): step i (from 0) is under way, the steps
    before it are done; detail(text): what happens inside it; close() (or a with block) ends the bar or lines.
    unit: what a step is ('checkpoint'): the line then says the time one took; follow(path): the steps a worker
    announces (announce) in that file."""

    def __init__(self, title, weights, expect_s=None, stream=None, every=None, enabled=True, unit=None):
        self.title, self.weights, self.expect_s = title, [float(w) for w in weights], expect_s
        self.unit, self._follow, self._watches = unit, None, []
        self.stream = stream or sys.stderr
        self.every, self.index, self.text, self.extra = every or every_s(), 0, title, ""
        self.started = self.first = time.monotonic()
        self.mark = None    # (when, weight done then): the rate counts from the first step, or a resize
        self.mode = None if _state["quiet"] or not enabled else "bar" if _isatty(self.stream) else "lines"
        self._stop, self._thread, self._bar = threading.Event(), None, None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()

    def start(self):
        if self.mode == "bar":
            self._bar = _rich_bar(self.stream)
            self._bar.start()
            self._task = self._bar.add_task(self.title, total=len(self.weights) or None, left="")
        if self.mode:
            self._thread = threading.Thread(target=self._tick, name="progress", daemon=True)
            self._thread.start()
        return self

    def step(self, index, text, at=None):
        """Step index is under way (every step before it is done); text says which; at: since when (monotonic)."""
        self.index, self.text, self.extra = max(0, min(index, len(self.weights))), text, ""
        if self.mark is None:   # time before it (a launch's start-up, a calibration) is no step's
            self.mark = (time.monotonic() if at is None else at, sum(self.weights[:self.index]))
        self._refresh()

    def say(self, text):
        """What happens now, before the first step or between steps (a start-up): no step starts, none is done."""
        self.text, self.extra = text, ""
        self._refresh()

    def detail(self, text):
        self.extra = text
        self._refresh()

    def print(self, text):
        """A line of the command's own on stderr (above the bar on a terminal)."""
        if self._bar:
            self._bar.console.print(text, markup=False, highlight=False)
        else:
            self.stream.write(text + "\n")
            self.stream.flush()

    def resize(self, weights, keep_rate=False):
        """The steps changed (a time budget fitted the repeats): the new weights, the steps done kept. keep_rate: the
        steps done keep their rate (steps were added, the ones done are as they were)."""
        self.weights = [float(w) for w in weights]
        if not keep_rate:
            self.mark = None   # the steps from the next one on are the ones measured: their rate counts from there
        if self._bar:
            self._bar.update(self._task, total=len(self.weights))
        self._refresh()

    def follow(self, path):
        """Read the steps a worker announces in path (announce) before each line or refresh."""
        self._follow = [path, 0]

    def watch(self, look):
        """look() is called once a second while the work goes on (it may call step: a file of records it reads)."""
        self._watches.append(look)

    def unwatch(self, look):
        self._watches.remove(look)

    def _read_follow(self):
        if not self._follow:
            return
        path, offset = self._follow
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                data = f.read(FOLLOW_READ)
        except OSError:   # not written yet
            return
        data = data[:data.rfind(b"\n") + 1]
        self._follow[1] += len(data)
        for line in data.decode(errors="replace").splitlines():
            index, total, wall, text = (line.split(" ", 3) + ["", "", ""])[:4]
            try:
                since = time.monotonic() - max(0.0, time.time() - float(wall))
            except ValueError:
                continue
            if index.isdigit() and total.isdigit() and int(total) > 0:
                if int(total) != len(self.weights):
                    self.resize([1] * int(total))
                self.step(int(index), text, since)

    def per_step_s(self):
        """Seconds one step of weight 1 took, from the steps done so far; None before one is done."""
        done = sum(self.weights[:self.index])
        if self.mark and done > self.mark[1]:
            return (time.monotonic() - self.mark[0]) / (done - self.mark[1])
        return None

    def left_s(self):
        """Seconds left: the steps done's rate over the weight left; before that the estimate given, or None."""
        done, total = sum(self.weights[:self.index]), sum(self.weights)
        if self.mark and done > self.mark[1]:
            return (time.monotonic() - self.mark[0]) / (done - self.mark[1]) * (total - done)
        if self.expect_s and time.monotonic() - self.started < self.expect_s:
            return self.expect_s - (time.monotonic() - self.started)
        return None   # nothing measured yet, or past the estimate given

    def line(self):
        """`[7/24] overlap ddp R=1 16M repeat 2/3, 3m10s elapsed, ~5m left` (with a unit: `..., 41s per
        checkpoint, ~5m left`)."""
        left, each = self.left_s(), self.per_step_s() if self.unit else None
        where = self.text + (f" ({self.extra})" if self.extra else "")
        return ((f"[{min(self.index + 1, len(self.weights))}/{len(self.weights)}] " if len(self.weights) > 1 else "")
                + f"{where}, "
                f"{duration(time.monotonic() - self.started)} elapsed, "
                + (f"{duration(each)} per {self.unit}, " if each is not None else "")
                + (f"{rough(left)} left" if left is not None else "estimating the time left"))

    def _refresh(self):
        if self._bar:
            left = self.left_s()
            self._bar.update(self._task, completed=self.index, description=self.text + (
                f" ({self.extra})" if self.extra else ""), left=f"{rough(left)} left" if left is not None else "")

    def _tick(self):
        # a followed file is read every second (a step's start known to the second); a plain line every `every` s
        due = time.monotonic() + self.every
        while not self._stop.wait(BAR_REFRESH_S if self.mode == "bar" or self._follow or self._watches else
                                  max(0.0, due - time.monotonic())):
            self._read_follow()
            for look in list(self._watches):
                look()
            if self.mode == "lines" and time.monotonic() >= due - BAR_REFRESH_S / 2:
                due += self.every
                try:
                    self.stream.write(self.line() + "\n")
                    self.stream.flush()
                except (OSError, ValueError):   # stderr closed (a pipe's reader gone): progress is not worth a failure
                    return
            else:
                self._refresh()

    def close(self):
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=2)
        if self._bar:
            self._bar.stop()
            self._bar = None


def _isatty(stream):
    try:
        return stream.isatty()
    except (AttributeError, ValueError):
        return False


def _rich_bar(stream):
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    TextColumn("{task.fields[left]}"), transient=True, console=Console(file=stream))
