"""Acceptance specs: a YAML list of named checks, each a real run of the suite with thresholds.

Every check kind is one row of KINDS: the program it runs, the spec keys it takes and the command-line
option each becomes, and whose records its thresholds judge (benchcore.results.thresholds). A spec is checked
whole before anything runs; an unknown key, a bad value or a threshold on a field the records lack is
refused with one line naming the spec file and line.

Top level:
  topology: NAME|FILE          default --topology of commbench checks (records' link_peak_gbps, model)
  cluster:                     optional: run each node of a multi-node commbench check yourself
    exec: "scripts/netns-cluster exec {node} --"     prefix of node {node}'s command (ssh, ip netns exec)
    rdzv_endpoint: 10.213.0.1:29500                  node 0's address; the port grows by one per check
  checks: [ {name, kind, thresholds, timeout, env, allow_unknown_env, ...the kind's keys} ]

A spec is read as hostile input: a regular UTF-8 file of bounded size, YAML with bounded aliases and nesting
(benchcore.inputs); a value that becomes an argument never starts with '-' (it is never an option); numbers
are finite and in range; env takes `commbench env`'s catalogue (others only with allow_unknown_env: true);
errors quote at most a short excerpt without control characters.
"""
import shlex
import sys
from dataclasses import dataclass
from typing import Callable, Optional

from benchcore import inputs

from benchcore.results import thresholds
from benchcore.errors import UserError
from benchcore.units import parse_size
from commbench.cases.registry import CASES
from commbench.transports import envvars
from iobench.profiles import PROFILES

COMMON = ("name", "kind", "thresholds", "timeout", "env", "allow_unknown_env")
TOP = ("topology", "cluster", "checks")
CLUSTER = ("exec", "rdzv_endpoint")
DEFAULT_TIMEOUT_S = 900
MAX_TIMEOUT_S = 7 * 86400
MAX_WHOLE = 1 << 20          # iterations, nodes, seconds: far past any real check
MAX_SIZE = 1 << 50           # 1 PiB
MAX_CLUSTER_NODES = 1024     # one command per node is built and shown
MAX_NAME = 100


def _q(value):
    """A spec's value as an error line may quote it: short, no control character."""
    return inputs.shown(repr(value), 60)


def _whole(v):
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_WHOLE


def _size(v):
    try:
        return not isinstance(v, bool) and parse_size(v) <= MAX_SIZE
    except (UserError, ValueError):    # ValueError: more digits than Python converts
        return False


def _arg(v):
    """Text that may become one argument: not empty, not an option, no NUL."""
    return isinstance(v, str) and v.strip() != "" and not v.startswith("-") and "\0" not in v


def _names(v):
    return _arg(v) or (isinstance(v, list) and bool(v) and all(_arg(x) for x in v))


def _ratios(v):
    """A compute ratio or a list of them: finite numbers above 0, at most 100."""
    items = v if isinstance(v, list) and v else [v]
    return all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 < x <= 100 for x in items)


def _joined(v):
    return ",".join(v) if isinstance(v, list) else str(v)


# value kind -> (valid, what a valid value is, the option's arguments for a value)
VALUES = {
    "size": (_size, "a size (8, 1K, 64M, 1G) up to 1P", lambda flag, v: [flag, str(v)]),
    "whole": (_whole, f"a whole number from 1 to {MAX_WHOLE}", lambda flag, v: [flag, str(v)]),
    "text": (_arg, "text not starting with '-'", lambda flag, v: [flag, v]),
    "names": (_names, "a name or a list of names (none starting with '-')", lambda flag, v: [flag, _joined(v)]),
    "flag": (lambda v: isinstance(v, bool), "true or false", lambda flag, v: [flag] if v else []),
    "ratios": (_ratios, "a number above 0 (at most 100) or a list of them",
               lambda flag, v: [flag, ",".join(f"{x:g}" for x in (v if isinstance(v, list) else [v]))]),
    "fraction": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1,
                 "a number above 0, at most 1", lambda flag, v: [flag, f"{v:g}"]),
    "paths": (lambda v: isinstance(v, list) and bool(v) and all(_arg(x) for x in v),
              "a list of paths (none starting with '-': write ./-name for such a file)", lambda flag, v: list(v)),
}
SIZES = {"min_bytes": ("-b", "size"), "max_bytes": ("-e", "size"), "step_factor": ("-f", "whole"),
         "iters": ("-n", "whole"), "warmup": ("-w", "whole")}


