"""Issue 49 item 6: a config known to run another's operations (chunked at or below its threshold is plain's one
all_gather) is measured once: said once on stderr with the measurements saved, in the dry run too, recorded as a
same_operations event, shown as '= plain' in compare's table and named in plain's group by the verdicts, never
ranked against it. Asked for chunked alone (one config), nothing is skipped."""
import pytest

from commbench.commands.chunked import chunked_answer
from commbench.commands.compare import judge
from commbench.plan import Plan
from tests.conftest import read_records, run_tool

COMMON = dict(dtype="float32", op=None, root=None, in_place=True)
PLAIN = {"case": "plain", **COMMON}
CHUNKED = {"case": "chunked", "chunk_bytes": 4 << 10, "threshold_bytes": 16 << 10, "inflight": 1, **COMMON}
SIZES = [8 << 10, 16 << 10, 64 << 10]


def test_a_plan_measures_once_what_runs_the_same_operations():
    plan = Plan(run_id="r", sizes=SIZES, configs=[PLAIN, CHUNKED], world_size=2, repeats=3)
    assert plan.stand_ins() == {(8 << 10, 1): 0, (16 << 10, 1): 0}   # at or below the 16K threshold: plain's
    steps = plan.steps()
    assert len(steps) == plan.records_expected() == 3 * 3 + 3   # plain at 3 sizes, chunked above 16K, 3 repeats
    assert {(s.size, s.cfg["case"]) for s in steps if s.cfg["case"] == "chunked"} == {(64 << 10, "chunked")}
    alone = Plan(run_id="r", sizes=SIZES, configs=[CHUNKED], world_size=2, repeats=3)
    assert alone.stand_ins() == {} and len(alone.steps()) == 9


def test_the_dry_run_says_it_once_and_counts_only_what_runs():
    args = ["compare", "--strategies", "plain,chunked", "--baseline", "plain", "-b", "8K", "-e", "64K", "-f", 2,
            "--threshold", "16K", "--chunk-size", "4K", "--place", "in", "--repeats", 3, "--dry-run"]
    proc = run_tool("commbench", *args)
    assert proc.returncode == 0, proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if "runs the same operations" in ln]
    assert said == ["note: chunked 4K x1 >16K at 8K-16K runs the same operations as plain (one all_gather of the "
                    "payload, not chunked): measured once, as plain (6 measurements saved)"], proc.stderr
    assert "(1 launch, 18 measurements of" in proc.stderr   # 4 sizes x 3 repeats of plain + 32K, 64K of chunked
    alone = run_tool("commbench", "compare", "--strategies", "chunked", "--baseline", "chunked", *args[5:])
    assert alone.returncode == 0, alone.stderr
    assert "runs the same operations" not in alone.stderr and "(1 launch, 12 measurements of" in alone.stderr


@pytest.mark.slow
def test_compare_shows_the_config_measured_once_as_the_one_measured(tmp_path):
    out = tmp_path / "c.jsonl"
    proc = run_tool("commbench", "compare", "--strategies", "ring,plain,chunked", "-b", "8K", "-e", "64K", "-f", 8,
                    "--threshold", "16K", "--chunk-size", "4K", "--place", "in", "-n", 2, "-w", 1, "--repeats", 2,
                    "--out", out)
    assert proc.returncode == 0, proc.stderr
    said = [ln for ln in proc.stderr.splitlines() if "runs the same operations" in ln]
    assert said == ["note: chunked 4K x1 >16K at 8K runs the same operations as plain (one all_gather of the "
                    "payload, not chunked): measured once, as plain (2 measurements saved)"], proc.stderr
    recs = read_records(out)
    measured = {(r["strategy"], r["size_bytes"]) for r in recs if not r.get("event")}
    assert measured == {(c, s) for c in ("ring", "plain") for s in (8 << 10, 64 << 10)} | {("chunked", 64 << 10)}
    [event] = [r for r in recs if r.get("event") == "same_operations"]
    assert event["sizes"] == [8 << 10] and event["config"]["case"] == "chunked" and event["config"]["backend"] == "gloo"
    assert event["measured_by"]["case"] == "plain"
    row = next(ln for ln in proc.stdout.splitlines() if "chunked 4K x1 >16K" in ln)   # the first table: 8K
    assert "= plain" in row and "faster" not in row and "slower" not in row, proc.stdout
    assert "plain, also standing for chunked 4K x1 >16K (the same operations)" in proc.stdout
    # the chunked command's answer reads the same groups: chunked stands in plain's group at 8K
    answer = judge(recs, chunked_answer)[-1]
    assert answer["check"] == "chunked" and answer["reason"].startswith("Answer:")


def test_a_sweeps_dry_run_says_what_it_launches_in_the_same_words():
    """The note said '6 launches saved', the estimate '3 config runs of 10.0 s each': both now count launches."""
    proc = run_tool("commbench", "sweep", "--env", "NCCL_ALGO=Ring,Tree", "-b", "1M", "-e", "1G", "--time-budget", 30,
                    "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert ("note: NCCL_ALGO is not read by gloo, which this sweep runs on: 3 configs run the same operations; each "
            "set is launched once: 3 launches (1 config x 3 rounds) instead of 9 (6 saved)") in proc.stderr
    assert ("estimated duration: about 30 s (--time-budget), start-ups included: 3 launches (1 config x 3 rounds) of "
            "10.0 s each") in proc.stderr
