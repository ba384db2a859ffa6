"""A CPU backend's own cost per collective call (issue 39 item 9): a calibrated topology holds it (per_op_us), the
model adds it once per collective call on Gloo and MPI (a Gloo all_reduce once per segment its ring sends), and a
calibrated topology without it gives the model's time n/a with the reason while the link peak and util stand.
`topo --calibrate` measuring it, and the prediction against a measured small all_reduce:
tests/commbench/model/test_ceilings.py (one calibration per module)."""
import io
from dataclasses import replace

import pytest
import yaml
from rich.console import Console

from benchcore.results import schema, thresholds
from commbench.cases.case import TOTAL
from commbench.cases.registry import CASES
from commbench.model import alphabeta as model
from commbench.model import topology
from commbench.output.tables import print_collective_tables
from tests.conftest import assert_one_line_error, run_tool

CFG = {"dtype": "float32", "op": "sum", "root": 0, "in_place": True}
GLOO_US, MPI_US = 240.0, 1.5


def calibrated_file(path, **per_op):
    """A topology file as `topo --calibrate` writes one (localhost's rates taken as calibrated ceilings)."""
    data = topology.resolve("localhost").as_dict()
    data.pop("source")
    for section in ("intra_node", "inter_node"):
        data[section]["ceiling"] = "calibrated"
    data["shared_memory"] = {"per_rank_gbps": 10.0, "latency_us": 0, "ceiling": "calibrated"}
    if per_op:
        data["per_op_us"] = per_op
    path.write_text(yaml.safe_dump(data))
    return path


def predicted(name, size, topo, backend, n=2, nodes=1, cfg=None):
    return model.predict(CASES[name], {**CFG, "case": name, **(cfg or {})}, size, topo, n, nodes, backend)[TOTAL]


@pytest.fixture
def files(tmp_path):
    return (topology.load(calibrated_file(tmp_path / "with.yaml", gloo=GLOO_US, mpi=MPI_US)),
            topology.load(calibrated_file(tmp_path / "without.yaml")))


def tiers_only(topo):
    """The same rates as ceilings of another kind (tc): a topology the model takes per-step latencies from only."""
    return replace(topo, per_op_us=(), intra_ceiling="tc", inter_ceiling="tc", shm_ceiling="tc")


def test_the_per_op_cost_of_a_topology_file_is_the_latency_term_of_its_backend(files):
    topo, _ = files
    assert (topo.own_cost_us("gloo"), topo.own_cost_us("mpi"), topo.own_cost_us("nccl")) == (GLOO_US, MPI_US, None)
    assert topology.validate({**topo.as_dict(), "source": None}, "again").per_op_us == topo.per_op_us  # the plan's copy
    links = tiers_only(topo)
    for backend, own in (("gloo", GLOO_US), ("mpi", MPI_US)):
        for n in (2, 4):     # once per call, whatever the steps: 4 ranks pay the per-step latency 6 times, it once
            assert predicted("all_reduce", 4, topo, backend, n).time_us == pytest.approx(
                own + predicted("all_reduce", 4, links, backend, n).time_us), (backend, n)
    assert predicted("all_reduce", 4, links, "gloo").time_us == pytest.approx(2 * topo.intra_latency_us, rel=0.01)
    # a strategy of two collective calls (reduce_scatter, then all_gather) pays it twice
    rsag = model.predict(CASES["rs-ag"], {**CFG, "case": "rs-ag"}, 8, topo, 2, 1, "gloo")
    plain = model.predict(CASES["rs-ag"], {**CFG, "case": "rs-ag"}, 8, links, 2, 1, "gloo")
    assert rsag[TOTAL].time_us == pytest.approx(plain[TOTAL].time_us + 2 * GLOO_US)
    # a pipelined chunked all_gather pays it per wave of chunks (Phase.calls)
    cfg = {"chunk_bytes": 1024, "threshold_bytes": 0, "inflight": 1}
    waves = CASES["chunked"].model({**CFG, "case": "chunked", **cfg}, 64 << 10, model.Shape(2, 2, 1), "gloo")[TOTAL]
    assert waves.calls > 1
    assert predicted("chunked", 64 << 10, topo, "gloo", cfg=cfg).time_us == pytest.approx(
        predicted("chunked", 64 << 10, links, "gloo", cfg=cfg).time_us + waves.calls * GLOO_US)
    # NCCL on a GPU topology: its own tuner's latencies, no CPU backend's cost
    dgx = topology.resolve("dgx-h100")
    assert predicted("all_reduce", 4, dgx, "nccl", 8).time_us == predicted(
        "all_reduce", 4, replace(dgx, per_op_us=(("gloo", 1e6),)), "nccl", 8).time_us