@dataclass(frozen=True)
class Kind:
    """One kind of check: `program words` + options; records of `tool`."""
    tool: str
    program: str                           # python module run with -m
    words: Callable                        # check -> the command's words (subcommand, its main choice)
    options: dict                          # spec key -> (flag or None for positional, VALUES kind)
    required: tuple = ()
    one_of: tuple = ()                     # exactly one of these keys
    dry_run: bool = False                  # the command has --dry-run: the spec check runs it first
    nodes_key: Optional[str] = None        # the key saying how many nodes (cluster exec)
    top_topology: bool = False             # takes the spec's top-level topology
    groups: Callable = lambda check: set()  # check -> what a threshold's GROUP may name (cases and phases, profiles)
    verdict: Optional[str] = None          # the command judges itself: its verdict record fails the check unless
                                           # it passed (pairs: no bad node, no bad link), named so in the outputs


def _cases(*names):
    """The named cases and their phases (what benchcore.results.read.group_of and records' phase say)."""
    names = [n for name in names for n in _joined(name).split(",") if n]
    return set(names) | {p for n in names if n in CASES for p in CASES[n].phases}


def _profiles(check):
    return set(_joined(check["profiles"]).split(",")) if "profiles" in check else set(PROFILES)


def _commbench_words(check):
    return (["run", "--collective", _joined(check["collective"])] if "collective" in check else
            ["compare", "--strategies", _joined(check["strategy"]), "--baseline",
             _joined(check["strategy"]).split(",")[0]])


