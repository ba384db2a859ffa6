"""A plan from a command's parsed options (commbench/commands/options.py): every config of the named cases per
dtype, op and root, the sizes fitted to what each case takes on the launch's ranks (nccl-tests' rounding), checked
against the backend, as the typed Plan every rank runs (commbench/plan.py)."""
import shlex
import sys

from benchcore.errors import UserError
from benchcore.results.records import new_run_id
from benchcore.units import parse_size, size_range
from commbench.cases.case import check_steps, fit_sizes
from commbench.cases.collectives import DTYPES, NCCL_ONLY_OPS, OPS
from commbench.cases.registry import CASES
from commbench.model.detect import for_run
from commbench.plan import Plan
from commbench.transports import mpi, torch_dist

NCCL_TESTS_DTYPES = {d.nccl_tests: d.name for d in DTYPES.values()}
AGG = {"0": "rank0", "1": "avg", "2": "min", "3": "max"}   # nccl-tests -a numbers
PLACE_WORDS = {"out": "out-of-place", "in": "in-place"}


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


def build_plan(names, measure, case_opts, spec, repeats=1):
    """A checked Plan of the named cases (every config of each, per dtype, op and root) over the sizes, from a
    command's MeasureOptions and CaseOptions (a ReadOptions) on a resolved LaunchSpec (whose notes it may add to)."""
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
                check_steps(case, {**cfg, "dtype": dtype}, [run for run in runs.values() if run], DTYPES[dtype].bytes,
                            spec.world_size)
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
                iter_stats=measure.iter_stats, evidence=measure.evidence,
                backend=spec.backend, timeout=spec.timeout, hang_timeout=spec.hang_timeout, launcher=spec.launcher,
                emulated=spec.emulated,
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
