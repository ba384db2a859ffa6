"""What commbench times: a case. A collective is a one-phase case, a strategy a case with phases.

A Case row (in the registry, commbench/cases/registry.py) says how CLI options expand into configs
(dicts with at least "case"), which phases a config times, its label, the environment it needs and
the record fields it adds. Built on one rank for one payload it gives a Timed: the functions the one timed path
(commbench/timing.py) calls. Everything else (compare, sweep, selftest, tables) asks the row.
"""
from dataclasses import dataclass, field
from typing import Callable, Dict, Optional, Tuple

from benchcore.errors import UserError
from benchcore.units import format_size
from benchcore.vocabulary import COLLECTIVES

TOTAL = "total"
# Operations one iteration of a config may issue per payload (chunks, buckets): each is a collective call with its own
# bookkeeping on every rank and a step the model replays. On 2 Gloo ranks here one in flight takes about 0.3 ms (4,096
# buckets: 1.3 s a pass) and start-up calibrates the overlap patterns' compute with 4 passes before the first
# heartbeat: 65,536 outlast the 60 s --hang-timeout (1,000,000 buckets: 3.1 GB per rank, then a hang). 16,384 chunks
# of 512K are an 8G payload.
MAX_STEPS = 1 << 14


@dataclass
class Timed:
    """One case at one payload on this rank."""
    phases: Dict[str, Callable]           # phase -> run once: run(async_op) -> work or None
    factors: Dict[str, float]             # phase -> busbw / algbw
    refill: Callable[[], None]            # input data as before the first run
    poison: Callable[[], None]            # output set to values no correct result holds
    result: Callable                      # the tensor the check reads (tests corrupt it)
    check: Callable[[], Tuple[int, dict]]  # after poison, refill, one run: (wrong on this rank, record fields)
    fields: Callable[[str], dict] = lambda phase: {}   # extra record fields of a phase, read after it is timed
    blocking: Optional[bool] = None       # wait for each run before the next; None: the plan's choice
    per_run: int = 1                      # operations one run performs (p2p: the messages of a window, or the two
                                          # one-way trips of a ping-pong): times are per operation
    per_rank: bool = False                # records carry every rank's own time and host (commbench pairs)
    departures: bool = True               # the loop also marks when each iteration ends, for the ranks' lateness
                                          # (rankstats.py); p2p: no (a ping-pong's wait is the peer's turn, not
                                          # lateness), one clock read less per iteration
    summary: Optional[Callable[[dict], dict]] = None   # summary({phase: record}) -> fields of the TOTAL record,
                                                       # figures drawn from every phase (overlap patterns)


@dataclass
class CaseOptions:
    """The CLI options that expand into configs (the case decides which it reads)."""
    places: Tuple[str, ...] = ("out", "in")
    chunk_sizes: Tuple[int, ...] = (2 << 20,)
    thresholds: Tuple[int, ...] = (16 << 20,)
    inflights: Tuple[int, ...] = (1,)
    compress: str = "bf16"
    buckets: Tuple[int, ...] = (4,)            # ddp: all_reduce buckets
    compute_ratios: Tuple[float, ...] = (1.0,)   # overlap: compute alone / communication alone, calibrated
    gemm: Optional[Tuple[int, int, int]] = None   # overlap: M, N, K instead of a ratio
    compute_kernel: str = "gemm"
    compute_threads: int = 1                   # torch intra-op threads per rank on CPU


# CaseOptions field -> what takes it: a given option that none of a run's cases reads would be silently ignored, and
# is refused instead (refuse_unread)
READERS = {"places": "the cases with in- and out-of-place variants: collectives, rs-ag, plain, chunked",
           "chunk_sizes": "the chunked strategy and the pipelined overlap patterns",
           "thresholds": "the chunked strategy",
           "inflights": "the chunked strategy and the pipelined overlap patterns",
           "compress": "the compressed strategy",
           "buckets": "the ddp overlap pattern",
           **dict.fromkeys(("compute_ratios", "gemm", "compute_kernel", "compute_threads"), "the overlap patterns")}


class ReadOptions:
    """CaseOptions that note which of their fields the cases' configs() read (`read`)."""

    def __init__(self, opts):
        self.opts, self.read = opts, set()

    def __getattr__(self, name):
        value = getattr(self.opts, name)
        self.read.add(name)
        return value


def refuse_unread(options, cases, given):
    """One UserError line for an option the user gave that none of cases (Case rows) uses: a case option their
    configs() never read (options: ReadOptions, or None), a root where none has one, an op where none reduces, a
    compute ratio beside a GEMM shape (which sizes the compute instead). given: {CaseOptions field, root or op: the
    option as the user spelled it} of the options the command line set."""
    names, s, have = ", ".join(c.name for c in cases), "s" * (len(cases) == 1), "has" if len(cases) == 1 else "have"
    for field_name, goes_with in READERS.items():
        if options is not None and field_name not in options.read and field_name in given:
            raise UserError(f"{given[field_name]}: {names} take{s} no {given[field_name]} (it goes with {goes_with})")
    if not any(c.rooted for c in cases) and "root" in given:
        raise UserError(f"{given['root']}: {names} {have} no root (it goes with broadcast and reduce)")
    if not any(c.reduces for c in cases) and "op" in given:
        raise UserError(f"{given['op']}: {names} take{s} no reduction op (it goes with all_reduce, reduce_scatter and "
                        "reduce)")
    if "gemm" in given and "compute_ratios" in given:
        raise UserError(f"{given['compute_ratios']}: not with {given['gemm']}, which sizes the compute itself (instead "
                        "of a ratio)")


