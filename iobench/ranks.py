"""Real torch ranks on this node: a worker module under torchrun, its result JSON back (torch-ckpt, model-ckpt)."""
import json
import os
import shutil
from pathlib import Path

from benchcore.errors import UserError
from benchcore.processes import procs
from benchcore.processes.procs import one_line
from benchcore.processes.route import route_to, split_endpoint
from benchcore.processes.torchrun import torchrun_argv


def run_ranks(module, args, ranks, timeout, cwd, result, what, budget="", nodes=None):
    """torchrun `module` on `ranks` local ranks with `args`, stopped after `timeout` s; the JSON the worker wrote to
    `result` (its "error", or a failed torchrun: one line naming `what`; budget: how the timeout was made); result
    None: this node's ranks only took part (another node's rank 0 writes it), {} when they finished.
    nodes: (count, this node's rank, HOST:PORT of the rendezvous node 0 serves) for a run over several nodes.
    cwd: the run's private scratch directory (its held path); torchrun's TMPDIR (its torchelastic_* directories) is
    inside it, so a killed run leaves them where `iobench clean` removes the scratch directory."""
    here = str(Path(__file__).resolve().parent.parent)
    tmp = Path(cwd) / "torchrun"
    tmp.mkdir(mode=0o700)
    try:
        env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"), "TMPDIR": str(tmp),
               "PYTHONPATH": os.pathsep.join(p for p in (here, os.environ.get("PYTHONPATH")) if p)}
        if nodes:
            count, node_rank, endpoint = nodes
            env.setdefault("GLOO_SOCKET_IFNAME", route_to(split_endpoint(endpoint)[0])[0])
            argv = torchrun_argv(module, args, ranks, nnodes=count, endpoint=endpoint, rdzv_id=f"iobench-{what}",
                                 rdzv_conf=f"is_host={int(node_rank == 0)}")
        else:
            argv = torchrun_argv(module, args, ranks)
        done = procs.run(argv, timeout, cwd=cwd, env=env)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if done.timed_out:
        raise UserError(f"{what}: torchrun did not finish within {timeout} s and was stopped{budget}")
    data = json.loads(Path(result).read_text()) if result and Path(result).exists() else {}
    if "error" in data:
        raise UserError(data["error"])
    if done.returncode != 0 or (result and not data):
        raise UserError(f"{what}: torchrun failed (exit {done.returncode}): {one_line(done.stderr[-3000:])}")
    return data
