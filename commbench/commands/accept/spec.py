"""Acceptance specs: a YAML list of named checks, each a real run of the suite with thresholds.

Every check kind is one row of KINDS: the program it runs, the spec keys it takes and the command-line
option each becomes, and whose records its thresholds judge (benchcore.thresholds). A spec is checked
whole before anything runs; an unknown key, a bad value or a threshold on a field the records lack is
refused with one line naming the spec file and line.

Top level:
  topology: NAME|FILE          default --topology of commbench checks (records' link_peak_gbps, model)
  cluster:                     optional: run each node of a multi-node commbench check yourself
    exec: "scripts/netns-cluster exec {node} --"     prefix of node {node}'s command (ssh, ip netns exec)
    rdzv_endpoint: 10.213.0.1:29500                  node 0's address; the port grows by one per check
  checks: [ {name, kind, thresholds, timeout, env, ...the kind's keys} ]
"""
import shlex
import sys
from dataclasses import dataclass
from typing import Callable, Optional

from benchcore import thresholds
from benchcore.errors import UserError
from benchcore.units import parse_size
from commbench.cases.registry import CASES
from iobench.profiles import PROFILES

COMMON = ("name", "kind", "thresholds", "timeout", "env")
TOP = ("topology", "cluster", "checks")
CLUSTER = ("exec", "rdzv_endpoint")
DEFAULT_TIMEOUT_S = 900


def _whole(v):
    return isinstance(v, int) and not isinstance(v, bool) and v >= 1


def _size(v):
    try:
        parse_size(v)
        return True
    except UserError:
        return False


def _names(v):
    return (isinstance(v, str) and v.strip() != "") or (isinstance(v, list) and bool(v)
                                                         and all(isinstance(x, str) and x for x in v))


def _joined(v):
    return ",".join(v) if isinstance(v, list) else str(v)


# value kind -> (valid, what a valid value is, the option's arguments for a value)
VALUES = {
    "size": (_size, "a size (8, 1K, 64M, 1G)", lambda flag, v: [flag, str(v)]),
    "whole": (_whole, "a whole number >= 1", lambda flag, v: [flag, str(v)]),
    "text": (lambda v: isinstance(v, str) and v.strip() != "", "text", lambda flag, v: [flag, v]),
    "names": (_names, "a name or a list of names", lambda flag, v: [flag, _joined(v)]),
    "flag": (lambda v: isinstance(v, bool), "true or false", lambda flag, v: [flag] if v else []),
    "paths": (lambda v: isinstance(v, list) and bool(v) and all(isinstance(x, str) and x for x in v),
              "a list of paths", lambda flag, v: list(v)),
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


def _cases(*names):
    """The named cases and their phases (what benchcore.results.group_of and records' phase say)."""
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
                       "repeats": ("--repeats", "whole"), "chunk_size": ("--chunk-size", "names")},
                      one_of=("collective", "strategy"), dry_run=True, nodes_key="nodes", top_topology=True,
                      groups=lambda check: _cases(check.get("collective", ""), check.get("strategy", ""))),
    "iobench": Kind("iobench", "iobench.cli", lambda check: ["ckpt", *check["mounts"]],
                    {"mounts": (None, "paths"), "profiles": ("--profile", "names"), "quick": ("--quick", "flag"),
                     "runtime": ("--runtime", "whole"), "size": ("--size", "size"), "bs": ("--bs", "size"),
                     "iodepth": ("--iodepth", "whole"), "jobs": ("--jobs", "whole"), "ranks": ("--ranks", "whole"),
                     "direct": ("--direct", "flag")},
                    required=("mounts",), dry_run=True, groups=_profiles),
    "selftest-link": Kind("commbench", "commbench.commands.cli", lambda check: ["selftest", "link"],
                          {"rate": ("--rate", "text"), "collective": ("--collective", "names"), **SIZES,
                           "cycles": ("-N", "whole")},
                          groups=lambda check: _cases(check.get("collective", "all_reduce"))),
    "selftest-model": Kind("commbench", "commbench.commands.cli", lambda check: ["selftest", "model"],
                           {"rate": ("--rate", "text"), "lo_rate": ("--lo-rate", "text"), **SIZES,
                            "cycles": ("-N", "whole")},
                           groups=lambda check: _cases("all_reduce", "hierarchical")),
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

    @property
    def row(self):
        return KINDS[self.kind]

    def argv(self, out=None, node=None, endpoint=None):
        """The command of this check (node: one node's part under a cluster exec prefix)."""
        kind = self.row
        argv = [sys.executable, "-m", kind.program, *kind.words(self.values)]
        for key, value in self.values.items():
            flag, vkind = kind.options[key]
            if flag:
                argv += VALUES[vkind][2](flag, value)
        if node is not None:
            argv += ["--rdzv-endpoint", endpoint, "--node-rank", str(node)]
        argv += ["--format", "json"]
        if out:
            argv += ["--out", out]
        return argv

    def nodes(self):
        return int(self.values.get(self.row.nodes_key) or 1) if self.row.nodes_key else 1


@dataclass
class Spec:
    path: str
    checks: list
    cluster: Optional[dict] = None

    def commands(self, check, index, out):
        """[(node, argv)]: one command, or one per node under the cluster's exec prefix (node 0 writes out)."""
        if not self.cluster or check.nodes() < 2:
            return [(None, check.argv(out))]
        host, port = self.cluster["rdzv_endpoint"].rsplit(":", 1)
        endpoint = f"{host}:{int(port) + index}"
        return [(node, shlex.split(self.cluster["exec"].format(node=node)) +
                 check.argv(out if node == 0 else None, node, endpoint)) for node in range(check.nodes())]


