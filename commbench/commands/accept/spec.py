"""Acceptance specs: a YAML list of named checks, each a real run of the suite with thresholds.

Every check is of a kind, one row of kinds.py's KINDS: the program it runs, the spec keys it takes and the
command-line option each becomes, and whose records its thresholds judge (benchcore.results.thresholds). A spec
is checked whole before anything runs (its cluster and each check's env by gates.py); an unknown key, a bad
value or a threshold on a field the records lack is refused with one line naming the spec file and line.

Top level:
  topology: NAME|FILE          default --topology of commbench checks (records' link_peak_gbps, model)
  cluster:                     optional: run each node of a multi-node commbench check yourself
    exec: "scripts/netns-cluster exec {node} --"     prefix of node {node}'s command (ssh, ip netns exec)
    rdzv_endpoint: 10.213.0.1:29500                  node 0's address; the port grows by one per check
  history: FILE                each node's verdict of every run appended there (commbench health reads it);
                               --history overrides it
  checks: [ {name, kind, thresholds, timeout, env, allow_paths, allow_unknown_env, ...the kind's keys} ]

A spec is read as hostile input: a regular UTF-8 file of bounded size, YAML with bounded aliases and nesting
(benchcore.inputs); a value that becomes an argument never starts with '-' (it is never an option); numbers
are finite and in range; env takes `commbench env`'s catalogue (a library or file path only with allow_paths: true,
others only with allow_unknown_env: true, the test hooks never); under a cluster exec prefix, which may start the
command with a clean environment (ssh), env is passed on the command line (`env NAME=VALUE ...`); errors quote at
most a short excerpt without control characters.
"""
import shlex
import sys
from dataclasses import dataclass, field
from typing import Optional

from benchcore import inputs
from benchcore.errors import UserError
from benchcore.results import thresholds
from commbench.commands.accept.gates import check_cluster, check_env, check_expect
from commbench.commands.accept.kinds import KINDS, VALUES, is_argument
from commbench.launch.spec import allocation_nodes

COMMON = ("name", "kind", "thresholds", "timeout", "env", "allow_paths", "allow_unknown_env", "expect")
TOP = ("topology", "cluster", "checks", "history")
DEFAULT_TIMEOUT_S = 900
MAX_TIMEOUT_S = 7 * 86400
MAX_CLUSTER_NODES = 1024     # one command per node is built and shown
MAX_NAME = 100


def _q(value):
    """A check's name as an error line may quote it: short, no control character (a value never is: the line
    number and the reason say which)."""
    return inputs.shown(repr(value), 60)


@dataclass
class Check:
    name: str
    kind: str
    line: int
    values: dict
    thresholds: list          # [(Threshold, line)]
    timeout: float
    env: dict
    allow_unknown_env: bool = False
    allow_paths: bool = False
    expect: Optional[dict] = None     # what NCCL must report it ran: {algo: NVLS, gdr: all, net: IB} (gates.py)

    @property
    def row(self):
        return KINDS[self.kind]

    def args(self, out=None, node=None, endpoint=None):
        """The arguments of this check's program (node: one node's part under a cluster exec prefix)."""
        kind = self.row
        args = list(kind.words(self.values))
        for key, value in self.values.items():
            flag, vkind = kind.options[key]
            if flag:
                args += VALUES[vkind][2](flag, value)
        if node is not None:
            args += ["--rdzv-endpoint", endpoint, "--node-rank", str(node)]
        return args + ["--format", "json"] + (["--out", out] if out else [])

    def argv(self, out=None, node=None, endpoint=None):
        """The command of this check: its program run by this Python."""
        return [sys.executable, "-m", self.row.program, *self.args(out, node, endpoint)]

    def nodes(self):
        return int(self.values.get(self.row.nodes_key) or 1) if self.row.nodes_key else 1


