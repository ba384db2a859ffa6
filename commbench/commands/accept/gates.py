"""What an acceptance spec adds around the suite's own options, checked as hostile input: the cluster (an exec
prefix each node's command starts with, and node 0's rendezvous endpoint) and a check's environment variables
(`commbench env`'s catalogue; a variable naming a library or file NCCL loads or writes only with allow_paths: true;
others only with allow_unknown_env: true; the test hooks never)."""
import shlex

from benchcore import inputs
from benchcore.errors import UserError, shown
from commbench.commands.accept.kinds import is_argument
from commbench.transports import envvars

CLUSTER = ("exec", "rdzv_endpoint")
# what str.format raises for a hole other than {node}, as the one line a user reads
FORMAT_ERRORS = {KeyError: "names a hole other than {node}", IndexError: "has a {} or {0} hole (only {node})",
                 ValueError: "has a lone { or } (write {{ or }} for a literal one)",
                 AttributeError: "has a hole other than {node}", TypeError: "has a hole other than {node}"}


def check_cluster(cluster, data, fail):
    """cluster: exec (a prefix with {node}, split as a shell would) and rdzv_endpoint HOST:PORT."""
    if not isinstance(cluster, dict):
        fail(data, "cluster", "cluster is a mapping of exec and rdzv_endpoint")
    for key in cluster:
        if key not in CLUSTER:
            fail(cluster, key, f"unknown key {inputs.key(key)} in cluster (known: {', '.join(CLUSTER)})")
    for key in CLUSTER:
        if not isinstance(cluster.get(key), str) or not cluster[key].strip() or "\0" in cluster[key]:
            fail(cluster, key if key in cluster else None, f"cluster needs {key} (text)")
    if "{node}" not in cluster["exec"]:
        fail(cluster, "exec", "cluster exec must contain {node} (where each node's number goes)")
    try:
        words = shlex.split(cluster["exec"].format(node=0))
    except tuple(FORMAT_ERRORS) as exc:
        why = FORMAT_ERRORS[type(exc)] if not isinstance(exc, ValueError) or "{" in str(exc) or "}" in str(exc) \
            else f"does not split into words ({str(exc).lower()})"
        fail(cluster, "exec", f"cluster exec {why}")
    if not words:
        fail(cluster, "exec", "cluster exec names no program")
    host, _, port = cluster["rdzv_endpoint"].rpartition(":")
    if not is_argument(host) or not port.isdigit() or not 1 <= int(port) <= 65535:
        fail(cluster, "rdzv_endpoint", "rdzv_endpoint is HOST:PORT (port 1-65535)")


def check_env(env, allow_unknown, allow_paths, fail):
    """A check's env as {name: text}: names and values as `commbench env`'s catalogue allows (sweep --env's
    rule); a variable whose value is a library or file path (NCCL_NET_PLUGIN, NCCL_TOPO_FILE, ...) only with
    allow_paths: true, any other variable (LD_PRELOAD, PYTHONPATH, ...) only with allow_unknown_env: true."""
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float)) and
                                            not isinstance(v, bool) for k, v in env.items()):
        fail("env is a mapping of variable names to values")
    for key, value in env.items():
        try:
            envvars.validate(key, [str(value)], allow_unknown, "allow_unknown_env: true")
        except UserError as exc:
            fail(f"env: {exc}")
        if is_path(key) and not (allow_paths or allow_unknown):
            fail(f"env: {key}={shown(str(value), 60)} names a library or file NCCL loads or writes: only with "
                 "allow_paths: true")
    return {k: str(v) for k, v in env.items()}


def is_path(name):
    var = envvars.CATALOGUE.get(name)
    return bool(var and var.path)
