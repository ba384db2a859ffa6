"""The Slurm launcher: inside an allocation, srun starts one node agent per node (this module, run as
`python -m commbench.launch.slurm`), which picks its interface and becomes torchrun; the rendezvous is on the
allocation's first node, its port derived from the job id. The plan file reaches every node by sbcast (Slurm's
copy of a file to each node of the allocation) into the node's temp dir, and is removed from them after."""
import json
import os
import re
import subprocess
import sys
import tempfile

from benchcore.errors import UserError
from benchcore.inputs import shown
from commbench.launch.spec import LaunchSpec
from commbench.launch.torchrun import agent_argv, node_env, split_endpoint

SHOWN_NODES = 2   # a dry run shows the agent line of node 0 (the rendezvous host) and of node 1 (every other)


def node_plan_file(plan):
    """Where sbcast puts the plan file on every node: its temp dir, named by job and run."""
    job = os.environ.get("SLURM_JOB_ID", "JOB")
    return os.path.join(tempfile.gettempdir(), f"commbench-plan-{plan.run_id}-{job}.json")


def sbcast(plan_file, there):
    """The plan file to every node; --force: nodes that share a file system (namespaces of one machine, a shared
    /tmp) see the first node's copy as an existing file (the name is the run's own)."""
    return ["sbcast", "--force", plan_file, there]


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


MAX_HOSTS = 100_000  # a node list that expands past this is not an allocation


_RANGES = r"\[\d+(?:-\d+)?(?:,\d+(?:-\d+)?)*\]"
_ITEM = rf"(?:[^,\[\]\s]|{_RANGES})+"


def expand_nodelist(nodelist):
    """Every host of a Slurm node list, in order, as `scontrol show hostnames` prints them: 'n[0-3]',
    'gpu[001-004,007],cpu1', 'rack1-n[01-02]-ib', 'r[1-2]n[1-2]' (ranges keep their zero padding)."""
    text = nodelist.strip()
    if not re.fullmatch(rf"{_ITEM}(?:,{_ITEM})*", text):
        raise UserError(f"SLURM_JOB_NODELIST {shown(text)!r} is not a Slurm node list")
    hosts = []
    for item in re.findall(_ITEM, text):
        names = [""]
        for part in re.split(rf"({_RANGES})", item):
            choices = [part]
            if part.startswith("["):
                choices = []
                for lo, hi in (r.partition("-")[::2] for r in part[1:-1].split(",")):
                    if int(hi or lo) < int(lo):
                        raise UserError(f"SLURM_JOB_NODELIST {shown(text)!r}: range {lo}-{hi} runs backwards")
                    choices += [str(n).zfill(len(lo)) for n in range(int(lo), min(int(hi or lo), int(lo) + MAX_HOSTS)
                                                                       + 1)]
            names = [n + c for n in names for c in choices]
            if len(hosts) + len(names) > MAX_HOSTS:
                raise UserError(f"SLURM_JOB_NODELIST {shown(text)!r} names more than {MAX_HOSTS} hosts")
        hosts += names
    return hosts


SLURM_CONFS = ("/etc/slurm/slurm.conf", "/etc/slurm-llnl/slurm.conf")


def hostnames(nodelist):
    """The allocation's hosts: `scontrol show hostnames` where Slurm is configured, else expand_nodelist. (Without
    a slurm.conf scontrol asks DNS for one, a query that leaves the machine; Slurm 22.05's scontrol refuses a
    suffix after the brackets, 'rack1-n[01-02]-ib', which the parser takes.)"""
    if not (os.environ.get("SLURM_CONF") or any(os.path.exists(p) for p in SLURM_CONFS)):
        return expand_nodelist(nodelist)
    try:
        done = subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True,
                              timeout=30)
        if done.returncode == 0 and done.stdout.split():
            return done.stdout.split()
    except (OSError, subprocess.TimeoutExpired):
        pass
    return expand_nodelist(nodelist)


PORTS = (29500, 3000)  # rendezvous ports 29500-32499: below Linux's ephemeral range (32768-60999)


def rdzv_port(job_id):
    """The job's rendezvous port: the same on every node; two jobs sharing a node get different ports unless
    their ids are 3000 apart (the node-0 agent then says the port is taken)."""
    return PORTS[0] + int(job_id or 0) % PORTS[1]


def slurm_endpoint():
    """Node 0 of the allocation, port derived from the job id (the same on every node)."""
    first = hostnames(os.environ.get("SLURM_JOB_NODELIST", "localhost"))[0]
    return f"{first}:{rdzv_port(os.environ.get('SLURM_JOB_ID'))}"


def failed_nodes():
    """One line per node of this allocation that Slurm holds down, failing, drained or not responding (a dead slurmd,
    a lost link): what ended the run, named as Slurm names it. [] outside an allocation or where sinfo cannot say."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST")
    if not (nodelist and os.environ.get("SLURM_JOB_ID")):
        return []
    try:
        done = subprocess.run(["sinfo", "-h", "-N", "-n", nodelist, "-o", "%N|%t|%E"], capture_output=True, text=True,
                              timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return []
    out = []
    lines = dict.fromkeys(ln for ln in done.stdout.splitlines() if ln.count("|") == 2)  # a node in 2 partitions
    for node, state, reason in (ln.split("|", 2) for ln in lines):
        if state.startswith(("down", "fail", "drain")) or state.endswith("*"):
            out.append(f"Slurm node {node} is {state} ({reason.strip() or 'no reason given'})")
    return out


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
