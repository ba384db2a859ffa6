"""The local launcher: N torchrun agents on this machine, joined by a real c10d rendezvous on 127.0.0.1
(--nodes N emulated here)."""
import socket

from commbench.launch.torchrun import agent_argv, node_env


def commands(spec, plan, plan_file):
    """[(argv, env)]: every node's agent, agent 0 hosting the rendezvous on a free port; one plan file for all."""
    endpoint = f"127.0.0.1:{free_port()}"
    return [(agent_argv(spec, endpoint, plan.run_id, i == 0, local, plan_file), env)
            for i in range(spec.nodes) for env, local in [node_env(spec, "127.0.0.1", i == 0)]]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