@dataclass
class Spec:
    path: str
    checks: list
    cluster: Optional[dict] = None
    exec_line: int = 1
    history: Optional[str] = None
    hosts: list = field(default_factory=list)   # accept --hosts: multi-node commbench checks start over ssh
    ssh_command: Optional[str] = None

    def clustered(self, check):
        return bool(self.cluster or self.hosts) and check.nodes() > 1

    def host_args(self, check):
        """A multi-node check's share of accept --hosts: its first nodes() hosts."""
        return ["--hosts", ",".join(self.hosts[:check.nodes()]), "--ssh-command", self.ssh_command]

    def endpoint(self, index):
        """The rendezvous endpoint of the index-th check under the cluster (the port grows by one per check)."""
        host, port = self.cluster["rdzv_endpoint"].rsplit(":", 1)
        return f"{host}:{int(port) + index}"

    def commands(self, check, index, out):
        """[(node, argv)]: one command, or one per node under the cluster's exec prefix (node 0 writes out), the
        check's env set by `env` after the prefix (ssh starts the command with an environment of its own)."""
        if self.hosts and self.clustered(check):   # the check's own launcher starts its nodes over ssh
            return [(None, check.argv(out) + self.host_args(check))]
        if not self.clustered(check):
            return [(None, check.argv(out))]
        env = ["env", *(f"{k}={v}" for k, v in check.env.items())] if check.env else []
        return [(node, shlex.split(self.cluster["exec"].format(node=node)) + env +
                 check.argv(out if node == 0 else None, node, self.endpoint(index))) for node in range(check.nodes())]


def _yaml_with_lines(text, where):
    """The YAML with the line of every mapping, key and list item (1-based): (data, lines) where lines maps
    id(container) -> {key or index: line} and id(container) -> its own line under None. Loaded with
    benchcore.inputs' bounds (aliases, nesting)."""
    lines = {}

    class Loader(inputs._BoundedLoader):
        def construct_mapping(self, node, deep=False):
            data = super().construct_mapping(node, deep=True)
            lines[id(data)] = {None: node.start_mark.line + 1,
                               **{k.value: k.start_mark.line + 1 for k, _ in node.value if hasattr(k, "value")}}
            return data

        def construct_sequence(self, node, deep=False):
            data = super().construct_sequence(node, deep=True)
            lines[id(data)] = {None: node.start_mark.line + 1,
                               **{i: item.start_mark.line + 1 for i, item in enumerate(node.value)}}
            return data

    Loader.add_constructor("tag:yaml.org,2002:map", Loader.construct_mapping)
    Loader.add_constructor("tag:yaml.org,2002:seq", Loader.construct_sequence)
    return inputs.yaml_text(text, where, Loader), lines


def load_spec(path):
    """The checked Spec of a file; UserError 'PATH:LINE: what is wrong' otherwise."""
    where = inputs.name(path)
    data, lines = _yaml_with_lines(inputs.read_text(path, "--spec"), where)

    def fail(container, key, message):
        line = lines.get(id(container), {}).get(key) or lines.get(id(container), {}).get(None) or 1
        raise UserError(f"{where}:{line}: {message}")

    if not isinstance(data, dict):     # not the right kind: nothing of it is quoted
        raise UserError(f"{where}:1: not an acceptance spec (a mapping with a list of checks under 'checks')")
    for key in data:
        if key not in TOP:
            fail(data, key, f"unknown key {inputs.key(key)} (known: {', '.join(TOP)})")
    topology = data.get("topology")
    if topology is not None and not is_argument(topology):
        fail(data, "topology", f"topology: expected {VALUES['text'][1]}")
    cluster = data.get("cluster")
    if cluster is not None:
        check_cluster(cluster, data, fail)
    checks = data.get("checks")
    if not isinstance(checks, list) or not checks:
        fail(data, "checks", "checks must be a non-empty list")
    out, names = [], set()
    for i, raw in enumerate(checks):
        if not isinstance(raw, dict):
            fail(checks, i, "a check is a mapping (name, kind, thresholds, ...)")
        out.append(_check(raw, topology, fail, lines))
        if out[-1].name in names:
            fail(raw, "name", f"check name {_q(out[-1].name)} is used twice")
        names.add(out[-1].name)
        if cluster and out[-1].nodes() > MAX_CLUSTER_NODES:
            fail(raw, out[-1].row.nodes_key, f"check {_q(out[-1].name)}: more than {MAX_CLUSTER_NODES} nodes "
                                             "under cluster exec")
    if cluster and int(cluster["rdzv_endpoint"].rsplit(":", 1)[1]) + len(out) - 1 > 65535:
        fail(cluster, "rdzv_endpoint", f"rdzv_endpoint's port + one per check ({len(out)}) passes 65535")
    history = data.get("history")
    if history is not None and not is_argument(history):
        fail(data, "history", f"history: expected {VALUES['text'][1]}")
    return Spec(str(path), out, cluster, lines.get(id(cluster), {}).get("exec", 1), history)


