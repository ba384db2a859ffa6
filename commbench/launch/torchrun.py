"""The torchrun launcher: one torchrun agent per node, joined by a c10d rendezvous. Started by hand on every
node (--rdzv-endpoint HOST:PORT --node-rank R); the local and Slurm launchers start the same agents. Here: the
agent's command line and environment (the interface that reaches the rendezvous host), and the endpoint checks.
"""
import errno
import os
import socket

from benchcore.errors import UserError
from benchcore.processes.route import route_to, split_endpoint
from benchcore.processes.torchrun import torchrun_argv
from benchcore.results.records import hostname
from commbench.launch.liveness import ADDR_ENV, RECORD_NODE_ENV

IFNAME_VARS = ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")


def check_endpoint(spec):
    """Before launching on node rank 0 (which serves the rendezvous): its endpoint is an address of this
    node and the port is free. Other nodes: the endpoint resolves and has a route."""
    if spec.launcher != "torchrun":
        return
    host, port = split_endpoint(spec.rdzv_endpoint)
    try:
        addr = socket.gethostbyname(host)
    except OSError:
        raise UserError(f"--rdzv-endpoint host {host} does not resolve on {hostname()}") from None
    if spec.node_rank != 0:
        route_to(host)
        return
    for bind_to, refusal in (((addr, 0), f"{host} ({addr}) is not an address of this node ({hostname()}); node "
                                          "rank 0 serves the rendezvous at one of its own addresses"),
                             (("", port), f"port {port} is already in use on {hostname()} (another commbench or "
                                          "service): choose another --rdzv-endpoint port")):
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the store binds: TIME_WAIT is free
            try:
                s.bind(bind_to)
            except OSError as exc:
                if exc.errno in (errno.EADDRNOTAVAIL, errno.EADDRINUSE):
                    raise UserError(f"--rdzv-endpoint {spec.rdzv_endpoint}: {refusal}") from None
                raise


def store_timeout(spec):
    """torchrun's rendezvous store timeout (read_timeout, default 60 s): a node that cannot reach the
    store host gives up after two connect attempts, so half of --rdzv-timeout keeps within it."""
    return int(max(5, min(60, spec.rdzv_timeout / 2)))


def agent_argv(spec, endpoint, run_id, is_host, local_addr, plan_file):
    conf = f"is_host={int(is_host)},join_timeout={int(spec.rdzv_timeout)},read_timeout={store_timeout(spec)}"
    return torchrun_argv("commbench.worker", ["--plan-file", plan_file], spec.nproc_per_node, nnodes=spec.nodes,
                         endpoint=endpoint, rdzv_id=run_id, rdzv_conf=conf, local_addr=local_addr)


def node_env(spec, host, record_node):
    """Environment for one node agent: the socket interface that reaches the rendezvous host."""
    env = dict(spec.env)
    try:
        ifname, local = route_to(host)
    except UserError:
        if not spec.dry_run:
            raise
        ifname, local = "IFACE_TO_" + host, "LOCAL_ADDR"  # a dry run prints what it can

    for var in IFNAME_VARS:
        if var not in os.environ and var not in env:
            env[var] = ifname
    env[RECORD_NODE_ENV] = "1" if record_node else "0"
    env[ADDR_ENV] = local  # where this node's ranks answer liveness probes
    env["PYTHONUNBUFFERED"] = "1"
    return env, local


def commands(spec, plan, plan_file):
    """[(argv, env)]: this node's agent, joining the rendezvous at --rdzv-endpoint (its plan file is this node's)."""
    host, port = split_endpoint(spec.rdzv_endpoint)
    env, local = node_env(spec, host, spec.node_rank == 0)
    rdzv_id = f"commbench-{port}"  # every node derives the same id; each one's run_id is its own
    return [(agent_argv(spec, spec.rdzv_endpoint, rdzv_id, spec.node_rank == 0, local, plan_file), env)]
