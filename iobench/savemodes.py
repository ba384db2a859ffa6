"""How a checkpoint is saved and what training feels of it (model-ckpt's and torch-ckpt's --save-mode).

The modes are torch.distributed.checkpoint's: `sync` (dcp.save: training waits for the last byte), `async-thread` and
`async-process` (dcp.async_save with AsyncCheckpointerType.THREAD or .PROCESS: the state is staged, then a background
thread of the rank, or a background process DCP starts once per rank, writes it). Staging goes to pinned memory with
a non-blocking copy on a side stream where CUDA exists, to (shared, for the process) host memory otherwise; the staged
buffers are kept and reused from one checkpoint to the next (DCP's DefaultStager). Plan caching is DCP's
DefaultSavePlanner(enable_plan_caching=...). Every file is fsynced (FileSystemWriter sync_files), as in sync mode.

Around each save the rank runs a training-like step: a GEMM of n x n by n x n (2 n^3 flops, fp32) on its device,
synchronised so a step's time is its own: STEPS_AROUND before the save (the undisturbed step time), as many as fit
while a background save runs, STEPS_AROUND after. Per checkpoint and rank (figures()): blocked (the save call until
training resumes), staging (copying the state out), background (the save call until DCP's future says the last byte
is written and fsynced), the steps that ran during the background save and their rate over the undisturbed one, the
step time lost (the time those steps took beyond what they take undisturbed) and the cost to training: blocked + lost.
"""
import os
import shutil
import time
from concurrent.futures import Future

from benchcore.lazy import lazy

torch = lazy("torch", globals())
dcp = lazy("torch.distributed.checkpoint", globals(), "dcp")
saver_api = lazy("torch.distributed.checkpoint.state_dict_saver", globals(), "saver_api")
staging = lazy("torch.distributed.checkpoint.staging", globals(), "staging")
planners = lazy("torch.distributed.checkpoint.default_planner", globals(), "planners")

# --save-mode -> DCP's AsyncCheckpointerType member (None: dcp.save)
MODES = {"sync": None, "async-thread": "THREAD", "async-process": "PROCESS"}
DEFAULT_STEP = 512        # the GEMM's n: 268 MFLOP a step, ~10-30 ms on one core here
STEPS_AROUND = 5          # undisturbed steps before and after each save
TRACE_LIMIT = 2000        # steps kept for the step-time plot (rank 0's last checkpoint)


def device():
    """Where training's state and steps live: this rank's GPU (its LOCAL_RANK's) where CUDA exists, else the CPU."""
    if not torch.cuda.is_available():
        return torch.device("cpu")
    gpu = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")) % torch.cuda.device_count())
    torch.cuda.set_device(gpu)
    return gpu


def parse_modes(text):
    """'sync,async-thread' -> the modes in order; one clear line for an unknown one."""
    from benchcore.errors import UserError
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in MODES]
    if unknown or not names:
        raise UserError(f"unknown --save-mode {(unknown or [text])[0]!r}; known: {', '.join(MODES)}")
    return list(dict.fromkeys(names))


class TimedStager:
    """DCP's DefaultStager, timed: staging's seconds (a CUDA run stages in the background: until its future is done)."""

    def __init__(self, inner):
        self.inner, self.seconds = inner, None

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def stage(self, state_dict, **kwargs):
        start = time.perf_counter()
        staged = self.inner.stage(state_dict, **kwargs)
        if isinstance(staged, Future):
            staged.add_done_callback(lambda _: setattr(self, "seconds", time.perf_counter() - start))
        else:
            self.seconds = time.perf_counter() - start
        return staged


class Saver:
    """One rank's saves in one mode, through a checkpoint process group of its own (a background thread's
    collectives never meet the training loop's)."""

    def __init__(self, mode, plan_cache, device):
        self.mode, self.plan_cache, self.device = mode, plan_cache, device
        self.group = torch.distributed.new_group(backend="gloo")
        cuda = device.type == "cuda"
        self.stager = None
        if MODES[mode]:
            self.stager = TimedStager(staging.DefaultStager(staging.StagingOptions(
                use_pinned_memory=cuda, use_shared_memory=mode == "async-process", use_async_staging=cuda,
                use_non_blocking_copy=cuda)))

    def staging_where(self):
        if not self.stager:
            return "none (sync: written from the training state)"
        return ("pinned host memory, non-blocking copy on a side stream" if self.device.type == "cuda" else
                "host memory" + (" (shared with the checkpoint process)" if self.mode == "async-process" else ""))

    def save(self, state, directory):
        """Start the save; (its future, done when the last byte is written and fsynced)."""
        writer = dcp.FileSystemWriter(directory, sync_files=True, overwrite=False)
        planner = planners.DefaultSavePlanner(enable_plan_caching=self.plan_cache)
        if not self.stager:
            dcp.save(state, storage_writer=writer, planner=planner, process_group=self.group)
            done = Future()
            done.set_result(None)
            return done
        self.stager.seconds = None
        response = dcp.async_save(state, storage_writer=writer, planner=planner, process_group=self.group,
                                  async_checkpointer_type=getattr(saver_api.AsyncCheckpointerType, MODES[self.mode]),
                                  async_stager=self.stager)
        return response.upload_completion if hasattr(response, "upload_completion") else response

    def close(self):
        if self.stager:
            self.stager.inner.close()


