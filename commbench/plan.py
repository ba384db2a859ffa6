"""Plans: what every rank runs, built from the CLI options of a measuring command.

A Plan is typed and travels to the workers as a JSON file (--plan-file, written by the launcher). Click's keyword
arguments are split into typed option groups (launch, measurement, case expansion); a keyword nobody takes is an
error.
"""
import dataclasses
import json
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import List, Optional

import click

from benchcore.errors import UserError
from benchcore.inputs import finite
from benchcore.results.records import new_run_id
from benchcore.report.render import FORMATS
from benchcore.units import parse_size, size_list, size_range
from commbench.cases.case import CaseOptions, fit, fit_sizes
from commbench.cases.collectives import DTYPES, NCCL_ONLY_OPS, OPS
from commbench.cases.compressed import COMPRESS
from commbench.cases.compute import KERNELS, parse_gemm
from commbench.cases.registry import CASES
from commbench.model.detect import for_run
from commbench.transports import mpi, torch_dist

BLOCKING_HELP = (
    "Wait for each collective before starting the next (nccl-tests -z). Default: on NCCL, "
    "back-to-back launches on one CUDA stream, which the GPU serialises; on Gloo, blocking, "
    "because Gloo runs async operations concurrently on its worker threads and would report "
    "the overlap as bandwidth (measured: 0.65 GB/s async vs 0.29-0.38 GB/s blocking for a 1 MiB "
    "all_reduce on 2 ranks).")