def _check(raw, topology, fail_at, lines):
    def fail(key, message):
        fail_at(raw, key, message)

    name = raw.get("name")
    if not isinstance(name, str) or not name.strip() or "/" in name or not name.isprintable() or len(name) > MAX_NAME:
        fail("name" if "name" in raw else None, f"a check needs a name (printable text without /, at most {MAX_NAME} "
                                                "characters)")
    kind = KINDS.get(raw.get("kind"))
    if kind is None:
        fail("kind" if "kind" in raw else None, f"check {_q(name)}: kind must be one of {', '.join(KINDS)}")
    for key in raw:
        if key not in COMMON and key not in kind.options:
            fail(key, f"check {_q(name)}: unknown key {inputs.key(key)} for kind {raw['kind']} "
                      f"(known: {', '.join(COMMON + tuple(kind.options))})")
    values = {k: v for k, v in raw.items() if k in kind.options}
    for key, value in values.items():
        valid, what, _ = VALUES[kind.options[key][1]]
        if not valid(value):
            fail(key, f"check {_q(name)}: {key}: expected {what}")     # a line and a reason, never the value
    if kind.nodes_key in kind.required and kind.nodes_key not in values and allocation_nodes():
        values[kind.nodes_key] = allocation_nodes()      # how many nodes: the Slurm allocation's, as it says
    for key in kind.required:
        if key not in values:
            fail(None, f"check {_q(name)}: kind {raw['kind']} needs {key}"
                 + (" (or a Slurm allocation, whose node count it takes)" if key == kind.nodes_key else ""))
    if kind.one_of and sum(k in values for k in kind.one_of) != 1:
        fail(None, f"check {_q(name)}: give exactly one of {', '.join(kind.one_of)}")
    if "repeats" in values and "collective" in values:
        fail("repeats", f"check {_q(name)}: repeats applies to strategies (compare) and overlap patterns")
    if kind.top_topology and topology and "topology" not in values:
        values["topology"] = topology
    timeout = raw.get("timeout", DEFAULT_TIMEOUT_S)
    try:
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
            raise UserError("timeout: expected seconds")
        timeout = inputs.finite(timeout, "timeout (seconds)", 0, MAX_TIMEOUT_S, lo_open=True)
    except UserError as exc:
        fail("timeout", f"check {_q(name)}: {exc}")
    allow, paths = raw.get("allow_unknown_env", False), raw.get("allow_paths", False)
    for key, value in (("allow_unknown_env", allow), ("allow_paths", paths)):
        if not isinstance(value, bool):
            fail(key, f"check {_q(name)}: {key} is true or false")
    env = check_env(raw.get("env") or {}, allow, paths, lambda message: fail("env", f"check {_q(name)}: {message}"))
    expect = check_expect(raw["expect"], lambda message: fail("expect", f"check {_q(name)}: {message}")) \
        if "expect" in raw else None
    texts = raw.get("thresholds")
    if texts is None and kind.verdict and not kind.groups(values):   # it measures nothing: its verdict is its judge
        texts = []
    if not isinstance(texts, list) or not texts and (kind.groups(values) or not kind.verdict):
        fail("thresholds" if "thresholds" in raw else None, f"check {_q(name)}: thresholds must be a non-empty list")
    judged = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            fail_at(texts, i, f"check {_q(name)}: a threshold is one line of text")
        try:
            threshold = thresholds.parse(text, kind.tool)
        except UserError as exc:
            fail_at(texts, i, f"check {_q(name)}: {inputs.shown(exc)}")
        groups = kind.groups(values)
        if threshold.group is not None and threshold.group not in groups:
            fail_at(texts, i, f"check {_q(name)}: {_q(threshold.group)} is none of what this check measures "
                              f"({', '.join(sorted(groups))})")
        judged.append((threshold, lines.get(id(texts), {}).get(i)))
    return Check(name, raw["kind"], lines.get(id(raw), {}).get(None, 1), values, judged, timeout, env, allow, paths,
                 expect)

