"""The check kinds of an acceptance spec: one row of KINDS each, saying the program it runs, the spec keys it
takes and the command-line option each becomes, and whose records its thresholds judge; and the kinds of value
a key takes (VALUES), each with its test and the arguments a value becomes."""
from dataclasses import dataclass
from typing import Callable, Optional

from benchcore.errors import UserError
from benchcore.units import parse_size
from commbench.cases.registry import CASES
from iobench.profiles import PROFILES

MAX_WHOLE = 1 << 20          # iterations, nodes, seconds: far past any real check
MAX_SIZE = 1 << 50           # 1 PiB


def _whole(v):
    return isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= MAX_WHOLE


def _size(v):
    try:
        return not isinstance(v, bool) and parse_size(v) <= MAX_SIZE
    except (UserError, ValueError):    # ValueError: more digits than Python converts
        return False


def is_argument(v):
    """Text that may become one argument: not empty, not an option, no NUL."""
    return isinstance(v, str) and v.strip() != "" and not v.startswith("-") and "\0" not in v


def _names(v):
    return is_argument(v) or (isinstance(v, list) and bool(v) and all(is_argument(x) for x in v))


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
    "text": (is_argument, "text not starting with '-'", lambda flag, v: [flag, v]),
    "names": (_names, "a name or a list of names (none starting with '-')", lambda flag, v: [flag, _joined(v)]),
    "flag": (lambda v: isinstance(v, bool), "true or false", lambda flag, v: [flag] if v else []),
    "ratios": (_ratios, "a number above 0 (at most 100) or a list of them",
               lambda flag, v: [flag, ",".join(f"{x:g}" for x in (v if isinstance(v, list) else [v]))]),
    "fraction": (lambda v: isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v <= 1,
                 "a number above 0, at most 1", lambda flag, v: [flag, f"{v:g}"]),
    "level": (lambda v: v in ("quick", "full"), "quick or full (commbench node's levels)", lambda flag, v: [flag, v]),
    "paths": (lambda v: isinstance(v, list) and bool(v) and all(is_argument(x) for x in v),
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


def _checkpoint_groups(check):
    """model-ckpt's profiles: MODEL-ckpt or MODEL-dcp, MODEL-dcp-MODE per --save-mode (blocked_s, training_lost...),
    MODEL-dcp-restart."""
    base = f"{check.get('model')}-{'dcp' if check.get('ckpt_format') == 'dcp' else 'ckpt'}"
    modes = [m for m in _joined(check.get("save_mode", "")).split(",") if m]
    return {base} | {f"{base}-{m}" for m in modes} | ({f"{base}-restart"} if check.get("restart_ranks") else set())


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
    "expected": Kind("commbench", "commbench.commands.cli",
                     lambda check: ["run", "--judge"],
                     {"collective": ("--collective", "names"), **SIZES, "nodes": ("--nodes", "whole"),
                      "nproc_per_node": ("--nproc-per-node", "whole"), "topology": ("--topology", "text"),
                      "hang_timeout": ("--hang-timeout", "whole")},
                     dry_run=True, nodes_key="nodes", top_topology=True,
                     groups=lambda check: _cases(check.get("collective", "all_reduce")),
                     verdict="judge verdict: every size at the level the topology's references and model expect "
                             "(NVLS where NVLS is expected)"),
    "iobench": Kind("iobench", "iobench.cli", lambda check: ["ckpt", *check["mounts"]],
                    {"mounts": (None, "paths"), "profiles": ("--profile", "names"), "quick": ("--quick", "flag"),
                     "runtime": ("--runtime", "whole"), "size": ("--size", "size"), "bs": ("--bs", "size"),
                     "iodepth": ("--iodepth", "whole"), "jobs": ("--jobs", "whole"), "ranks": ("--ranks", "whole"),
                     "direct": ("--direct", "flag"), "wait": ("--wait", "whole")},
                    required=("mounts",), dry_run=True, groups=_profiles),
    "checkpoint": Kind("iobench", "iobench.cli", lambda check: ["model-ckpt", check["mount"]],
                       {"mount": (None, "text"), "model": ("--model", "text"), "scale": ("--scale", "fraction"),
                        "tp": ("--tp", "whole"), "pp": ("--pp", "whole"), "dp": ("--dp", "whole"),
                        "ranks": ("--ranks", "whole"), "writes": ("--writes", "whole"),
                        "reads": ("--reads", "whole"), "no_drop": ("--no-drop", "flag"), "wait": ("--wait", "whole"),
                        "ckpt_format": ("--ckpt-format", "text"), "save_mode": ("--save-mode", "names"),
                        "no_plan_cache": ("--no-plan-cache", "flag"), "mtbf": ("--mtbf", "whole"),
                        "restart_ranks": ("--restart-ranks", "whole"), "no_fio": ("--no-fio", "flag")},
                       required=("mount", "model"), dry_run=True, groups=_checkpoint_groups),
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
    "node": Kind("commbench", "commbench.commands.cli", lambda check: ["node"],
                 {"level": ("--level", "level"), "seconds": ("--seconds", "whole"), "topology": ("--topology", "text")},
                 top_topology=True, verdict="node verdict: no GPU or InfiniBand port failing a check of "
                                            "commbench/health/checks.py (DCGM's, NVIDIA's and gpud's thresholds)"),
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
