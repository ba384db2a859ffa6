"""Plans: what every rank runs, built from the CLI options of a measuring command.

A Plan is typed and travels to the workers as JSON. Click's keyword arguments are split into
typed option groups (launch, measurement, case expansion); a keyword nobody takes is an error.
"""
import dataclasses
import json
from dataclasses import dataclass, field
from typing import List, Optional

import click

from benchcore.errors import UserError
from benchcore.records import new_run_id
from benchcore.report import FORMATS
from benchcore.units import parse_size, size_list, size_range
from commbench.case import CaseOptions
from commbench.collectives import COLLECTIVES, DTYPES, OPS
from commbench.registry import CASES
from commbench.strategies import COMPRESS

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
    configs: List[dict]          # case configs, {"case": name, ...}, run interleaved per size
    dtype: str = "float32"
    op: str = "sum"
    iters: int = 20
    warmup: int = 5
    check: bool = True
    agg: str = "avg"
    blocking: Optional[bool] = None
    backend: str = "auto"
    timeout: float = 300
    launcher: str = "local"
    topology: Optional[str] = None
    tags: dict = field(default_factory=dict)   # fields every record carries (a sweep's config)

    def records_expected(self):
        return len(self.sizes) * sum(len(CASES[c["case"]].phases) for c in self.configs)

    def to_json(self):
        return json.dumps(dataclasses.asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text):
        return cls(**json.loads(text))

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
    check: bool
    agg: str
    blocking: Optional[bool]


@dataclass
class CaseOptionsText:
    """The case-expansion options as typed by the user (parsed into CaseOptions)."""
    chunk_sizes: str = "2M"
    threshold: str = "16M"
    inflight: str = "1"
    compress: str = "bf16"
    place: str = "in"

    def parse(self):
        try:
            inflights = tuple(int(x) for x in str(self.inflight).split(",") if x.strip())
        except ValueError:
            raise UserError("--inflight takes whole numbers, e.g. 1,2,4") from None
        chunks = tuple(size_list(self.chunk_sizes, "--chunk-size"))
        if not chunks or not inflights:
            raise UserError("--chunk-size and --inflight need at least one value")
        if min(inflights) < 1:
            raise UserError(f"--inflight must be at least 1, got {min(inflights)}")
        return CaseOptions(places=PLACES[self.place], chunk_sizes=chunks,
                           threshold=parse_size(self.threshold, "--threshold"), inflights=inflights,
                           compress=self.compress)


PLACES = {"both": ("out", "in"), "out": ("out",), "in": ("in",)}


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
    """Size, iteration, type and output options shared by the measuring commands."""
    return _options([
        click.option("-b", "--min-bytes", default=min_bytes, show_default=True,
                     help="Smallest size (8, 1K, 64M, 1G)."),
        click.option("-e", "--max-bytes", default=max_bytes, show_default=True, help="Largest size."),
        click.option("-f", "--step-factor", type=int, default=2, show_default=True, help="Size multiplier."),
        click.option("-n", "--iters", type=int, default=20, show_default=True, help="Timed iterations."),
        click.option("-w", "--warmup", type=int, default=5, show_default=True, help="Warm-up iterations."),
        click.option("--dtype", default="float32", show_default=True, help="/".join(DTYPES)),
        click.option("--op", default="sum", show_default=True, help="/".join(OPS) + " (reductions)."),
        click.option("--check/--no-check", default=True, show_default=True,
                     help="Check every element of the result against the exact expected value."),
        click.option("--agg", type=click.Choice(["avg", "min", "max"]), default="avg", show_default=True,
                     help="How per-rank times combine (nccl-tests -a); min and max are always kept."),
        click.option("--blocking/--no-blocking", default=None, help=BLOCKING_HELP),
        click.option("--out", default=None, metavar="FILE",
                     help="Append records to this JSONL file (never overwritten; /dev/null: none)."),
        click.option("--format", "fmt", type=click.Choice(FORMATS + ("nccl-tests",)), default="table", show_default=True,
                     help="What goes to stdout."),
    ])


def case_options(place_default="in"):
    """Options that expand strategies into configs (chunk sizes, threshold, in-flight, wire type)."""
    return _options([
        click.option("--chunk-size", "chunk_sizes", default="2M", show_default=True,
                     help="Chunk size(s) of the chunked strategy, comma list (512K,1M,2M)."),
        click.option("--threshold", default="16M", show_default=True,
                     help="Payloads above this are chunked; at or below it, one all_gather."),
        click.option("--inflight", default="1", show_default=True,
                     help="Chunk operations outstanding at once, comma list (1,2,4)."),
        click.option("--compress", type=click.Choice(list(COMPRESS)), default="bf16", show_default=True,
                     help="Wire type of the compressed strategy (fp8 = e4m3 with a per-rank scale)."),
        click.option("--place", type=click.Choice(list(PLACES)), default=place_default, show_default=True,
                     help="In place, out of place or both, where the case has both variants."),
    ])


def build_plan(names, measure, case_opts, spec):
    """A checked Plan of the named cases (every config of each) over the size sweep."""
    if measure.dtype not in DTYPES:
        raise UserError(f"unknown dtype {measure.dtype!r}; known: {', '.join(DTYPES)}")
    if measure.op not in OPS:
        raise UserError(f"unknown op {measure.op!r}; known: {', '.join(OPS)}")
    if measure.iters < 1 or measure.warmup < 0:
        raise UserError("-n/--iters must be at least 1 and -w/--warmup at least 0")
    sizes = size_range(parse_size(measure.min_bytes, "-b/--min-bytes"),
                       parse_size(measure.max_bytes, "-e/--max-bytes"), measure.step_factor)
    dtype = DTYPES[measure.dtype]
    if not dtype.gloo and not spec.may_use_nccl():
        raise UserError(f"--dtype {dtype.name} needs NCCL: Gloo has no {dtype.nccl_tests} reductions or transfers")
    if dtype.exact < spec.world_size and any(CASES[n].kind == "collective" and COLLECTIVES[n].reduces for n in names):
        raise UserError(f"--dtype {dtype.name} cannot hold a sum over {spec.world_size} ranks exactly "
                        f"(integers up to {dtype.exact}); use a wider type")
    elt = dtype.bytes
    configs = []
    for name in names:
        case = CASES[name]
        for size in sizes:
            case.check_size(size, elt, spec.world_size)
        configs += case.configs(case_opts, measure.dtype)
    if not configs:
        raise UserError("nothing to measure: no case offers the chosen --place")
    return Plan(run_id=new_run_id(), sizes=sizes, configs=configs, dtype=measure.dtype, op=measure.op,
                iters=measure.iters, warmup=measure.warmup, check=measure.check, agg=measure.agg,
                blocking=measure.blocking, backend=spec.backend, timeout=spec.timeout, launcher=spec.launcher)
