"""The options of the measuring commands, parsed once, at the edge: click's option groups, and the typed objects a
command turns click's arguments into (LaunchSpecs, MeasureOptions, CaseOptions, Output) before the runner, the
plan, the launchers and the cases see them; none of those reads click's arguments or its context.
"""
import dataclasses
from dataclasses import dataclass
from typing import List, Optional

import click

from benchcore.errors import UserError, given, refuse_given, spelled
from benchcore.inputs import finite, shown
from benchcore.progress import quiet_option
from benchcore.report.render import FORMATS
from benchcore.results import metrics
from benchcore.results.usable import SECONDS
from benchcore.units import size_list
from commbench.cases.case import CaseOptions
from commbench.cases.chunked import MAX_INFLIGHT
from commbench.cases.collectives import DTYPES, OPS
from commbench.cases.compressed import COMPRESS
from commbench.cases.compute import KERNELS, parse_gemm
from commbench.launch.spec import BACKENDS, LAUNCHERS, LaunchSpec, resolve_spec
from commbench.launch.ssh import DEFAULT_SSH, host_list

BLOCKING_HELP = (
    "Wait for each collective before starting the next (nccl-tests -z). Default: on NCCL, "
    "back-to-back launches on one CUDA stream, which the GPU serialises; on Gloo, blocking, "
    "because Gloo runs async operations concurrently on its worker threads and would report "
    "the overlap as bandwidth (measured: 0.65 GB/s async vs 0.29-0.38 GB/s blocking for a 1 MiB "
    "all_reduce on 2 ranks).")
PLACES = {"both": ("out", "in"), "out": ("out",), "in": ("in",)}
# click parameter -> the CaseOptions field it sets, where the names differ (refuse_unread speaks of fields)
FIELDS = {"place": "places", "threshold": "thresholds", "inflight": "inflights", "compute_ratio": "compute_ratios"}


@dataclass
class MeasureOptions:
    """The size, iteration, type and timing options as typed (checked where the plan is built: planning.build_plan)."""
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
    evidence: bool = True
    topology: Optional[str] = None
    exact_sizes: bool = False


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
        if max(inflights) > MAX_INFLIGHT:
            raise UserError(f"--inflight {max(inflights)}: at most {MAX_INFLIGHT} operations in flight (each is a "
                            "process group every rank opens at start-up, and a GPU runs at most "
                            f"{MAX_INFLIGHT} kernels at once)")
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


@dataclass
class Output:
    """Where the records go and what is shown: --out, --format, --plot, --stats."""
    out: Optional[str]
    fmt: str
    plot: Optional[str] = None
    show_stats: bool = False


@dataclass
class Options:
    """A measuring command's options, typed once (what runner.measure takes)."""
    specs: List[LaunchSpec]      # checked; one per --backends entry, else one
    measure: MeasureOptions
    cases: CaseOptions
    output: Output
    given: dict                  # given_fields(): what refuse_unread reads
    repeats: int = 1
    time_budget: Optional[float] = None   # --time-budget seconds: repeats and iterations fitted (runner.measure)
    fit_repeats: Optional[List[int]] = None   # with it, [least, most] repeats: 2 (a spread), --repeats where given


def take(kw, cls):
    """Instance of dataclass cls from the keyword arguments it names (removed from kw)."""
    names = [f.name for f in dataclasses.fields(cls)]
    return cls(**{n: kw.pop(n) for n in names if n in kw})


def no_leftovers(kw):
    if kw:
        raise TypeError(f"options no plan part takes: {', '.join(sorted(kw))}")


def given_fields():
    """{CaseOptions field, or root/op: the option as the user spelled it} of the options the command line set."""
    return {FIELDS.get(name, name): text for name, text in spelled().items()}


def parse_backends(text):
    """'gloo,mpi' -> ['gloo', 'mpi'] (at least two, each known, auto excluded)."""
    names = list(dict.fromkeys(b.strip() for b in str(text).split(",") if b.strip()))
    bad = [b for b in names if b not in BACKENDS[1:]]
    if bad or len(names) < 2:
        raise UserError(f"--backends takes two or more of {', '.join(BACKENDS[1:])}, got {text!r}")
    return names


def launch_specs(kw, backends=None):
    """Pop the launch options out of kw: [LaunchSpec] checked and completed, one per backend of backends (--backends)
    or else one."""
    kw["hosts"] = host_list(kw.pop("hosts", None), kw.pop("hostfile", None))
    spec = take(kw, LaunchSpec)
    if backends and spec.backend not in (None, "auto"):
        raise UserError("--backends and --backend exclude each other")
    if spec.dry_run:   # what would be written or shown after the run (sweep's --resume reads --out: kept)
        refuse_given(["plot", "show_stats", "fmt"] + ([] if given("resume") else ["out"]),
                     "not with --dry-run, which prints the launch command lines and runs nothing")
    if not backends:
        return [resolve_spec(spec)]
    return [resolve_spec(dataclasses.replace(spec, backend=backend, notes=[])) for backend in backends]


