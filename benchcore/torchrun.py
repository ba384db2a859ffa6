"""torchrun command lines and the rank helpers both tools' workers use (one implementation)."""
import sys


def torchrun_argv(module, args, nproc_per_node, *, nnodes=1, endpoint=None, rdzv_id=None, rdzv_conf=None,
                  local_addr=None):
    """argv that runs `python -m module *args` on nproc_per_node ranks through torchrun.

    Without an endpoint: one node, --standalone. With one: a c10d rendezvous at endpoint
    (rdzv_conf e.g. 'is_host=1,join_timeout=120'), no restarts.
    """
    argv = [sys.executable, "-m", "torch.distributed.run", "--nnodes", str(nnodes),
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
