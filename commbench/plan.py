"""The plan every rank runs: typed, it travels to the workers as a JSON file (--plan-file, written by the launcher;
built from a command's options by commbench/runner.py).
"""
import dataclasses
import json
from dataclasses import dataclass, field
from typing import List, Optional

from benchcore.files import write_new_text
from commbench.cases.case import fit, work_key
from commbench.cases.collectives import DTYPES
from commbench.cases.registry import CASES


@dataclass
class Step:
    """One measurement of a plan: a config at a size in a repeat of a cycle; run: the size it runs (fitted)."""
    cycle: int
    size: int
    repeat: int
    cfg: dict
    run: int


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
    evidence: bool = True        # what the transport says it ran, and each setting applied or not (commbench/evidence)
    time_budget: Optional[float] = None   # seconds this launch may take, start-up included: each measurement runs
                                          # the iterations that fit its share (calibrated; at most iters; p2p)
    launched_at: float = 0.0     # time.time() when this launch started (the budget counts from it; per node)
    fit_repeats: Optional[List[int]] = None   # [least, most] repeats a time budget chooses from after a calibration
                                              # pass (timing.fit_repeats: compare, chunked, overlap); None: repeats
    backend: str = "auto"
    timeout: float = 300
    hang_timeout: float = 60     # no progress this long on rank 0: a hang report (commbench/liveness.py)
    launcher: str = "local"
    emulated: bool = False       # several nodes all started on this machine (LaunchSpec.emulated): records say it
    topology: Optional[dict] = None  # the topology in effect (commbench.model.topology.Topology.as_dict())
    command: str = ""            # the command line that made this plan, as typed
    tags: dict = field(default_factory=dict)   # fields every record carries (a sweep's config)
    world_size: int = 1          # the ranks the sizes were fitted to (size_run)
    requested: dict = field(default_factory=dict)  # -b/-e/-f as asked: min_bytes, max_bytes, step_factor (records)

    def size_run(self, cfg, size):
        """The size config cfg runs for requested size: rounded down to what it takes on world_size ranks, as
        nccl-tests does (0: skipped)."""
        return fit(CASES[cfg["case"]], size, DTYPES[cfg["dtype"]].bytes, self.world_size)

    def stand_ins(self):
        """{(size, config index): the index of the config measured for it}: configs that run the same operations at
        a size (commbench.cases.case.work_key: chunked at or below its threshold is plain's one all_gather) are
        measured once, as the first of them; the verdicts would never rank them against each other anyway."""
        out = {}
        for size in self.sizes:
            first = {}
            for i, cfg in enumerate(self.configs):
                run = self.size_run(cfg, size)
                if run and CASES[cfg["case"]].work:   # a case that says what it runs (others: every config differs)
                    elt = DTYPES[cfg["dtype"]].bytes
                    by = first.setdefault((run,) + work_key(CASES[cfg["case"]], cfg, run, self.world_size, elt), i)
                    if by != i:
                        out[size, i] = by
        return out

    def steps(self):
        """[Step] in the order every rank measures them (commbench/worker.py): every size, then --repeats rounds of
        every config, each round starting one config later (drift hits every config alike); sizes a config cannot
        take are left out, and configs another one stands for (stand_ins). The launcher names the step a rank
        announces from the same list."""
        out, skip, every = [], self.stand_ins(), list(range(len(self.configs)))
        for cycle in range(self.cycles):
            for size in self.sizes:
                for repeat in range(self.repeats):
                    turn = repeat % len(self.configs)
                    for i in every[turn:] + every[:turn]:
                        run = self.size_run(self.configs[i], size)
                        if run and (size, i) not in skip:
                            out.append(Step(cycle, size, repeat, self.configs[i], run))
        return out

    def records_expected(self):
        skip = self.stand_ins()
        return self.cycles * self.repeats * sum(len(CASES[c["case"]].phases) for i, c in enumerate(self.configs)
                                                for size in self.sizes
                                                if self.size_run(c, size) and (size, i) not in skip)

    def largest(self, world_size):
        """(bytes, config, size) of the measurement whose buffers are largest on one rank."""
        return max(((CASES[c["case"]].footprint(c, size // DTYPES[c["dtype"]].bytes, world_size,
                                                DTYPES[c["dtype"]].bytes), c, size)
                    for c in self.configs for size in self.sizes), key=lambda t: t[0])

    def what_is_measured(self):
        """The fields every node must agree on (not its run id, launcher or tags)."""
        keep = ("sizes", "configs", "iters", "warmup", "check", "agg", "blocking", "agg_iters", "cuda_graph",
                "cpu_time", "cycles", "repeats", "iter_stats", "timeout", "time_budget",
                "fit_repeats")
        return {k: getattr(self, k) for k in keep}

    def to_json(self):
        """One line of JSON (every field is JSON already: no deep copy, linear in the plan's size)."""
        return json.dumps(vars(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text):
        return cls(**json.loads(text))

    def write(self, path):
        """The plan file every worker reads (--plan-file): a file, not argv, whatever its size."""
        write_new_text(path, self.to_json() + "\n", "plan file")

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