KINDS = {
    "commbench": Kind("commbench", "commbench.commands.cli", _commbench_words,
                      {"collective": (None, "names"), "strategy": (None, "names"), **SIZES,
                       "nodes": ("--nodes", "whole"), "nproc_per_node": ("--nproc-per-node", "whole"),
                       "backend": ("--backend", "text"), "topology": ("--topology", "text"),
                       "repeats": ("--repeats", "whole"), "chunk_size": ("--chunk-size", "names"),
                       "hang_timeout": ("--hang-timeout", "whole")},
                      one_of=("collective", "strategy"), dry_run=True, nodes_key="nodes", top_topology=True,
                      groups=lambda check: _cases(check.get("collective", ""), check.get("strategy", ""))),
    "iobench": Kind("iobench", "iobench.cli", lambda check: ["ckpt", *check["mounts"]],
                    {"mounts": (None, "paths"), "profiles": ("--profile", "names"), "quick": ("--quick", "flag"),
                     "runtime": ("--runtime", "whole"), "size": ("--size", "size"), "bs": ("--bs", "size"),
                     "iodepth": ("--iodepth", "whole"), "jobs": ("--jobs", "whole"), "ranks": ("--ranks", "whole"),
                     "direct": ("--direct", "flag"), "wait": ("--wait", "whole")},
                    required=("mounts",), dry_run=True, groups=_profiles),
    "selftest-link": Kind("commbench", "commbench.commands.cli", lambda check: ["selftest", "link"],
                          {"rate": ("--rate", "text"), "collective": ("--collective", "names"), **SIZES,
                           "cycles": ("-N", "whole")},
                          groups=lambda check: _cases(check.get("collective", "all_reduce"))),
    "selftest-model": Kind("commbench", "commbench.commands.cli", lambda check: ["selftest", "model"],
                           {"rate": ("--rate", "text"), "lo_rate": ("--lo-rate", "text"), **SIZES,
                            "cycles": ("-N", "whole")},
                           groups=lambda check: _cases("all_reduce", "hierarchical")),
    "pairs": Kind("commbench", "commbench.commands.cli", lambda check: ["pairs"],
                  {"nodes": ("--nodes", "whole"), "size": ("--size", "size"), "rounds": ("--rounds", "whole"),
                   "min_fraction": ("--min-fraction", "fraction"), "iters": ("-n", "whole"),
                   "warmup": ("-w", "whole"), "backend": ("--backend", "text"),
                   "hang_timeout": ("--hang-timeout", "whole")},
                  required=("nodes",), dry_run=True, nodes_key="nodes", groups=lambda check: {"sendrecv", "all_reduce"},
                  verdict="pairs verdict: no bad node, no bad link"),
    "overlap": Kind("commbench", "commbench.commands.cli",
                    lambda check: ["overlap", "--patterns", _joined(check["pattern"])],
                    {"pattern": (None, "names"), **SIZES, "nodes": ("--nodes", "whole"),
                     "nproc_per_node": ("--nproc-per-node", "whole"), "backend": ("--backend", "text"),
                     "topology": ("--topology", "text"), "repeats": ("--repeats", "whole"),
                     "compute_ratio": ("--compute-ratio", "ratios"), "gemm": ("--gemm", "text"),
                     "buckets": ("--buckets", "whole"), "chunk_size": ("--chunk-size", "names"),
                     "inflight": ("--inflight", "whole")},
                    required=("pattern",), dry_run=True, nodes_key="nodes", top_topology=True,
                    groups=lambda check: _cases(check.get("pattern", ""))),
}


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

    def clustered(self, check):
        return bool(self.cluster) and check.nodes() > 1

    def endpoint(self, index):
        """The rendezvous endpoint of the index-th check under the cluster (the port grows by one per check)."""
        host, port = self.cluster["rdzv_endpoint"].rsplit(":", 1)
        return f"{host}:{int(port) + index}"

    def commands(self, check, index, out):
        """[(node, argv)]: one command, or one per node under the cluster's exec prefix (node 0 writes out)."""
        if not self.clustered(check):
            return [(None, check.argv(out))]
        return [(node, shlex.split(self.cluster["exec"].format(node=node)) +
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
    if topology is not None and not _arg(topology):
        fail(data, "topology", f"topology is {_q(topology)}, expected {VALUES['text'][1]}")
    cluster = data.get("cluster")
    if cluster is not None:
        _cluster(cluster, data, fail)
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
    return Spec(str(path), out, cluster, lines.get(id(cluster), {}).get("exec", 1))


# what str.format raises for a hole other than {node}, as the one line a user reads
FORMAT_ERRORS = {KeyError: "names a hole other than {node}", IndexError: "has a {} or {0} hole (only {node})",
                 ValueError: "has a lone { or } (write {{ or }} for a literal one)",
                 AttributeError: "has a hole other than {node}", TypeError: "has a hole other than {node}"}


def _cluster(cluster, data, fail):
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
    if not _arg(host) or not port.isdigit() or not 1 <= int(port) <= 65535:
        fail(cluster, "rdzv_endpoint", "rdzv_endpoint is HOST:PORT (port 1-65535)")


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
            fail(key, f"check {_q(name)}: {key} is {_q(value)}, expected {what}")
    for key in kind.required:
        if key not in values:
            fail(None, f"check {_q(name)}: kind {raw['kind']} needs {key}")
    if kind.one_of and sum(k in values for k in kind.one_of) != 1:
        fail(None, f"check {_q(name)}: give exactly one of {', '.join(kind.one_of)}")
    if "repeats" in values and "collective" in values:
        fail("repeats", f"check {_q(name)}: repeats applies to strategies (compare) and overlap patterns")
    if kind.top_topology and topology and "topology" not in values:
        values["topology"] = topology
    timeout = raw.get("timeout", DEFAULT_TIMEOUT_S)
    try:
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool):
            raise UserError(f"timeout is {_q(timeout)}, expected seconds")
        timeout = inputs.finite(timeout, "timeout (seconds)", 0, MAX_TIMEOUT_S, lo_open=True)
    except UserError as exc:
        fail("timeout", f"check {_q(name)}: {exc}")
    allow = raw.get("allow_unknown_env", False)
    if not isinstance(allow, bool):
        fail("allow_unknown_env", f"check {_q(name)}: allow_unknown_env is true or false")
    env = _env(raw.get("env") or {}, allow, lambda message: fail("env", f"check {_q(name)}: {message}"))
    texts = raw.get("thresholds")
    if not isinstance(texts, list) or not texts:
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
            fail_at(texts, i, f"check {_q(name)}: threshold {_q(text)}: {_q(threshold.group)} is none of what this "
                              f"check measures ({', '.join(sorted(groups))})")
        judged.append((threshold, lines.get(id(texts), {}).get(i)))
    return Check(name, raw["kind"], lines.get(id(raw), {}).get(None, 1), values, judged, timeout, env, allow)


def _env(env, allow_unknown, fail):
    """A check's env as {name: text}: names and values as `commbench env`'s catalogue allows (sweep --env's
    rule), any other variable (LD_PRELOAD, PYTHONPATH, ...) only with allow_unknown_env: true."""
    if not isinstance(env, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float)) and
                                            not isinstance(v, bool) for k, v in env.items()):
        fail("env is a mapping of variable names to values")
    for key, value in env.items():
        try:
            envvars.validate(key, [str(value)], allow_unknown, "allow_unknown_env: true")
        except UserError as exc:
            fail(f"env: {exc}")
    return {k: str(v) for k, v in env.items()}