@dataclass(frozen=True)
class Case:
    name: str
    kind: str                                  # "collective", "strategy", "p2p", "pairs" or "overlap"
    collective: str                            # the nccl-tests collective whose record fields it fills
    phases: Tuple[str, ...]                    # timed phases; TOTAL is the whole operation
    build: Callable                            # build(ctx, cfg, count, dtype, shared) -> Timed
    configs: Callable                          # configs(CaseOptions, dtype) -> [cfg]; UserError on bad options
    describe: Callable[[dict], str] = lambda cfg: ""   # what tells its configs apart ("2M x4")
    check_size: Optional[Callable] = None      # check_size(size, elt, world_size) -> None; UserError
    unit: Callable = lambda elt, n: elt        # unit(elt, world_size) -> bytes a size it runs is a multiple of
    setup: Optional[Callable] = None           # setup(ctx, cfgs) -> shared state (process groups), once per launch
    nccl_env: Dict[str, str] = field(default_factory=dict)   # variables it needs under NCCL, its launch alone
    both_places: bool = False                  # it has in- and out-of-place variants
    footprint: Optional[Callable] = None       # footprint(cfg, count, n, elt) -> bytes of buffers a rank holds
    reduces: bool = False                      # takes -o/--op (one config per op)
    sums: bool = False                         # reduces with sum, whatever -o says (its records say op sum)
    rooted: bool = False                       # takes -r/--root (one config per root)
    work: Optional[Callable] = None            # work(cfg, count, n, elt) -> what it executes; equal = same operations
                                               # (None: every config differs), so verdicts never rank them
    steps: Optional[Callable] = None           # steps(cfg, size, n) -> operations one iteration issues at size bytes
                                               # on n ranks (chunks, buckets): at most MAX_STEPS (check_steps)
    model: Optional[Callable] = None           # model(cfg, size, shape, backend) -> {phase: model.Phase}: its
                                               # alpha-beta terms per tier (commbench/model/alphabeta.py)
    fields: Dict[str, str] = field(default_factory=dict)   # record field -> meaning: the fields its records carry
                                                           # beside every commbench record's (registry.py documents
                                                           # them in benchcore/results/schema.py)

    def record_collective(self, phase):
        """The `collective` field of phase's record: a phase that is itself a collective (rs-ag's reduce_scatter,
        hierarchical's all_reduce) records as that one; any other (TOTAL; an overlap pattern's comm, compute and
        sequential) as the case's collective."""
        return phase if phase in COLLECTIVES else self.collective


def fit(case, size, elt, n):
    """The size case runs for a requested size on n ranks: rounded down to its unit, as nccl-tests rounds the
    count (0: nothing to run)."""
    return size - size % case.unit(elt, n)


def fit_sizes(case, sizes, elt, n, exact=False):
    """{requested: run} of case on n ranks (fit; exact: a size that does not suit is refused instead); UserError
    when no size is left to run."""
    runs = {size: size if exact else fit(case, size, elt, n) for size in sizes}
    for run in filter(None, runs.values()):
        case.check_size(run, elt, n)
    if not any(runs.values()):
        raise UserError(f"{case.name} on {n} ranks takes multiples of {case.unit(elt, n)} B: every size of "
                        "-b/-e is below that")
    return runs


def check_steps(case, cfg, sizes, elt, n):
    """UserError where config cfg (with its dtype) of case issues more than MAX_STEPS operations per iteration at the
    largest of sizes (bytes that run), or more than the smallest payload has elements (an operation of nothing)."""
    if case.steps is None:
        return
    size = max(sizes)
    steps = case.steps(cfg, size, n)
    if steps > MAX_STEPS and "buckets" in cfg:
        raise UserError(f"--buckets {cfg['buckets']}: one iteration issues at most {MAX_STEPS} collective calls per "
                        "payload (more outlast --hang-timeout at start-up): fewer --buckets")
    if steps > MAX_STEPS:
        raise UserError(f"--chunk-size {format_size(cfg['chunk_bytes'])} makes {steps} chunks of the "
                        f"{format_size(size)} payload on {n} ranks, and one iteration issues at most {MAX_STEPS} "
                        f"collective calls per payload (more outlast --hang-timeout at start-up): a --chunk-size of at "
                        f"least {format_size(-(-size // MAX_STEPS))} or a smaller -e/--max-bytes")
    size = min(sizes)
    if case.steps(cfg, size, n) > size // elt:   # a chunk holds an element of every rank: buckets alone can
        raise UserError(f"--buckets {cfg['buckets']}: the {format_size(size)} payload holds {size // elt} "
                        f"{cfg['dtype']} elements, fewer than its buckets (each all_reduces one at least): fewer "
                        "--buckets or a larger -b/--min-bytes")


def work_key(case, cfg, size, n, elt):
    """What config cfg of case executes at size bytes on n ranks: equal keys run the same operations."""
    if case.work is None:
        return (label(case, {k: v for k, v in cfg.items() if k != "phase"}),)
    common = tuple(str(cfg.get(k)) for k in ("dtype", "op", "root"))
    return case.work(cfg, size // elt, n, elt) + common


def label(case, rec):
    """A config's or record's row name: case, its parameters, type/op/root when not the default, place, phase."""
    parts = [case.name, case.describe(rec)]
    parts += [str(rec[k]) for k, default in (("dtype", "float32"), ("op", "sum")) if rec.get(k) not in (None, default)]
    if rec.get("root"):
        parts.append(f"root {rec['root']}")
    if case.both_places and rec.get("in_place") is False:
        parts.append("out-of-place")
    if rec.get("phase") not in (None, TOTAL):
        parts.append(f"({rec['phase']})")
    return " ".join(p for p in parts if p)