@dataclass
class Plan:
    """Sizes x case configs, and how to time them; every rank runs the same plan."""
    run_id: str
    sizes: List[int]
    configs: List[dict]          # case configs, {"case", "dtype", "op", "root", ...}, run interleaved per size
    iters: int = 20
    warmup: int = 5
    check: bool = True
    agg: str = "avg"
    blocking: Optional[bool] = None
    agg_iters: int = 1           # operations per timed iteration (nccl-tests -m)
    cuda_graph: int = 0          # replays of a CUDA graph of the timed loop (nccl-tests -G; NCCL only)
    cpu_time: bool = False       # report wall time on the CPU instead of CUDA events (nccl-tests -C)
    cycles: int = 1              # the whole sweep this many times (nccl-tests -N)
    repeats: int = 1             # per size, every config this many times, interleaved (records carry repeat)
    iter_stats: bool = True      # per-iteration marks on every rank: p50/p99/cv, the slowest rank (rankstats.py)
    time_budget: Optional[float] = None   # seconds this launch may take, start-up included: each measurement runs
                                          # the iterations that fit its share (calibrated; at most iters; p2p)
    launched_at: float = 0.0     # time.time() when this launch started (the budget counts from it; per node)
    backend: str = "auto"
    timeout: float = 300
    hang_timeout: float = 60     # no progress this long on rank 0: a hang report (commbench/liveness.py)
    launcher: str = "local"
    topology: Optional[dict] = None  # the topology in effect (commbench.model.topology.Topology.as_dict())
    command: str = ""            # the command line that made this plan, as typed
    tags: dict = field(default_factory=dict)   # fields every record carries (a sweep's config)
    world_size: int = 1          # the ranks the sizes were fitted to (size_run)
    requested: dict = field(default_factory=dict)  # -b/-e/-f as asked: min_bytes, max_bytes, step_factor (records)

    def size_run(self, cfg, size):
        """The size config cfg runs for requested size: rounded down to what it takes on world_size ranks, as
        nccl-tests does (0: skipped)."""
        return fit(CASES[cfg["case"]], size, DTYPES[cfg["dtype"]].bytes, self.world_size)

    def records_expected(self):
        return self.cycles * self.repeats * sum(len(CASES[c["case"]].phases) for c in self.configs
                                                for size in self.sizes if self.size_run(c, size))

    def largest(self, world_size):
        """(bytes, config, size) of the measurement whose buffers are largest on one rank."""
        return max(((CASES[c["case"]].footprint(c, size // DTYPES[c["dtype"]].bytes, world_size,
                                                DTYPES[c["dtype"]].bytes), c, size)
                    for c in self.configs for size in self.sizes), key=lambda t: t[0])

    def what_is_measured(self):
        """The fields every node must agree on (not its run id, launcher or tags)."""
        keep = ("sizes", "configs", "iters", "warmup", "check", "agg", "blocking", "agg_iters", "cuda_graph",
                "cpu_time", "cycles", "repeats", "iter_stats", "timeout", "time_budget")
        return {k: getattr(self, k) for k in keep}

    def to_json(self):
        """One line of JSON (every field is JSON already: no deep copy, linear in the plan's size)."""
        return json.dumps(vars(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text):
        return cls(**json.loads(text))

    def write(self, path):
        """The plan file every worker reads (--plan-file): a file, not argv, whatever its size."""
        Path(path).write_text(self.to_json() + "\n")

    def launches(self, nccl):
        """[(env, plan)]: under NCCL a case that needs variables (ring: NCCL_ALGO=Ring) runs in a launch
        of its own, since NCCL reads them once; elsewhere one launch interleaves every config."""
        if not nccl:
            return [({}, self)]
        groups = {}
        for cfg in self.configs:
            env = CASES[cfg["case"]].nccl_env
            groups.setdefault(tuple(sorted(env.items())), []).append(cfg)
        return [(dict(env), dataclasses.replace(self, configs=cfgs)) for env, cfgs in groups.items()]


@dataclass
class MeasureOptions:
    min_bytes: str
    max_bytes: str
    step_factor: int
    iters: int
    warmup: int
    dtype: str
    op: str
    root: str
    check: bool
    no_check: bool
    agg: str
    blocking: Optional[bool]
    z_blocking: Optional[bool]
    agg_iters: int
    cuda_graph: int
    cpu_time: bool
    cycles: int
    iter_stats: bool
    topology: Optional[str] = None
    exact_sizes: bool = False


def _choices(text, known, what, aliases=None):
    """'a,b' or 'all' -> names from known (aliases map other spellings, e.g. nccl-tests')."""
    names = list(known) if str(text).strip() == "all" else [t.strip() for t in str(text).split(",") if t.strip()]
    out = []
    for name in names:
        name = (aliases or {}).get(name, name)
        if name not in known:
            raise UserError(f"unknown {what} {name!r}; known: {', '.join(known)}, all")
        out.append(name)
    if not out:
        raise UserError(f"{what} is empty")
    return list(dict.fromkeys(out))


def roots(text, world_size):
    if str(text).strip() == "all":
        return list(range(world_size))
    try:
        chosen = [int(r) for r in str(text).split(",") if r.strip()]
    except ValueError:
        raise UserError(f"-r/--root takes rank numbers or all, got {text!r}") from None
    bad = [r for r in chosen if not 0 <= r < world_size]
    if bad or not chosen:
        raise UserError(f"-r/--root {text} is not a rank of 0..{world_size - 1}")
    return chosen


NCCL_TESTS_DTYPES = {d.nccl_tests: d.name for d in DTYPES.values()}
AGG = {"0": "rank0", "1": "avg", "2": "min", "3": "max"}   # nccl-tests -a numbers


@dataclass
class CaseOptionsText:
    """The case-expansion options as typed by the user (parsed into CaseOptions)."""
    chunk_sizes: str = "2M"
    threshold: str = "16M"
    inflight: str = "1"
    compress: str = "bf16"
    place: str = "in"
    buckets: str = "4"
    compute_ratio: str = "1"
    gemm: Optional[str] = None
    compute_kernel: str = "gemm"
    compute_threads: int = 1

    def parse(self):
        try:
            inflights = tuple(int(x) for x in str(self.inflight).split(",") if x.strip())
        except ValueError:
            raise UserError("--inflight takes whole numbers, e.g. 1,2,4") from None
        chunks = tuple(size_list(self.chunk_sizes, "--chunk-size"))
        thresholds = tuple(size_list(self.threshold, "--threshold"))
        if not chunks or not inflights or not thresholds:
            raise UserError("--chunk-size, --threshold and --inflight need at least one value")
        if min(inflights) < 1:
            raise UserError(f"--inflight must be at least 1, got {min(inflights)}")
        return CaseOptions(places=PLACES[self.place], chunk_sizes=chunks,
                           thresholds=thresholds, inflights=inflights,
                           compress=self.compress, buckets=_whole_list(self.buckets, "--buckets"),
                           compute_ratios=_ratios(self.compute_ratio), gemm=parse_gemm(self.gemm),
                           compute_kernel=self.compute_kernel, compute_threads=self.compute_threads)


def _whole_list(text, what):
    """'1,4,16' -> (1, 4, 16), each at least 1."""
    try:
        values = tuple(int(x) for x in str(text).split(",") if x.strip())
    except ValueError:
        raise UserError(f"{what} takes whole numbers, e.g. 1,4,16") from None
    if not values or min(values) < 1:
        raise UserError(f"{what} needs whole numbers of at least 1, got {text!r}")
    return values


def _ratios(text):
    """--compute-ratio '0.5,1,2' -> (0.5, 1.0, 2.0): finite, above 0, at most 100."""
    values = tuple(finite(x, "--compute-ratio", 0, 100, lo_open=True) for x in str(text).split(",") if x.strip())
    if not values:
        raise UserError("--compute-ratio needs at least one value")
    return values


PLACES = {"both": ("out", "in"), "out": ("out",), "in": ("in",)}
PLACE_WORDS = {"out": "out-of-place", "in": "in-place"}


def take(kw, cls):
    """Instance of dataclass cls from the keyword arguments it names (removed from kw)."""
    names = [f.name for f in dataclasses.fields(cls)]
    return cls(**{n: kw.pop(n) for n in names if n in kw})


def no_leftovers(kw):
    if kw:
        raise TypeError(f"options no plan part takes: {', '.join(sorted(kw))}")


def _options(options):
    def decorate(fn):
        for option in reversed(options):
            fn = option(fn)
        return fn
    return decorate


def measure_options(min_bytes="8", max_bytes="256M"):
    """Size, iteration, type and output options shared by the measuring commands (nccl-tests' letters)."""
    return _options([
        click.option("-b", "--min-bytes", default=min_bytes, show_default=True,
                     help="Smallest size (8, 1K, 64M, 1G)."),
        click.option("-e", "--max-bytes", default=max_bytes, show_default=True, help="Largest size."),
        click.option("-f", "--step-factor", type=int, default=2, show_default=True, help="Size multiplier."),
        click.option("--exact-sizes", is_flag=True,
                     help="Refuse a size a collective cannot take on this many ranks, instead of rounding it down "
                          "to one it can (nccl-tests' way, the default; the size run is the one recorded)."),
        click.option("-n", "--iters", type=int, default=20, show_default=True, help="Timed iterations."),
        click.option("-w", "--warmup", type=int, default=5, show_default=True, help="Warm-up iterations."),
        click.option("-d", "--datatype", "--dtype", "dtype", default="float32", show_default=True,
                     help=f"Comma list or all: {', '.join(DTYPES)} (nccl-tests' names too: "
                          f"{', '.join(NCCL_TESTS_DTYPES)})."),
        click.option("-o", "--op", default="sum", show_default=True,
                     help="Comma list or all: " + ", ".join(OPS) + " (avg: NCCL only; all skips it on Gloo)."),
        click.option("-r", "--root", default="0", show_default=True, help="Root of broadcast/reduce: ranks or all."),
        click.option("-c", "--check", type=click.BOOL, default=True, show_default=True, metavar="0|1",
                     help="Check every element of the result against the exact expected value."),
        click.option("--no-check", is_flag=True, help="Same as -c 0."),
        click.option("-a", "--agg", default="avg", show_default=True, metavar="avg|min|max|rank0|0-3",
                     help="How per-rank times combine (nccl-tests -a: 0 rank0, 1 avg, 2 min, 3 max); min and max "
                          "are always kept."),
        click.option("--blocking/--no-blocking", default=None, help=BLOCKING_HELP),
        click.option("-z", "z_blocking", type=click.BOOL, default=None, metavar="0|1", help="nccl-tests -z: blocking."),
        click.option("-m", "--agg-iters", type=int, default=1, show_default=True,
                     help="Operations per timed iteration (nccl-tests -m)."),
        click.option("-G", "--cuda-graph", type=int, default=0, show_default=True,
                     help="Capture the timed loop in a CUDA graph and replay it this many times (NCCL only)."),
        click.option("-C", "--cpu-time", type=click.BOOL, default=False, show_default=True, metavar="0|1",
                     help="Report CPU wall time instead of CUDA-event time (nccl-tests -C)."),
        click.option("-N", "--cycles", type=int, default=1, show_default=True,
                     help="Run the whole sweep this many times, one record each (nccl-tests -N; 0 is refused)."),
        click.option("--iter-stats/--no-iter-stats", default=True, show_default=True,
                     help="Keep every rank's per-iteration times: p50/p99/cv and the rank the others wait for."),
        click.option("--stats", "show_stats", is_flag=True,
                     help="Show the per-rank statistics table (p50, p99, cv, slowest rank and its excess)."),
        click.option("--out", default=None, metavar="FILE",
                     help="Append records to this JSONL file (never overwritten; /dev/null: none)."),
        click.option("--topology", default=None, metavar="FILE|NAME",
                     help="Topology file or name in topologies/ for link_peak_gbps, predicted_time_us and "
                          "link_utilization [default: detected, see commbench topo]."),
        click.option("--format", "fmt", type=click.Choice(FORMATS + ("nccl-tests",)), default="table",
                     show_default=True, help="What goes to stdout; nccl-tests: nccl-tests' plain text, for its parsers."),
    ])


def case_options(place_default="in"):
    """Options that expand strategies into configs (chunk sizes, threshold, in-flight, wire type)."""
    return _options([
        click.option("--chunk-size", "chunk_sizes", default="2M", show_default=True,
                     help="Chunk size(s) of the chunked strategy, comma list (512K,1M,2M)."),
        click.option("--threshold", default="16M", show_default=True,
                     help="Payloads above this are chunked; at or below it, one all_gather (as plain). Comma list."),
        click.option("--inflight", default="1", show_default=True,
                     help="Chunk operations outstanding at once, comma list (1,2,4)."),
        click.option("--compress", type=click.Choice(list(COMPRESS)), default="bf16", show_default=True,
                     help="Wire type of the compressed strategy (fp8 = e4m3 with a per-rank scale)."),
        click.option("--place", type=click.Choice(list(PLACES)), default=place_default, show_default=True,
                     help="In place, out of place or both, where the case has both variants."),
    ])


def overlap_options():
    """Options that size the compute beside the communication, and the patterns' own layout."""
    return _options([
        click.option("--compute-ratio", default="1", show_default=True, metavar="R[,R...]",
                     help="Size the compute so that it alone takes about R x the communication alone (calibrated "
                          "at start-up, per payload); 0.5,1,2 is the usual sweep."),
        click.option("--gemm", default=None, metavar="M,N,K",
                     help="Each step's GEMM as M x K @ K x N instead of --compute-ratio."),
        click.option("--compute-kernel", type=click.Choice(KERNELS), default="gemm", show_default=True,
                     help="gemm: torch.matmul (bf16 on GPU, float32 on CPU); elementwise: a memory-bound add."),
        click.option("--compute-threads", type=click.IntRange(1, 256), default=1, show_default=True,
                     help="torch intra-op threads per rank for the compute on CPU (the backend keeps its own)."),
        click.option("--buckets", default="4", show_default=True,
                     help="ddp: all_reduce buckets the payload is cut into, comma list (1 = one all_reduce)."),
    ])


def repeats_option(default):
    """--repeats: what compare, chunked and sweep draw verdicts from."""
    return click.option("--repeats", type=click.IntRange(1, 1000), default=default, show_default=True,
                        help="Separate timed measurements of every config per size, interleaved; verdicts need 2+.")


def build_plan(names, measure, case_opts, spec, repeats=1):
    """A checked Plan of the named cases (every config of each, per dtype, op and root) over the sizes."""
    if measure.iters < 1 or measure.warmup < 0 or measure.agg_iters < 1:
        raise UserError("-n/--iters and -m/--agg-iters must be at least 1 and -w/--warmup at least 0")
    if measure.cycles < 1:
        raise UserError("-N/--cycles must be at least 1 (commbench returns its records; it does not run forever)")
    if measure.cuda_graph < 0 or (measure.cuda_graph and not spec.may_use_nccl()):
        raise UserError("-G/--cuda-graph replays CUDA graphs: NCCL on GPUs only, not Gloo")
    agg = AGG.get(measure.agg, measure.agg)
    if agg not in AGG.values():
        raise UserError(f"-a/--agg {measure.agg!r}: use avg, min, max, rank0 or nccl-tests' 0-3")
    sizes = size_range(parse_size(measure.min_bytes, "-b/--min-bytes"),
                       parse_size(measure.max_bytes, "-e/--max-bytes"), measure.step_factor)
    dtypes = _choices(measure.dtype, DTYPES, "dtype", NCCL_TESTS_DTYPES)
    if measure.dtype.strip() == "all":  # every type this backend can move
        dtypes = [d for d in dtypes if DTYPES[d].gloo or spec.may_use_nccl()]
    ops = _choices(measure.op, OPS, "op")
    if not spec.may_use_nccl():
        if measure.op.strip() == "all":  # every op this backend has
            ops = [o for o in ops if o not in NCCL_ONLY_OPS]
        elif set(ops) & set(NCCL_ONLY_OPS):
            raise UserError(f"-o/--op avg needs NCCL: {'MPI' if spec.backend == 'mpi' else 'Gloo'} has no average "
                            "reduction (sum and divide yourself: -o sum)")
    root_list = roots(measure.root, spec.world_size)
    configs, rounded = [], {}
    for dtype in dtypes:
        if not DTYPES[dtype].gloo and not spec.may_use_nccl():
            raise UserError(f"--dtype {dtype} needs NCCL: Gloo has no {DTYPES[dtype].nccl_tests} reductions or "
                            "transfers")
        for name in names:
            case = CASES[name]
            need = spec.world_size ** 2 if "avg" in ops else spec.world_size  # avg fills multiples of n
            if case.reduces and DTYPES[dtype].exact < need:
                raise UserError(f"--dtype {dtype} cannot hold a sum over {spec.world_size} ranks exactly "
                                f"(integers up to {DTYPES[dtype].exact}); use a wider type")
            runs = fit_sizes(case, sizes, DTYPES[dtype].bytes, spec.world_size, measure.exact_sizes)
            if any(size != run for size, run in runs.items()):   # said in one note
                rounded[name, case.unit(DTYPES[dtype].bytes, spec.world_size)] = runs
            mine = case.configs(case_opts, dtype)
            mine = [c for c in mine if not (mpi.drops(name, c, dtype, case.reduces or case.sums)  # MPI_IN_PLACE, types
                                            if spec.backend == "mpi" else torch_dist.drops(name, c))]
            if not mine:
                wanted = " or ".join(PLACE_WORDS[p] for p in case_opts.places)
                where = "MPI" if spec.backend == "mpi" else "torch.distributed"
                raise UserError(f"{name} has no {wanted} variant in {where}; see --place")
            for cfg in mine:
                configs += [{**cfg, "dtype": dtype, "op": op, "root": root}
                            for op in (ops if case.reduces else ["sum" if case.sums else None])
                            for root in (root_list if case.rooted else [None])]
    if rounded:
        spec.notes.append(rounding_note(rounded, spec.world_size))
    z = measure.z_blocking
    return Plan(run_id=new_run_id(), sizes=sizes, configs=configs, iters=measure.iters, warmup=measure.warmup,
                check=measure.check and not measure.no_check, agg=agg,
                blocking=z if z is not None else measure.blocking, agg_iters=measure.agg_iters,
                cuda_graph=measure.cuda_graph, cpu_time=measure.cpu_time, cycles=measure.cycles, repeats=repeats,
                iter_stats=measure.iter_stats,
                backend=spec.backend, timeout=spec.timeout, hang_timeout=spec.hang_timeout, launcher=spec.launcher,
                topology=for_run(measure.topology, spec).as_dict(),
                command=shlex.join(["commbench", *sys.argv[1:]]), world_size=spec.world_size,
                requested={"min_bytes": sizes[0], "max_bytes": parse_size(measure.max_bytes, "-e/--max-bytes"),
                           "step_factor": measure.step_factor})


def rounding_note(rounded, n):
    """One line: the cases whose sizes were rounded down, their unit, and the sizes below it (skipped)."""
    units = ", ".join(f"{name}: multiples of {unit} B" + "".join(
        f", {size} B is below and skipped" for size, run in runs.items() if not run)
        for (name, unit), runs in rounded.items())
    return (f"sizes rounded down to what each collective takes on {n} ranks, as nccl-tests does ({units}); records "
            "and tables show the size run; --exact-sizes refuses instead")