def parse(kw, backends=None, repeats=1):
    """A measuring command's keyword arguments (every one, or TypeError) as Options."""
    specs = launch_specs(kw, backends)
    cases = take(kw, CaseOptionsText).parse()
    budget = parse_budget(kw.pop("time_budget", None))
    if budget and backends:
        raise UserError("--time-budget does not go with --backends (one launch per backend and repeat): give -n and "
                        "--repeats instead")
    most = repeats if given("repeats") else MAX_REPEATS
    opts = Options(specs, take(kw, MeasureOptions), cases, take(kw, Output), given_fields(), repeats, budget,
                   [min(2, most), most] if budget else None)
    no_leftovers(kw)
    return opts


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
                          f"{', '.join(d.nccl_tests for d in DTYPES.values())})."),
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
        click.option("--evidence/--no-evidence", default=True, show_default=True,
                     help="Record what the transport says it ran (NCCL's INFO lines, Gloo's sockets, Open MPI's "
                          "selection) and whether each setting applied; sweep and compare rank on it."),
        click.option("--stats", "show_stats", is_flag=True,
                     help="Show the per-rank statistics table (p50, p99, cv, slowest rank and its excess)."),
        click.option("--out", default=None, metavar="FILE",
                     help="Append records to this JSONL file (never overwritten; /dev/null: none)."),
        *metrics.options(),
        click.option("--topology", default=None, metavar="FILE|NAME",
                     help="Topology file or name in topologies/ for link_peak_gbps, predicted_time_us and "
                          "link_utilization [default: detected, see commbench topo]."),
        click.option("--format", "fmt", type=click.Choice(FORMATS + ("nccl-tests",)), default="table",
                     show_default=True,
                     help="What goes to stdout; nccl-tests: nccl-tests' plain text, for its parsers."),
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
    return click.option("--repeats", type=click.IntRange(1, MAX_REPEATS), default=default, show_default=True,
                        help="Separate timed measurements of every config per size, interleaved; verdicts need 2+.")


MAX_REPEATS = 1000   # --repeats' most; a time budget's where --repeats was not given
# the ranks agree on each measurement's share of --time-budget in nanoseconds, a signed 64-bit integer (fit_budget)
MAX_BUDGET_S = (2 ** 63 - 1) // 10 ** 9


def parse_budget(text):
    """--time-budget SECONDS as a number (None: not given): finite, above 0, at most MAX_BUDGET_S."""
    if text is None:
        return None
    seconds = finite(text, "--time-budget", 0, lo_open=True)
    if seconds > MAX_BUDGET_S:
        raise UserError(f"--time-budget {shown(text, 40)}: the ranks share a budget in 64-bit nanoseconds, at most "
                        f"{MAX_BUDGET_S} s (292 years)")
    return seconds


def time_budget_option(fn):
    """--time-budget of compare, chunked, overlap (sweep says its own help)."""
    return click.option("--time-budget", default=None, metavar="SECONDS",
                        help="End near this many seconds, start-up included: a calibration pass (every measurement "
                             "at 1 iteration) chooses the repeats (at least 2; at most --repeats where given), then "
                             "each measurement fits its iterations (at most -n) to its share, warm-up first. A budget "
                             "too small for 2 repeats is refused.")(fn)


def launch_options(fn):
    """Click options every measuring command takes (one implementation for all)."""
    return _options([
        click.option("--nodes", type=int, default=None,
                     help="Nodes (torchrun agents) [default: the Slurm allocation's, else 1]."),
        click.option("--nproc-per-node", type=int, default=None,
                     help="Ranks per node [default: GPUs on this node; without GPUs 2 on one node, 1 per node "
                          "on several]."),
        click.option("--launcher", type=click.Choice(LAUNCHERS), default="auto", show_default=True,
                     help="auto: ssh with --hosts, slurm inside an allocation, torchrun with --rdzv-endpoint, mpirun "
                          "with --backend mpi, else local emulation."),
        click.option("--rdzv-endpoint", default=None, metavar="HOST:PORT",
                     help="Rendezvous on node rank 0 (run the same command on every node)."),
        click.option("--node-rank", type=int, default=None, help="This node's rank with --rdzv-endpoint."),
        click.option("--hosts", default=None, metavar="H1,H2,...",
                     help="Start one agent per host over ssh (--launcher ssh), the rendezvous on the first; every "
                          "host runs the same Python path as here."),
        click.option("--hostfile", default=None, metavar="FILE",
                     help="The hosts of --hosts from a file: one per line ('#' comments; mpirun's 'slots=' ignored)."),
        click.option("--ssh-command", default=DEFAULT_SSH, show_default=True, metavar="TEMPLATE",
                     help="How --hosts are reached: words, {host} replaced in them (no shell)."),
        click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
                     help="auto: NCCL when CUDA is available, else Gloo (mpi: mpi4py, under mpirun or srun)."),
        click.option("-T", "--timeout", type=SECONDS, default=300, show_default=True,
                     help="Process-group timeout in s: a dead or stuck peer ends the run within it."),
        click.option("--rdzv-timeout", type=SECONDS, default=120, show_default=True,
                     help="Seconds to wait for every node to join."),
        click.option("--hang-timeout", type=SECONDS, default=60, show_default=True,
                     help="No operation finishing this long is a hang: rank 0 reports where every rank is and the "
                          "run ends with exit code 4 (kept below --timeout)."),
        click.option("--dry-run", is_flag=True, help="Print the launch command lines and exit."),
        click.option("-v", "--verbose", is_flag=True, help="Stream torchrun and worker output."),
        quiet_option,
    ])(fn)