def test_a_calibrated_file_without_the_cost_gives_the_time_na_with_the_reason_and_keeps_util(files):
    _, old = files
    for backend in ("gloo", "mpi"):
        fields = model.record_fields(old, CASES["all_reduce"], {**CFG, "case": "all_reduce"}, TOTAL, 1024, 2, 1,
                                     backend, 0.001)
        assert fields["predicted_time_us"] is None and f"no per_op_us.{backend}" in fields["predicted_time_reason"]
        assert fields["link_peak_gbps"] > 0
        assert fields["link_utilization"] == pytest.approx(0.001 / fields["link_peak_gbps"])
        assert schema.problems(schema.measurement("commbench", **fields)) == []
    rsag = model.predict(CASES["rs-ag"], {**CFG, "case": "rs-ag"}, 8, old, 2, 1, "gloo")
    assert {p.time_us for p in rsag.values()} == {None} and all(p.time_reason for p in rsag.values())
    # a topology whose ceilings are not calibrated has per-step latencies only (a tc-shaped link's): as before
    assert predicted("all_reduce", 1024, tiers_only(old), "gloo").time_us > 2 * old.intra_latency_us
    assert predicted("all_reduce", 1024, tiers_only(old), "gloo").time_reason is None


def test_a_run_s_table_says_why_the_model_s_time_is_na(files):
    _, old = files
    fields = model.record_fields(old, CASES["all_reduce"], {**CFG, "case": "all_reduce"}, TOTAL, 8, 2, 1, "gloo",
                                 0.0001)
    rec = schema.measurement("commbench", run_id="r", collective="all_reduce", size_bytes=8, count=2, dtype="float32",
                             op="sum", in_place=True, blocking=True, time_us=90.0, algbw_gbps=0.0001,
                             busbw_gbps=0.0001, wrong=0, world_size=2, nodes=1, backend="gloo", **fields)
    text = io.StringIO()
    print_collective_tables([rec], Console(file=text, width=200))
    assert "# model us n/a        : topology localhost has no per_op_us.gloo" in text.getvalue()
    out = thresholds.judge(thresholds.parse("time <= 1.5 x model at 8", "commbench"), [rec])  # skipped, saying why
    assert out.skipped and out.passed and "no per_op_us.gloo" in out.message
    assert not thresholds.judge(thresholds.parse("busbw >= 2 x link peak at 8", "commbench"), [rec]).passed


def test_the_model_command_shows_the_cost_and_the_reason(tmp_path):
    mine = calibrated_file(tmp_path / "cmd.yaml", gloo=GLOO_US)
    proc = run_tool("commbench", "model", "--topology", mine, "--collective", "all_reduce", "-b", "8", "-e", "8",
                    "--format", "json")
    assert proc.returncode == 0, proc.stderr
    row = yaml.safe_load(proc.stdout)
    # 8 B is 2 float32 elements: Gloo's ring sends 2 segments, each its own cost (alphabeta.gloo_segments)
    assert row["predicted_time_us"] == pytest.approx(2 * GLOO_US + 2 * topology.load(mine).intra_latency_us, rel=0.01)
    proc = run_tool("commbench", "model", "--topology", mine, "--collective", "all_reduce", "-b", "8", "-e", "8",
                    "--backend", "mpi")
    assert proc.returncode == 0, proc.stderr
    assert "n/a: topology localhost has no per_op_us.mpi" in proc.stdout and "where mpi4py is installed" in proc.stdout


@pytest.mark.parametrize("per_op, field", [({"nccl": 3.0}, "unknown field 'per_op_us.nccl'"),
                                           ({"gloo": -1}, "per_op_us.gloo: expected microseconds in 0..1e+06"),
                                           ({"gloo": ".nan"}, "per_op_us.gloo")])
def test_a_bad_per_op_cost_is_refused_in_one_line(tmp_path, per_op, field):
    path = calibrated_file(tmp_path / "bad.yaml", **per_op)
    if per_op.get("gloo") == ".nan":
        path.write_text(path.read_text().replace("'.nan'", ".nan"))
    assert_one_line_error(run_tool("commbench", "model", "--topology", path), field)
