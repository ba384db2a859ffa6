"""The Slurm launcher: inside an allocation, srun starts one node agent per node (this module, run as
`python -m commbench.launch.slurm`), which picks its interface and becomes torchrun; the rendezvous is on the
allocation's first node, its port derived from the job id. The plan file reaches every node by sbcast (Slurm's
copy of a file to each node of the allocation) into the node's temp dir, and is removed from them after."""
import json
import os
import re
import sys
import tempfile

from commbench.launch.spec import LaunchSpec
from commbench.launch.torchrun import agent_argv, node_env, split_endpoint

SHOWN_NODES = 2   # a dry run shows the agent line of node 0 (the rendezvous host) and of node 1 (every other)


def node_plan_file(plan):
    """Where sbcast puts the plan file on every node: its temp dir, named by job and run."""
    job = os.environ.get("SLURM_JOB_ID", "JOB")
    return os.path.join(tempfile.gettempdir(), f"commbench-plan-{plan.run_id}-{job}.json")


def sbcast(plan_file, there):
    return ["sbcast", plan_file, there]


def unstage(spec, there):
    return ["srun", "--nodes", str(spec.nodes), "--ntasks-per-node", "1", "rm", "-f", there]


def commands(spec, plan, plan_file):
    """[(argv, env)]: one srun starting every node's agent; a dry run also shows what an agent becomes."""
    agent = {"spec": spec.__dict__, "run_id": plan.run_id, "plan_file": plan_file, "endpoint": slurm_endpoint()}
    srun = (["srun", "--nodes", str(spec.nodes), "--ntasks-per-node", "1", "--kill-on-bad-exit=1",
             sys.executable, "-m", "commbench.launch.slurm", json.dumps(agent, separators=(",", ":"))], {})
    if not spec.dry_run:
        return [srun]
    host, _ = split_endpoint(agent["endpoint"])  # what each node's agent becomes
    return [srun] + [(agent_argv(spec, agent["endpoint"], plan.run_id, i == 0, f"NODE{i}_ADDR", plan_file),
                      node_env(spec, host, i == 0)[0]) for i in range(min(spec.nodes, SHOWN_NODES))]


def first_host(nodelist):
    """First host of a Slurm node list: 'gpu[03-04,07],cpu1' -> 'gpu03' (scontrol's job, without it)."""
    head = re.match(r"([^,\[]+)(?:\[([^\]]+)\])?", nodelist.strip())
    if not head:
        return nodelist
    prefix, ranges = head.groups()
    return prefix + (re.split(r"[-,]", ranges)[0] if ranges else "")


def slurm_endpoint():
    """Node 0 of the allocation, port derived from the job id (the same on every node)."""
    port = 29500 + int(os.environ.get("SLURM_JOB_ID", "0") or 0) % 1000
    return f"{first_host(os.environ.get('SLURM_JOB_NODELIST', 'localhost'))}:{port}"


def node_agent(agent):
    """On each Slurm node: pick is_host and the interface here, then become torchrun."""
    spec = LaunchSpec(**agent["spec"])
    host, _ = split_endpoint(agent["endpoint"])
    first = os.environ.get("SLURM_NODEID", "0") == "0"
    env, local = node_env(spec, host, first)
    argv = agent_argv(spec, agent["endpoint"], agent["run_id"], first, local, agent["plan_file"])
    os.execve(argv[0], argv, {**os.environ, **env})


if __name__ == "__main__":
    node_agent(json.loads(sys.argv[1]))
