"""The case registry against its documented contract (commbench/cases/case.py), row by row, and the Plan."""
import dataclasses

import pytest

from benchcore.errors import UserError
from benchcore.results import schema
from commbench.cases.case import TOTAL, CaseOptions, label
from commbench.cases.collectives import COLLECTIVES, DTYPES
from commbench.cases.registry import CASES, parse_names
from commbench.commands.options import no_leftovers
from commbench.plan import Plan
from commbench.transports.envvars import CATALOGUE

RECORD_FIELDS = set(schema.DESIGN["commbench"]) | set(schema.EXTENSIONS["commbench"])
WIDE = CaseOptions(places=("out", "in"), chunk_sizes=(1 << 20, 2 << 20), thresholds=(16 << 20,), inflights=(1, 4))


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_row_keeps_the_case_contract(name):
    case = CASES[name]
    assert case.kind in ("collective", "strategy", "p2p", "pairs", "overlap")
    # nccl-tests' rules for its size and records (p2p: OSU's modes, records of their own name)
    assert case.collective in COLLECTIVES or case.kind == "p2p" and case.collective == name
    assert case.phases[-1] == TOTAL and len(set(case.phases)) == len(case.phases)
    if case.kind == "overlap":   # its four timings: communication alone, compute alone, in sequence, overlapped
        assert case.phases == ("comm", "compute", "sequential", TOTAL) and case.model is not None
    else:
        assert all(p in COLLECTIVES for p in case.phases[:-1])  # a phase is named for the collective it runs
    assert all(var in CATALOGUE for var in case.nccl_env)
    configs = case.configs(WIDE, "float32")
    assert configs and all(cfg["case"] == name for cfg in configs)
    for cfg in configs:  # a config's parameters become record fields of the schema
        assert set(cfg) - {"case"} <= RECORD_FIELDS, set(cfg) - RECORD_FIELDS
        assert isinstance(cfg.get("in_place"), bool)
    labels = [label(case, cfg) for cfg in configs]
    assert len(set(labels)) == len(labels), labels  # every config tells itself apart
    assert case.both_places == (len({cfg["in_place"] for cfg in configs}) == 2)
    elt = DTYPES["float32"].bytes
    case.check_size(4 * elt * 6, elt, 2 if case.kind == "p2p" else 3)  # a size every case accepts (p2p: 2 ranks)
    if case.kind == "collective":
        assert case.name == case.collective and case.phases == (TOTAL,)


def test_every_collective_is_a_case_and_names_are_checked():
    assert set(COLLECTIVES) <= set(CASES)
    assert parse_names("ring, hierarchical", "strategy", "--strategies") == ["ring", "hierarchical"]
    with pytest.raises(UserError, match="unknown strategy 'all_reduce'"):
        parse_names("all_reduce", "strategy", "--strategies")
    with pytest.raises(UserError, match="is empty"):
        parse_names(" , ", "collective", "--collective")


def test_plan_expects_one_record_per_phase_and_round_trips_as_json():
    configs = [{**c, "dtype": "float32"} for name in ("rs-ag", "all_gather") for c in CASES[name].configs(WIDE, "")]
    plan = Plan(run_id="x", sizes=[1024, 4096], configs=configs)
    assert plan.records_expected() == 2 * (2 * 3 + 2 * 1)
    assert Plan.from_json(plan.to_json()) == plan
    # 3 ranks: all_gather takes multiples of 12 B, as nccl-tests rounds; 8 B runs nothing (no record), rs-ag 4 B
    three = dataclasses.replace(plan, sizes=[8, 1024], world_size=3)
    assert [three.size_run(c, s) for c in configs for s in three.sizes] == [8, 1024] * 2 + [0, 1020] * 2
    assert three.records_expected() == 2 * 2 * 3 + 2 * 1


def test_a_case_environment_gets_a_launch_of_its_own_under_nccl_only():
    configs = [{"case": "ring", "in_place": True}, {"case": "rs-ag", "in_place": True},
               {"case": "all_reduce", "in_place": True}]
    plan = Plan(run_id="x", sizes=[1024], configs=configs)
    assert [(env, [c["case"] for c in p.configs]) for env, p in plan.launches(nccl=False)] == \
        [({}, ["ring", "rs-ag", "all_reduce"])]
    assert [(env, [c["case"] for c in p.configs]) for env, p in plan.launches(nccl=True)] == \
        [({"NCCL_ALGO": "Ring"}, ["ring"]), ({}, ["rs-ag", "all_reduce"])]


def test_an_option_no_plan_part_takes_is_an_error():
    no_leftovers({})
    with pytest.raises(TypeError, match="chunk_sizes"):
        no_leftovers({"chunk_sizes": "1M"})
