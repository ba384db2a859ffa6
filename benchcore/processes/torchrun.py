"""torchrun command lines, the agent they run, and the rank helpers both tools' workers use (one implementation).

`python -m benchcore.processes.torchrun ARGS` is torchrun: the same command line (torch's own parser), the same elastic
agent, rendezvous, restarts and failure reports. Only the start of a rank differs: the agent imports the worker
module once and forks every rank from itself (torch's `start_method="fork"`), where torchrun starts each rank as a
new Python that imports torch again (3-5 s of CPU per rank on a small machine, before the first measurement).
A forked rank keeps the agent's command line; a worker names itself (procs.set_name) so /proc tells it apart.
Where the node has an NVIDIA device the ranks start as torchrun starts them: CUDA and fork do not mix.
"""
import importlib
import os
import runpy
import signal
import sys
import uuid

from benchcore.processes import procs
from benchcore.units import format_size

# Every process that imports torch (a torchrun agent, a rank, a rank mpirun starts) holds 227-232 MB resident before
# any buffer: measured here (torch 2.13 CPU, a 2-rank local run). 200 MiB each is less than any of them: a count whose
# floor passes this machine's memory could never start.
PROCESS_FLOOR_BYTES = 200 << 20


def too_many(processes):
    """'N torch processes, at least X (200 MiB each); this machine has Y' where that many processes that import torch
    cannot all start on this machine, else None (what both tools refuse before they start any)."""
    total = procs.meminfo("MemTotal")
    if processes * PROCESS_FLOOR_BYTES <= total:
        return None
    return (f"{processes} torch processes, at least {format_size(processes * PROCESS_FLOOR_BYTES, approx=True)} "
            f"({PROCESS_FLOOR_BYTES >> 20} MiB each); this machine has {format_size(total, approx=True)}")


def torchrun_argv(module, args, nproc_per_node, *, nnodes=1, endpoint=None, rdzv_id=None, rdzv_conf=None,
                  local_addr=None):
    """argv that runs `python -m module *args` on nproc_per_node ranks through torchrun.

    Without an endpoint: one node, --standalone. With one: a c10d rendezvous at endpoint
    (rdzv_conf e.g. 'is_host=1,join_timeout=120'), no restarts.
    """
    argv = [sys.executable, "-m", "benchcore.processes.torchrun", "--nnodes", str(nnodes),
            "--nproc-per-node", str(nproc_per_node)]
    if endpoint is None:
        argv.append("--standalone")
    else:
        argv += ["--rdzv-backend", "c10d", "--rdzv-endpoint", endpoint, "--rdzv-id", rdzv_id]
        if rdzv_conf:
            argv += ["--rdzv-conf", rdzv_conf]
        if local_addr:
            argv += ["--local-addr", local_addr]
        argv += ["--max-restarts", "0"]
    return argv + ["-m", module, *map(str, args)]


def rank_sum(value, device=None):
    """An integer summed over every rank of the default process group."""
    import torch
    import torch.distributed as dist

    t = torch.tensor([int(value)], dtype=torch.int64, device=device)
    dist.all_reduce(t)
    return int(t.item())


def _rank(module, args):
    """One forked rank: the worker module run as __main__ (its imports are the agent's, already loaded), with the
    signal dispositions of a new Python (the agent's handlers turn SIGTERM into an exception)."""
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


def main(argv=None):
    from torch.distributed.launcher.api import elastic_launch
    from torch.distributed.run import config_from_args, parse_args, run

    args = parse_args(argv)
    if not args.module or os.path.exists("/dev/nvidiactl"):
        run(args)
        return
    if args.standalone:   # what torchrun makes of it: a c10d store of its own on a free local port
        args.rdzv_backend, args.rdzv_endpoint, args.rdzv_id = "c10d", "localhost:0", str(uuid.uuid4())
    config, _, _ = config_from_args(args)
    config.start_method = "fork"
    importlib.import_module(args.training_script)
    elastic_launch(config, _rank)(args.training_script, list(args.training_script_args))


if __name__ == "__main__":
    main()
