"""`commbench accept --init` (issue 25, item 4): each threshold is a stated margin under the model, written with its
margin and reason; the bandwidth check starts where the model reaches 0.9 of its busbw at 16G (issue 40: an NVLS
run's ceiling is not its level), and the published references give their own thresholds with their sources."""
import pytest

from benchcore.units import parse_size, size_range
from commbench.cases.case import TOTAL
from commbench.cases.registry import CASES
from commbench.commands.accept import spec as accept_spec
from commbench.model import topology
from commbench.model.alphabeta import predict
from tests.conftest import ROOT, assert_one_line_error, run_tool

H100 = topology.resolve("dgx-h100")
LOCALHOST = ROOT / "acceptance" / "localhost.yaml"
CFG = {"case": "all_reduce", "dtype": "float32", "op": "sum", "root": 0, "in_place": True}


def model(size):
    return predict(CASES["all_reduce"], CFG, size, H100, 16, 2, "nccl", {})[TOTAL]


def record(pred, size):
    """A record that measured exactly what the model predicts."""
    return {"size_bytes": size, "time_us": pred.time_us, "busbw_gbps": pred.busbw_gbps,
            "predicted_time_us": pred.time_us}


def test_init_thresholds_are_stated_margins_under_the_model(tmp_path):
    proc = run_tool("commbench", "accept", "--init", "--topology", "dgx-h100", "--nodes", "2")
    assert proc.returncode == 0, proc.stderr
    path = tmp_path / "spec.yaml"
    path.write_text(proc.stdout)
    checks = {c.name: c for c in accept_spec.load_spec(path).checks}

    bw = checks["all_reduce-bandwidth"]
    (busbw,) = [t for t, _ in bw.thresholds if t.field == "busbw_gbps" and t.reference == "model"]
    assert (busbw.reference, busbw.op, busbw.at_op) == ("model", ">=", ">=") and busbw.value < 1
    start, end = parse_size(bw.values["min_bytes"]), parse_size(bw.values["max_bytes"])
    assert busbw.at_bytes == start
    level = [model(s).busbw_gbps / model(16 << 30).busbw_gbps for s in (start // 2, start)]
    assert level[0] < 0.9 <= level[1]        # where the model first reaches 0.9 of its busbw at 16G
    for size in size_range(start, end, 2):   # at every size it runs: the margin x the model's busbw there
        pred = model(size)
        assert busbw.applies(record(pred, size))
        assert busbw.expected(record(pred, size)) == pytest.approx(busbw.value * pred.busbw_gbps)
    assert f"Margin: {busbw.value} x the model's busbw" in proc.stdout
    assert f"({100 - busbw.value * 100:.0f} % under" in proc.stdout and f"NCCL {model(start).algo}" in proc.stdout

    lat = checks["all_reduce-latency"]
    (time,) = [t for t, _ in lat.thresholds if t.field == "time_us"]
    assert (time.reference, time.op, time.at_op) == ("model", "<=", "<=") and time.value > 1
    assert time.at_bytes == parse_size(lat.values["max_bytes"])
    small = model(8)
    assert 10 <= small.time_us < 100         # tens of us (the ring-only model said 288 us)
    assert time.expected(record(small, 8)) == pytest.approx(time.value * small.time_us)
    assert f"8-byte time is {small.time_us:.1f} us, NCCL {small.algo}" in proc.stdout
    assert f"Margin: {time.value:g} x the model's time" in proc.stdout


@pytest.mark.parametrize("args, needle", [
    (["--init", "--topology", "dgx-h100", "--out", "spec.yaml"], "--out: not with --init, which prints"),
    (["--init", "--topology", "dgx-h100", "--spec", "s.yaml", "--dry-run"], "--spec, --dry-run: not with --init"),
    (["--init", "--nodes", "2"], "--init needs --topology"),
    (["--spec", str(LOCALHOST), "--topology", "dgx-h100", "--dry-run"], "--topology: only with --init"),
    (["--spec", str(LOCALHOST), "--nodes", "2"], "--nodes: only with --init"),
])
def test_options_of_init_and_of_a_run_are_never_silently_ignored(tmp_path, args, needle):
    """`--init --out spec.yaml` wrote nothing and said nothing; --topology beside --spec was ignored."""
    assert_one_line_error(run_tool("commbench", "accept", *args, cwd=tmp_path), needle)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("topo, nodes, line, source", [
    ("dgx-h100", 1, "busbw >= 460 at 16G", "azurehpc-health-checks/blob/main/conf/nd96isr_h100_v5.conf"),
    ("dgx-b200", 1, "busbw >= 754 at 8G", "stas00/ml-engineering"),          # 0.9 x the published NVLS 838
    ("dgx-h100", 2, "busbw >= 387 at 8G", "NVIDIA/nccl/issues/1221"),        # 0.9 x NVLSTree's 430 on 2 nodes
    ("pcie-l40s-8", 1, "Published: none for this system", None)])
def test_init_thresholds_come_from_the_published_references_with_their_source(tmp_path, topo, nodes, line, source):
    proc = run_tool("commbench", "accept", "--init", "--topology", topo, "--nodes", str(nodes))
    assert proc.returncode == 0, proc.stderr
    assert line in proc.stdout and (source is None or source in proc.stdout)
    path = tmp_path / "spec.yaml"
    path.write_text(proc.stdout)
    checks = {c.name: c for c in accept_spec.load_spec(path).checks}
    assert checks["all_reduce-expected-level"].kind == "expected"
