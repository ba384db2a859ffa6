"""How a rank orders an overlap pattern's steps: the four phases each pattern is timed in, the two overlapped
orders (run_ahead: communication before its kernel; run_behind: after it) and which pattern runs which (AHEAD),
and one overlapped iteration traced event by event for the timeline."""
import collections
import time

from commbench.cases.case import TOTAL

PHASES = ("comm", "compute", "sequential", TOTAL)
AHEAD = {"ddp": False, "pipelined": True, "pipelined-rs": False}   # communication before its kernel, or after
TRACE_STEPS = 64       # an iteration of at most this many steps is traced for the timeline (per rank, host clock)


def run_ahead(comms, call, depth, span):
    """Communication first: up to `depth` operations in flight, the kernel of step i after operation i
    completed (pipelined). span([start, end]) gets the communication's first launch and last completion."""
    t0 = time.perf_counter()
    pending = collections.deque(comms[j](True) for j in range(min(depth, len(comms))))
    for i in range(len(comms)):
        pending.popleft().wait()
        if i == len(comms) - 1:
            span(t0, time.perf_counter())
        if i + depth < len(comms):
            pending.append(comms[i + depth](True))
        call()


def run_behind(comms, call, depth, span):
    """Compute first: kernel i, then operation i launched, at most `depth` outstanding (the oldest waited before
    another starts); every operation waited at the end (ddp, pipelined-rs)."""
    pending, t0 = collections.deque(), None
    for comm in comms:
        call()
        if len(pending) >= depth:
            pending.popleft().wait()
        t0 = t0 or time.perf_counter()
        pending.append(comm(True))
    for work in pending:
        work.wait()
    span(t0, time.perf_counter())


class _Work:
    """A work whose wait() notes when the communication was seen complete."""

    def __init__(self, work, note):
        self.work, self.note = work, note

    def wait(self):
        self.work.wait()
        self.note()

    def is_completed(self):
        return self.work.is_completed()


def trace(ctx, steps, kernel, run, depth):
    """One overlapped iteration with every operation's launch and completion (as waited on) and every kernel's
    start and end, in us from the iteration's start, on this rank's host clock: [{what, step, start_us, end_us}].
    None on GPU (the host does not see when kernels run there) and past TRACE_STEPS steps."""
    if ctx.device.type != "cpu" or len(steps.comms) > TRACE_STEPS:
        return None
    events, t0 = [], time.perf_counter()
    now = lambda: (time.perf_counter() - t0) * 1e6  # noqa: E731

    def comm(i):
        def launch(a):
            event = {"what": "comm", "step": i, "start_us": now(), "end_us": None}
            events.append(event)
            return _Work(steps.comms[i](a), lambda: event.update(end_us=now()))
        return launch
    calls = iter(range(len(steps.comms)))

    def call():
        event = {"what": "kernel", "step": next(calls), "start_us": now()}
        kernel.call("trace")
        events.append({**event, "end_us": now()})
    ctx.barrier()
    t0 = time.perf_counter()
    run([comm(i) for i in range(len(steps.comms))], call, depth, lambda a, b: None)
    kernel.per_call("trace")
    return events
