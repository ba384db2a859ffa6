"""Real torch ranks on this node: a worker module under torchrun, its result JSON back (torch-ckpt, model-ckpt)."""
import json
import os
import tempfile
from pathlib import Path

from benchcore.errors import UserError
from benchcore.processes import procs
from benchcore.processes.procs import one_line
from benchcore.processes.torchrun import torchrun_argv


def run_ranks(module, args, ranks, timeout, cwd, result, what, budget=""):
    """torchrun `module` on `ranks` local ranks with `args`, stopped after `timeout` s; the JSON the worker wrote to
    `result` (its "error", or a failed torchrun: one line naming `what`; budget: how the timeout was made)."""
    here = str(Path(__file__).resolve().parent.parent)
    with tempfile.TemporaryDirectory(prefix="iobench-torchrun-") as tmp:   # torchrun's torchelastic_* dirs, removed
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "TMPDIR": tmp,
               "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
        done = procs.run(torchrun_argv(module, args, ranks), timeout, cwd=cwd, env=env)
    if done.timed_out:
        raise UserError(f"{what}: torchrun did not finish within {timeout} s and was stopped{budget}")
    data = json.loads(Path(result).read_text()) if Path(result).exists() else {}
    if "error" in data:
        raise UserError(data["error"])
    if done.returncode != 0 or not data:
        raise UserError(f"{what}: torchrun failed (exit {done.returncode}): {one_line(done.stderr[-3000:])}")
    return data
