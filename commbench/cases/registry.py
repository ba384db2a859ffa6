"""The case registry: every collective, strategy, point-to-point mode, pair test and overlap pattern commbench
times, by name; the record fields each declares, documented in benchcore/results/schema.py when it is imported."""
from benchcore import vocabulary
from benchcore.errors import UserError, shown
from benchcore.results import schema
from commbench.cases.case import label
from commbench.cases.collectives import COLLECTIVE_CASES
from commbench.cases.overlap import OVERLAP_CASES
from commbench.cases.p2p import P2P_CASES
from commbench.cases.pairs import PAIR_CASES
from commbench.cases.strategies import STRATEGY_CASES

CASES = {**COLLECTIVE_CASES, **STRATEGY_CASES, **P2P_CASES, **PAIR_CASES, **OVERLAP_CASES}
for _case in CASES.values():
    schema.extend("commbench", _case.fields)
COLLECTIVE_NAMES = list(COLLECTIVE_CASES)
STRATEGY_NAMES = list(STRATEGY_CASES)
PATTERN_NAMES = list(OVERLAP_CASES)


def parse_names(text, kind, what):
    """'a,b' -> ['a', 'b'], each a known case of kind ('collective' or 'strategy'); a collective in any spelling
    nccl-tests and people use (allreduce, AllReduce, all-reduce: benchcore.vocabulary), as `import` reads them."""
    names = [part.strip() for part in str(text).split(",") if part.strip()]
    if not names:
        raise UserError(f"{what} is empty")
    known = [n for n, c in CASES.items() if c.kind == kind]
    names = [vocabulary.named(n) or n if kind == "collective" else n for n in names]
    for name in names:
        if name not in known:
            raise UserError(f"unknown {kind} {shown(repr(name), 60)}; known: {', '.join(known)}")
    return list(dict.fromkeys(names))


def case_of(rec):
    """The case a record (or config) belongs to."""
    return CASES[rec.get("case") or rec.get("strategy") or rec.get("pattern") or rec["collective"]]


def record_label(rec):
    return label(case_of(rec), rec)
