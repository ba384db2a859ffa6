"""What every rank shares: the process group, its device, and the facts every record carries."""
import datetime
import os
import platform

import torch
import torch.distributed as dist

from benchcore.results import schema
from benchcore.results.records import git_revision, hostname, timestamp
from commbench.evidence import gloo
from commbench.evidence import mpi as evidence_mpi
from commbench.evidence import nccl as nccl_evidence
from commbench.evidence.applied import ROWS, judge_settings
from commbench.launch import mpirun
from commbench.launch.liveness import Position
from commbench.model.alphabeta import record_fields
from commbench.model.topology import from_dict
from commbench.transports import envvars, mpi
from commbench.transports.torch_dist import torch_primitives

ENV_PREFIXES = ("NCCL_", "TORCH_NCCL_", "GLOO_", "MPIR_CVAR_", "UCX_")  # Open MPI's: commbench.launch.mpirun.user_vars


def same_plan(ids):
    """Every rank learns, at start, when nodes were given different command lines (RuntimeError naming them)."""
    host0, node0, plan0, _ = ids[0]
    for host, node, plan, _ in ids[1:]:
        differ = [k for k in plan0 if plan[k] != plan0[k]]
        if differ:
            shown = "; ".join(f"{k} {_short(plan0[k])} on node {node0} ({host0}) but {_short(plan[k])} on node "
                              f"{node} ({host})" for k in differ)
            raise RuntimeError(f"the nodes were started with different command lines: {shown} (torchrun's node "
                               "numbers); run the same command on every node")


def _short(value, limit=80):
    text = str(value)
    return text if len(text) <= limit else text[:limit] + "..."


class Context:
    """Process group, device and this run's record context, for a Plan."""

    def __init__(self, plan):
        self.plan = plan
        self.position = Position()   # where this rank is; the worker shares its Liveness's
        self.measured = 0            # measurements taken so far (a time budget shares what is left among the rest)
        self.overhead_s = 0.0        # a measurement's cost beside its timed loops, where a time budget measured it
        backend = plan.backend
        if backend == "auto":
            backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl" and not torch.cuda.is_available():
            raise RuntimeError("--backend nccl needs CUDA, and this rank sees no GPU")
        self.backend = backend
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        timeout = datetime.timedelta(seconds=plan.timeout)
        more_versions, before = {}, gloo.socket_inodes() if backend == "gloo" and plan.evidence else None
        if backend == "mpi":  # mpirun started the ranks; MPI_COMM_WORLD is the process group
            self.comm, self.device, self.rank, self.world_size, more_versions = mpi.start(self.local_rank,
                                                                                          plan.evidence)
        else:
            if backend == "nccl":
                self.device = torch.device("cuda", self.local_rank)
                torch.cuda.set_device(self.device)
                dist.init_process_group("nccl", timeout=timeout, device_id=self.device)
            else:
                self.device = torch.device("cpu")
                dist.init_process_group("gloo", timeout=timeout)
            self.rank, self.world_size = dist.get_rank(), dist.get_world_size()
            self.comm = torch_primitives(self.device, self.local_rank)
        self.host = hostname()
        seen = envvars.launch_names(os.environ)   # what this rank's environment holds, not what was asked for
        env = {k: v for k, v in sorted(os.environ.items())
               if (k.startswith(ENV_PREFIXES) or k in seen) and k != "NCCL_DEBUG_FILE"}
        if backend == "mpi":
            env = dict(sorted({**env, **mpirun.user_vars()}.items()))
        ids = self.comm.gather_object((self.host, os.environ.get("GROUP_RANK", "0"), plan.what_is_measured(), env))
        same_plan(ids)
        self.hosts = sorted({i[0] for i in ids})
        self.rank_hosts = [i[0] for i in ids]
        self.node_of = [i[1] for i in ids]   # rank -> the node (torchrun group rank) it runs on
        envs = {i[0]: i[3] for i in ids}
        self.env = env if all(e == env for *_, e in ids) else envs  # per host when the ranks' differ
        # what Gloo's sockets and Open MPI's selection say ran (NCCL's: rank 0 follows its logs, evidence()), once
        # the first collective has connected the ranks; applied: the settings in env that a row of evidence.applied
        # proves
        self.effective = None if not plan.evidence else gloo.collect(self.comm, before) if backend == "gloo" else \
            evidence_mpi.collect(self.comm) if backend == "mpi" else None
        self.requested = {k: v for k, v in env.items() if k in ROWS and backend in envvars.read_by(k)}
        self.applied = self.effective and judge_settings(self.requested, self.effective)
        self.nccl_logs = nccl_evidence.Follower(os.environ) if backend == "nccl" and self.rank == 0 and plan.evidence \
            else None
        self.nodes = len(set(self.node_of))
        self.blocking = plan.blocking if plan.blocking is not None else backend != "nccl"
        self.topology = from_dict(plan.topology)
        self.versions = {"torch": torch.__version__, "python": platform.python_version(), "suite": git_revision()}
        if backend == "nccl":
            self.versions["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
            self.versions["cuda"] = torch.version.cuda
        self.versions.update(more_versions)

    def barrier(self):
        self.comm.barrier()

    def evidence(self, collective, size_bytes):
        """The record's effective and applied fields: Gloo's and MPI's as collected at start, NCCL's as its logs
        say so far (rank 0, which makes the records, follows its node's)."""
        if self.nccl_logs:
            eff = self.nccl_logs.effective()
            return {"effective": nccl_evidence.for_record(eff, collective, size_bytes, self.world_size),
                    "applied": judge_settings(self.requested, eff)}
        return {"effective": self.effective, "applied": self.applied} if self.effective else {}

    def record(self, case, cfg, row, **fields):
        """The record of one timed phase (row) of case config cfg, with this run's context."""
        plan = self.plan
        phase = row.pop("phase")
        strategy = case.name if case.kind == "strategy" else None
        pattern = case.name if case.kind == "overlap" else None
        predicted = record_fields(self.topology, case, cfg, phase, fields["size_bytes"], self.world_size, self.nodes,
                                  self.backend, row.get("busbw_gbps"))
        return schema.measurement(
            "commbench", run_id=plan.run_id, collective=case.record_collective(phase),
            strategy=strategy, **({"pattern": pattern} if pattern else {}),
            **({"phase": phase, "timed_apart": len(case.phases) > 1} if strategy or pattern else {}),
            **{k: v for k, v in cfg.items() if k != "case"}, **row, **fields,
            iters=plan.iters, warmup=plan.warmup, agg=plan.agg, agg_iters=plan.agg_iters,
            world_size=self.world_size, nodes=self.nodes, local_world_size=int(os.environ.get("LOCAL_WORLD_SIZE", "1")),
            backend=self.backend, launcher=plan.launcher, emulated=plan.emulated, env=self.env, **predicted,
            hosts=self.hosts, versions=self.versions, command=plan.command, timestamp=timestamp(), **plan.requested,
            **self.evidence(case.record_collective(phase), fields["size_bytes"]),
            **plan.tags)