def _yaml_with_lines(text, path):
    """The YAML with the line of every mapping, key and list item (1-based): (data, lines) where lines maps
    id(container) -> {key or index: line} and id(container) -> its own line under None."""
    import yaml

    lines = {}

    class Loader(yaml.SafeLoader):
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
    try:
        return yaml.load(text, Loader=Loader), lines
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else path
        raise UserError(f"{where}: not valid YAML: {getattr(exc, 'problem', None) or exc}") from None


def load_spec(path):
    """The checked Spec of a file; UserError 'PATH:LINE: what is wrong' otherwise."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as exc:
        raise UserError(f"--spec {path}: {exc.strerror}") from None
    data, lines = _yaml_with_lines(text, path)

    def fail(container, key, message):
        line = lines.get(id(container), {}).get(key) or lines.get(id(container), {}).get(None) or 1
        raise UserError(f"{path}:{line}: {message}")

    if not isinstance(data, dict):
        raise UserError(f"{path}:1: a spec is a mapping with a list of checks under 'checks'")
    for key in data:
        if key not in TOP:
            fail(data, key, f"unknown key {key!r} (known: {', '.join(TOP)})")
    cluster = data.get("cluster")
    if cluster is not None:
        if not isinstance(cluster, dict):
            fail(data, "cluster", "cluster is a mapping of exec and rdzv_endpoint")
        for key in cluster:
            if key not in CLUSTER:
                fail(cluster, key, f"unknown key {key!r} in cluster (known: {', '.join(CLUSTER)})")
        for key in CLUSTER:
            if not isinstance(cluster.get(key), str) or not cluster[key].strip():
                fail(cluster, key if key in cluster else None, f"cluster needs {key} (text)")
        if "{node}" not in cluster["exec"]:
            fail(cluster, "exec", "cluster exec must contain {node} (where each node's number goes)")
        if not cluster["rdzv_endpoint"].rsplit(":", 1)[-1].isdigit():
            fail(cluster, "rdzv_endpoint", "rdzv_endpoint is HOST:PORT")
    checks = data.get("checks")
    if not isinstance(checks, list) or not checks:
        fail(data, "checks", "checks must be a non-empty list")
    out, names = [], set()
    for i, raw in enumerate(checks):
        if not isinstance(raw, dict):
            fail(checks, i, "a check is a mapping (name, kind, thresholds, ...)")
        out.append(_check(raw, data.get("topology"), fail, lines))
        if out[-1].name in names:
            fail(raw, "name", f"check name {out[-1].name!r} is used twice")
        names.add(out[-1].name)
    return Spec(str(path), out, cluster)


def _check(raw, topology, fail_at, lines):
    def fail(key, message):
        fail_at(raw, key, message)

    name = raw.get("name")
    if not isinstance(name, str) or not name.strip() or any(c in name for c in "/\n"):
        fail("name" if "name" in raw else None, "a check needs a name (text without /)")
    kind = KINDS.get(raw.get("kind"))
    if kind is None:
        fail("kind" if "kind" in raw else None, f"check {name!r}: kind must be one of {', '.join(KINDS)}")
    for key in raw:
        if key not in COMMON and key not in kind.options:
            fail(key, f"check {name!r}: unknown key {key!r} for kind {raw['kind']} "
                      f"(known: {', '.join(COMMON + tuple(kind.options))})")
    values = {k: v for k, v in raw.items() if k in kind.options}
    for key, value in values.items():
        valid, what, _ = VALUES[kind.options[key][1]]
        if not valid(value):
            fail(key, f"check {name!r}: {key} is {value!r}, expected {what}")
    for key in kind.required:
        if key not in values:
            fail(None, f"check {name!r}: kind {raw['kind']} needs {key}")
    if kind.one_of and sum(k in values for k in kind.one_of) != 1:
        fail(None, f"check {name!r}: give exactly one of {', '.join(kind.one_of)}")
    if "repeats" in values and "strategy" not in values:
        fail("repeats", f"check {name!r}: repeats applies to strategies (compare)")
    if kind.top_topology and topology and "topology" not in values:
        values["topology"] = topology
    timeout = raw.get("timeout", DEFAULT_TIMEOUT_S)
    if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or timeout <= 0:
        fail("timeout", f"check {name!r}: timeout is seconds > 0")
    env = raw.get("env") or {}
    if not isinstance(env, dict) or not all(isinstance(k, str) and k.isidentifier() and
                                            isinstance(v, (str, int, float)) and not isinstance(v, bool)
                                            for k, v in env.items()):
        fail("env", f"check {name!r}: env is a mapping of variable names to values")
    texts = raw.get("thresholds")
    if not isinstance(texts, list) or not texts:
        fail("thresholds" if "thresholds" in raw else None, f"check {name!r}: thresholds must be a non-empty list")
    judged = []
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            fail_at(texts, i, f"check {name!r}: a threshold is one line of text")
        try:
            threshold = thresholds.parse(text, kind.tool)
        except UserError as exc:
            fail_at(texts, i, f"check {name!r}: {exc}")
        groups = kind.groups(values)
        if threshold.group is not None and threshold.group not in groups:
            fail_at(texts, i, f"check {name!r}: threshold {text!r}: {threshold.group!r} is none of what this check "
                              f"measures ({', '.join(sorted(groups))})")
        judged.append((threshold, lines.get(id(texts), {}).get(i)))
    return Check(name, raw["kind"], lines.get(id(raw), {}).get(None, 1), values, judged, float(timeout),
                 {k: str(v) for k, v in env.items()})