class Steps:
    """The training-like step: C = A @ B, n x n fp32, on the rank's device, waited for."""

    def __init__(self, n, device):
        gen = torch.Generator().manual_seed(n)
        self.a = torch.randn(n, n, generator=gen).to(device)
        self.b = torch.randn(n, n, generator=gen).to(device)
        self.c = torch.empty_like(self.a)
        self.n, self.device = n, device

    def one(self):
        """(end, seconds) of one step (perf_counter)."""
        start = time.perf_counter()
        torch.mm(self.a, self.b, out=self.c)
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        end = time.perf_counter()
        return end, end - start

    def flops(self):
        return 2 * self.n ** 3


def checkpoint(saver, steps, state, directory, timeout, resumed=None):
    """One checkpoint as training feels it: undisturbed steps, the save, steps while it runs in the background,
    undisturbed steps again; figures() of it, the step trace (seconds from the save call, step seconds, phase),
    and the perf_counter() of the save call and of its last byte. resumed(): called once the save call returned
    (training resumes; the save goes on in the background), before the first step beside it."""
    before = [steps.one() for _ in range(STEPS_AROUND)]
    done_at = []
    call = time.perf_counter()
    future = saver.save(state, directory)
    resumed_at = time.perf_counter()
    future.add_done_callback(lambda _: done_at.append(time.perf_counter()))
    if resumed:
        resumed()
    during = []
    while not future.done():
        if time.perf_counter() - call > timeout:
            raise TimeoutError(f"the {saver.mode} save did not finish within {timeout} s")
        during.append(steps.one())
    future.result()
    while not done_at:     # the callback runs in the thread that completed the future: a moment later
        time.sleep(0.0005)
    after = [steps.one() for _ in range(STEPS_AROUND)]
    trace = [(end - call, s, phase) for phase, run in (("before", before), ("during", during), ("after", after))
             for end, s in run]
    return figures(call, resumed_at, done_at[0], [s for _, s in before + after], during, saver.stager), trace, call, \
        done_at[0]


def figures(call, resumed, done, undisturbed, during, stager):
    """What training felt of one save (seconds): blocked, staging, background (call to last byte), the steps that
    ran while the save went on, their rate over the undisturbed one, the step time lost and the cost (blocked +
    lost). The window the lost time is counted over runs from training's resumption to the end of the last step
    that overlapped the save (that step ran beside it too)."""
    step = sorted(undisturbed)[len(undisturbed) // 2]
    window = (during[-1][0] - resumed) if during else 0.0
    lost = max(0.0, window - len(during) * step) if during else 0.0
    blocked = resumed - call
    return {"blocked_s": blocked, "staging_s": stager.seconds if stager else None,
            "background_s": done - call, "steps_during": len(during),
            "step_rate_during": len(during) * step / window if during and window > 0 else None,
            "step_s": step, "step_s_during": sum(s for _, s in during) / len(during) if during else None,
            "step_lost_s": lost, "cost_s": blocked + lost}


class Feel:
    """One rank's checkpoints in --save-mode's modes, one mode after another: each mode's saver, its first save
    (untimed: DCP's first save plans from scratch, the process mode starts its checkpoint process), then each
    checkpoint as a phase function for model_worker (directory, state) -> its figures, trace and wall-clock times."""

    def __init__(self, n, timeout, plan_cache):
        self.device = device()
        self.steps, self.timeout, self.plan_cache = Steps(n, self.device), timeout, plan_cache
        self.saver, self.first, self.staging = None, {}, {}

    def begin(self, mode, warm_up, state):
        """Switch to `mode`: its saver, and one untimed save into warm_up (removed after); the first save's
        seconds, call to last byte, this rank's, kept in self.first."""
        if self.saver:
            self.saver.close()
        self.saver = Saver(mode, self.plan_cache, self.device)
        self.staging[mode] = self.saver.staging_where()
        rank = torch.distributed.get_rank()
        if rank == 0:
            warm_up.mkdir()
        torch.distributed.barrier()
        start = time.perf_counter()
        self.saver.save(state, warm_up).result(timeout=self.timeout)
        self.first[mode] = time.perf_counter() - start
        torch.distributed.barrier()
        if rank == 0:
            shutil.rmtree(warm_up)

    def save(self, directory, state, resumed=None):
        """One checkpoint: (figures, the step trace, the save call's and the last byte's time.time()); resumed: as
        checkpoint()'s."""
        wall = time.time() - time.perf_counter()
        figs, trace, call, done = checkpoint(self.saver, self.steps, state, directory, self.timeout, resumed)
        return {**figs, "call_wall": wall + call, "done_wall": wall + done, "trace": trace}

    def describe(self):
        return {"step_n": self.steps.n, "step_flops": self.steps.flops(), "step_device": self.device.type,
                "plan_cache": self.plan_cache, "first_save_s": self.first, "staging": self.staging}

    def close(self):
        if self.saver:
            self.saver.close()

    def saver_mode(self):
        return self.saver.mode if self.saver else None
