"""Topology files, detection and the alpha-beta model (issue 12).

NVML and InfiniBand sysfs are hardware this machine lacks: the tests that need them fake NVML at the
pynvml call boundary (FakeNVML below stands in for the pynvml module) and InfiniBand with a fake
/sys tree, and say so. The no-driver path, Ethernet interfaces and tc shaping run for real (tc in
tests/netns/test_model.py, which needs root).
"""
import io
import json
import math
import os
import re
import subprocess
import sys

import pytest
from rich.console import Console

from benchcore.errors import UserError
from commbench.cases.case import TOTAL
from commbench.cases.registry import CASES
from commbench.commands.model import fit
from commbench.model import alphabeta as model
from commbench.model import detect, nccl, topology
from commbench.output.tables import print_collective_tables
from tests.conftest import assert_one_line_error, run_tool

FILES = sorted(topology.DIR.glob("*.yaml"))
CFG = {"dtype": "float32", "op": "sum", "root": 0, "in_place": True}


def test_every_topology_file_loads_and_cites_its_source():
    names = {topology.load(p).name for p in FILES}
    assert {"dgx-a100", "dgx-h100", "hgx-h200", "pcie-l40s-8", "gb200-nvl72", "localhost"} <= names
    for path in FILES:
        comments = [ln for ln in path.read_text().splitlines() if ln.startswith("#")]
        assert any(re.search(r"https?://", ln) for ln in comments), f"{path.name} cites no source"
    assert topology.resolve("pcie-l40s-8").fabric == "pcie"
    assert topology.resolve(str(FILES[0])).name == topology.load(FILES[0]).name


GOOD = topology.DIR / "dgx-h100.yaml"


@pytest.mark.parametrize("edit, field", [
    (lambda t: t.replace("  per_nic_gbps: 50", "  per_nic_gbps: fast"), "inter_node.per_nic_gbps"),
    (lambda t: t.replace("gpus_per_node: 8\n", ""), "gpus_per_node"),
    (lambda t: t.replace("fabric: nvswitch", "fabric: smoke-signals"), "intra_node.fabric"),
    (lambda t: t.replace("rank_to_nic: rail", "rank_to_nic: diagonal"), "inter_node.rank_to_nic"),
    (lambda t: t + "colour: green\n", "colour"),
    (lambda t: t.replace("  latency_us: 9.6", "  latency_us: -1"), "inter_node.latency_us"),
])
def test_broken_file_is_refused_naming_file_and_field(tmp_path, edit, field):
    bad = tmp_path / "broken.yaml"
    bad.write_text(edit(GOOD.read_text()))
    with pytest.raises(UserError) as err:
        topology.resolve(str(bad))
    assert str(bad) in str(err.value) and field in str(err.value)


def test_broken_file_on_the_command_line_is_one_line(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text(GOOD.read_text().replace("  per_gpu_gbps: 450", "  per_gpu_gbps: [1, 2]"))
    assert_one_line_error(run_tool("commbench", "model", "--topology", bad), "intra_node.per_gpu_gbps")
    bad.write_text("name: [unclosed\n")
    assert_one_line_error(run_tool("commbench", "model", "--topology", bad), "not valid YAML")
    assert_one_line_error(run_tool("commbench", "run", "--topology", "no-such-system", "--dry-run"), "no-such-system")
    assert_one_line_error(run_tool("commbench", "model", "--fit", tmp_path / "missing.jsonl"), "no such file")


def test_numbers_written_with_an_exponent_are_numbers(tmp_path):
    """PyYAML (YAML 1.1) reads 1e3 and 1.5E-1 as text; a topology file means the numbers."""
    text = GOOD.read_text().replace("per_gpu_gbps: 450", "per_gpu_gbps: 1e3")
    mine = tmp_path / "exp.yaml"
    mine.write_text(text.replace("latency_us: 9.6", "latency_us: 9.6E0").replace("nic_gbps: 50", "nic_gbps: +5e1"))
    topo = topology.resolve(str(mine))
    assert (topo.intra_gbps, topo.inter_latency_us, topo.nic_gbps) == (1000.0, 9.6, 50.0)
    mine.write_text(text.replace("name: dgx-h100", "name: 1e3"))
    assert topology.resolve(str(mine)).name == "1e3"   # a text field keeps its text


def predicted(name, size, topo, n, nodes, backend="nccl", cfg=None, env=None):
    return model.predict(CASES[name], {**CFG, **(cfg or {})}, size, topo, n, nodes, backend, env)


RING_SIMPLE = {"NCCL_ALGO": "Ring", "NCCL_PROTO": "Simple"}   # NCCL held to one pair: its bandwidth is the links'


def ring_us(collective, n, nodes):
    """NCCL's own latency of one Ring/Simple call (commbench/model/nccl.py; tests/commbench/model/test_nccl.py)."""
    return nccl.latency_us(collective, "Ring", "Simple", n, nodes, "nvlink")


H100 = topology.resolve("dgx-h100")
A_NET, A_NVL = 9.6, 3.4           # us per step (the file's latencies)
B_NODE = 8 * 50e9 * 0.96          # B/s: 8 rail NICs of 400 Gb/s per node, at the 96 % NCCL reaches (issue #119)
B_NCCL = 18 * 20.6e9              # NVLink4 as NCCL credits it: 18 links x SM90_NVLINK_BW (src/graph/topo.h v2.27.7)


@pytest.mark.parametrize("size", [1 << 20, 64 << 20, 1 << 30, 8 << 30])
@pytest.mark.parametrize("nodes", [1, 2, 4, 16])
def test_ring_all_reduce_and_all_gather_by_hand(size, nodes):
    """The tier model's bandwidth arithmetic, under NCCL held to Ring/Simple (whose latency is NCCL's own)."""
    n = 8 * nodes
    if nodes == 1:   # NVSwitch only: 2(n-1) alpha + 2(n-1)/n S / B, at NCCL's rate; the peak is the datasheet's
        ar = ring_us("all_reduce", n, nodes) + 2 * (n - 1) / n * size / B_NCCL * 1e6
        ag = ring_us("all_gather", n, nodes) + (n - 1) / n * size / B_NCCL * 1e6
        tier, peak = "intra-node", 450
    else:            # the node's 8 NICs carry the ring's bus bytes; NVLink carries (n-M)/n of them, faster
        ar = ring_us("all_reduce", n, nodes) + 2 * (n - 1) / n * size / B_NODE * 1e6
        ag = ring_us("all_gather", n, nodes) + (n - 1) / n * size / B_NODE * 1e6
        tier, peak = "inter-node", 400
    for name, want in (("all_reduce", ar), ("ring", ar), ("all_gather", ag), ("plain", ag)):
        got = predicted(name, size, H100, n, nodes, env=RING_SIMPLE)[TOTAL]
        assert got.time_us == pytest.approx(want, rel=1e-9), name
        assert got.tier == tier and got.peak_gbps == pytest.approx(peak)


@pytest.mark.parametrize("size", [16 << 20, 1 << 30, 4 << 30])
@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_hierarchical_by_hand(size, nodes):
    local = 8
    rs = ring_us("reduce_scatter", local, 1) + (local - 1) / local * size / B_NCCL * 1e6   # inside the node, NVLink
    ar = ring_us("all_reduce", nodes, nodes) + 2 * (nodes - 1) / nodes * size / B_NODE * 1e6  # 8 shards over 8 NICs
    got = predicted("hierarchical", size, H100, local * nodes, nodes, env=RING_SIMPLE)
    assert got["reduce_scatter"].time_us == pytest.approx(rs) and got["all_gather"].time_us == pytest.approx(rs)
    assert got["all_reduce"].time_us == pytest.approx(ar)
    assert got[TOTAL].time_us == pytest.approx(2 * rs + ar)
    assert got["reduce_scatter"].tier == "intra-node" and got["all_reduce"].tier == "inter-node"


def test_hierarchical_on_shaped_namespaces_by_hand():
    """What selftest model checks: Gloo, loopback shared by both local ranks (reduce_scatter moves an
    all_reduce), one shaped eth0 carrying both inter-node groups at the TCP payload rate."""
    topo = topology.Topology("netns", 0, "loopback", 0.0625, 0.0, 1, 0.125, 0.0, "shared", 1448 / 1514)
    size = 16 << 20
    lo, link = 0.0625e9, 0.125e9 * 1448 / 1514
    rs = 2 * size / lo          # all_reduce of S on 2 ranks: S per rank, 2 S through the one queue
    ag = size / lo              # (L-1)/L S per rank, 2 ranks
    ar = size / link            # 2 groups x 2(M-1)/M (S/2) through one NIC
    got = predicted("hierarchical", size, topo, 4, 2, backend="gloo")
    assert got[TOTAL].time_us == pytest.approx((rs + ag + ar) * 1e6)
    ring = predicted("all_reduce", 64 << 20, topo, 2, 2, backend="gloo")[TOTAL]
    assert ring.busbw_gbps == pytest.approx(0.125 * 1448 / 1514) and ring.tier == "inter-node"


def test_chunked_pays_latency_per_wave_and_plain_is_one_all_gather():
    n, size, chunk = 32, 1 << 30, 2 << 20
    cfg = {"chunk_bytes": chunk, "threshold_bytes": 16 << 20, "inflight": 4}
    chunks = size // chunk
    want = math.ceil(chunks / 4) * ring_us("all_gather", n, 4) + (n - 1) / n * size / B_NODE * 1e6
    assert predicted("chunked", size, H100, n, 4, cfg=cfg, env=RING_SIMPLE)[TOTAL].time_us == pytest.approx(want)
    below = predicted("chunked", 8 << 20, H100, n, 4, cfg=cfg)[TOTAL]
    assert below == predicted("plain", 8 << 20, H100, n, 4)[TOTAL]


def test_every_registry_row_has_a_model():
    cfg = {**CFG, "chunk_bytes": 2 << 20, "threshold_bytes": 16 << 20, "inflight": 2, "compress": "fp8",
           "buckets": 4}
    for name, case in CASES.items():
        got = model.predict(case, cfg, 64 << 20, H100, 16, 2, "nccl")
        # an overlap pattern's model is its communication's; the overlapped time is its schedule replayed over
        # that and the measured compute (commbench/cases/overlap.py), on the total record
        assert set(got) == ({"comm"} if case.kind == "overlap" else set(case.phases)), name
        assert all(p.time_us > 0 and p.peak_gbps > 0 for p in got.values()), name


def test_fit_recovers_alpha_and_beta_of_records_the_model_made():
    """The fit's arithmetic: records whose times are alpha-beta by hand (labelled as such, not measurements)
    give back the topology's alpha and node bandwidth, with zero error per size."""
    recs = [{"collective": "all_reduce", "size_bytes": s, "world_size": 16, "nodes": 2, "backend": "nccl",
             "dtype": "float32", "time_us": 30 * A_NET + 30 / 16 * s / B_NODE * 1e6}
            for s in (1 << 20, 16 << 20, 256 << 20, 1 << 30)]
    tiers, rows = fit(recs, H100)
    assert tiers[0]["tier"] == "inter-node"
    # the node bandwidth the times were made with: the NICs' 400 GB/s at the 96 % NCCL reaches
    assert tiers[0]["alpha_us"] == pytest.approx(A_NET) and tiers[0]["gbps"] == pytest.approx(B_NODE / 1e9) == 384
    assert all(abs(r["error"]) < 1e-9 for r in rows)


class FakeNVML:
    """Stands in for the pynvml module (this machine has no GPU): a DGX H100-like node, 8 GPUs, 18 active
    NVLink4 links each, every pair joined by NVLink through NVSwitch, GPUs 0-3 on NUMA node 0."""
    NVML_NVLINK_MAX_LINKS = 18
    NVML_P2P_CAPS_INDEX_NVLINK = 2
    NVML_P2P_STATUS_OK = 0

    class NVMLError(Exception):
        pass

    def __init__(self, gpus=8, links=18, nvlink=True, name="NVIDIA H100 80GB HBM3"):
        self.gpus, self.links, self.nvlink, self.name, self.calls = gpus, links, nvlink, name, []

    def nvmlInit(self):
        self.calls.append("init")

    def nvmlShutdown(self):
        self.calls.append("shutdown")

    def nvmlDeviceGetCount(self):
        return self.gpus

    def nvmlDeviceGetHandleByIndex(self, i):
        return i

    def nvmlDeviceGetName(self, h):
        return self.name

    def nvmlDeviceGetMemoryInfo(self, h):
        return type("Mem", (), {"total": 80 << 30})()

    def nvmlDeviceGetPciInfo(self, h):
        return type("Pci", (), {"busId": f"00000000:{0x18 + h:02X}:00.0".encode()})()

    def nvmlDeviceGetNvLinkState(self, h, link):
        if link >= self.links:
            raise self.NVMLError("Not Supported")
        return 1

    def nvmlDeviceGetNvLinkVersion(self, h, link):
        return 4

    def nvmlDeviceGetP2PStatus(self, a, b, index):
        return 0 if self.nvlink else 4

    def nvmlDeviceGetTopologyCommonAncestor(self, a, b):
        return 40 if a // 4 == b // 4 else 50

    def nvmlDeviceGetNumaNodeId(self, h):
        return h // 4

    def nvmlDeviceGetCpuAffinity(self, h, words):
        return [0xFFFF << (16 * (h // 4))] + [0] * (words - 1)

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return 5

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return 16


def fake_sys(tmp_path, ports=8, rate="400 Gb/sec (4X NDR)", link_layer="InfiniBand"):
    """A fake /sys with InfiniBand HCAs (this machine has none) and one Ethernet NIC."""
    for i in range(ports):
        port = tmp_path / f"class/infiniband/mlx5_{i}/ports/1"
        port.mkdir(parents=True)
        (port / "rate").write_text(rate + "\n")
        (port / "state").write_text("4: ACTIVE\n")
        (port / "link_layer").write_text(link_layer + "\n")
    eth = tmp_path / "class/net/eno1"
    eth.mkdir(parents=True)
    for name, value in (("speed", "100000"), ("mtu", "9000"), ("operstate", "up"), ("type", "1")):
        (eth / name).write_text(value + "\n")
    (tmp_path / "devices/system/node/node0").mkdir(parents=True)
    (tmp_path / "devices/system/node/node0/cpulist").write_text("0-15\n")
    return tmp_path


def test_fake_nvml_and_infiniband_sysfs_match_dgx_h100(tmp_path):
    nvml = FakeNVML()
    found = detect.detect(nvml=nvml, sys_root=fake_sys(tmp_path), tc=lambda name: None)
    assert nvml.calls == ["init", "shutdown"]
    gpus = found["gpus"]["gpus"]
    assert len(gpus) == 8 and gpus[0]["name"] == "NVIDIA H100 80GB HBM3" and gpus[0]["nvlink_gbps"] == 450
    assert gpus[5]["numa_node"] == 1 and gpus[5]["cpu_affinity"] == "16-31" and gpus[0]["pcie"] == "Gen5 x16"
    assert found["gpus"]["paths"][0][:3] == ["X", "NV18", "NV18"]
    assert [p["gbit"] for p in found["ib"]] == [400.0] * 8
    matched, _, diffs = detect.match(found["fields"])
    assert matched.name == "dgx-h100" and diffs == []
    assert detect.in_effect(found["fields"]).name == "dgx-h100"


def test_fake_pcie_node_with_fewer_nics_is_unknown_naming_what_differs(tmp_path):
    nvml = FakeNVML(links=0, nvlink=False, name="NVIDIA L40S")
    found = detect.detect(nvml=nvml, sys_root=fake_sys(tmp_path, ports=2, rate="200 Gb/sec (4X HDR)",
                                                       link_layer="Ethernet"), tc=lambda name: None)
    assert found["gpus"]["paths"][0][1:5] == ["NODE", "NODE", "NODE", "SYS"]
    fields = found["fields"]
    assert fields["intra_node.fabric"] == "pcie" and fields["inter_node.rank_to_nic"] == "shared"
    matched, closest, diffs = detect.match(fields)
    assert matched is None and closest.name == "pcie-l40s-8"
    assert diffs == ["intra_node.per_gpu_gbps 63.008 vs 32", "inter_node.nics_per_node 2 vs 4"]
    effect = detect.in_effect(fields)
    assert effect.name == "detected" and effect.nics_per_node == 2 and effect.intra_latency_us == 5.7


def test_no_driver_here_says_so_in_one_line_and_shows_cpu_and_network():
    proc = run_tool("commbench", "topo")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("GPUs: none: no NVIDIA driver (") and lines[1].startswith("CPU: ")
    assert "topology: localhost (matches" in proc.stdout
    found = json.loads(run_tool("commbench", "topo", "--json").stdout)
    assert found["gpus"] is None and found["match"] == "localhost"


def test_ethernet_interfaces_read_for_real_from_sysfs():
    listed = {i["ifname"]: i for i in json.loads(subprocess.run(["ip", "-j", "link", "show"], capture_output=True,
                                                                  text=True, check=True).stdout)}
    found = {i["name"]: i for i in detect.interfaces()}
    assert set(found) == set(listed)
    for name, i in found.items():
        assert i["mtu"] == listed[name]["mtu"] and i["loopback"] == (listed[name].get("link_type") == "loopback")


def test_model_command_json_and_strategy_summary():
    proc = run_tool("commbench", "model", "--topology", "dgx-h100", "--nodes", "4", "--collective", "all_reduce",
                    "-b", "1M", "-e", "8G", "-f", "8", "--format", "json")
    rows = [json.loads(ln) for ln in proc.stdout.splitlines()]
    assert proc.returncode == 0 and [r["size_bytes"] for r in rows] == [1 << 20, 8 << 20, 64 << 20, 512 << 20, 4 << 30]
    assert all(r["world_size"] == 32 and r["link_tier"] == "inter-node" for r in rows)
    assert rows[-1]["predicted_time_us"] == pytest.approx(predicted("all_reduce", 4 << 30, H100, 32, 4)[TOTAL].time_us)
    proc = run_tool("commbench", "model", "--topology", "dgx-h100", "--nodes", "4", "--strategies", "ring,chunked",
                    "--chunk-size", "2M,8M", "--threshold", "64M", "--inflight", "1,4", "-b", "16M", "-e", "1G",
                    "-f", "8")
    assert proc.returncode == 0, proc.stderr
    assert "chunked: model's pick" in proc.stdout
    assert "chunked runs plain all_gather (at or below its threshold) at: 16M" in proc.stdout


def test_model_strategies_never_credit_chunked_for_what_plain_runs():
    """Issue 25 item 5: at or below its threshold chunked is one plain all_gather (the same work, which compare's
    verdicts never rank): the model reports it as plain, and never says chunked beats ring there."""
    args = ("model", "--topology", "dgx-h100", "--nodes", "2", "--strategies", "ring,chunked", "-b", "1M", "-e", "256M",
            "-f", "4")
    rows = [json.loads(ln) for ln in run_tool("commbench", *args, "--format", "json").stdout.splitlines()]
    below = {r["size_bytes"] for r in rows if r["strategy"] == "chunked" and r["size_bytes"] <= 16 << 20}
    assert below == {1 << 20, 4 << 20, 16 << 20}
    for r in rows:
        if r["strategy"] == "chunked":
            assert r["runs_plain"] == (r["size_bytes"] in below) and r["case"].endswith("(= plain)") == r["runs_plain"]
            if r["runs_plain"]:   # the same time as plain all_gather's
                plain = predicted("plain", r["size_bytes"], H100, 16, 2)[TOTAL]
                assert r["predicted_time_us"] == pytest.approx(plain.time_us)
    proc = run_tool("commbench", *args)
    assert proc.returncode == 0, proc.stderr
    beats = re.search(r"beats ring at: (.*)", proc.stdout)
    assert not beats or not {"1M", "4M", "16M"} & {s.strip() for s in beats.group(1).split(",")}
    assert "chunked runs plain all_gather (at or below its threshold) at: 1M, 4M, 16M" in proc.stdout


@pytest.mark.slow
def test_records_carry_topology_prediction_and_utilization(tmp_path):
    """One real 2-rank Gloo launch: every record names the topology detected here (localhost), whose loopback rate
    is a reference, not a ceiling: util and model time n/a, and the reason (issue 25 item 1)."""
    out = tmp_path / "r.jsonl"
    proc = run_tool("commbench", "run", "--collective", "all_reduce,all_gather", "--place", "in", "-b", "1M", "-e",
                    "4M", "-f", "4", "-n", "2", "-w", "1", "--out", out, "--format", "json")
    assert proc.returncode == 0, proc.stderr
    from tests.conftest import read_records
    recs = read_records(out)
    local = topology.resolve("localhost")
    assert len(recs) == 4
    for rec in recs:
        want = predicted(rec["collective"], rec["size_bytes"], local, 2, 1, backend="gloo")[TOTAL]
        assert rec["topology"] == "localhost" and rec["link_tier"] == "intra-node" and rec["busbw_gbps"] > 0
        assert rec["predicted_time_us"] is None and rec["link_peak_gbps"] is None and rec["link_utilization"] is None
        assert rec["link_peak_reason"] == want.reason and "not a ceiling" in want.reason
    text = io.StringIO()
    print_collective_tables(recs, Console(file=text, width=200))
    assert "# util, model us n/a  : topology localhost's intra-node rate 1.6 GB/s is a reference" in text.getvalue()


def test_cli_start_imports_neither_torch_nor_pynvml():
    code = "import sys, commbench.commands.cli; sys.exit(1 if {'torch', 'pynvml', 'numpy'} & set(sys.modules) else 0)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


@pytest.mark.skipif(os.geteuid() != 0, reason="sets a host name in a UTS namespace of its own")
def test_a_host_name_holding_a_newline_stays_in_its_comment_of_the_calibrated_file():
    """`topo --calibrate --out` wrote the host name into a comment: a name holding a newline started a line of YAML
    of its own choosing (issue 38 item 6). Run in a UTS namespace whose host name is such a name."""
    code = ("import socket, yaml; from commbench.model import calibrate; "
            "socket.sethostname('evil\\nintra_node: {per_gpu_gbps: 9999}'); "
            "text = calibrate.file_text({'notes': [], 'data': {'name': 'x'}}); print(repr(yaml.safe_load(text)))")
    done = subprocess.run(["unshare", "--uts", sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "{'name': 'x'}"


@pytest.mark.parametrize("old, new, field", [
    ("  per_gpu_gbps: 450", "  per_gpu_gbps: 1e-320", "intra_node.per_gpu_gbps: expected a GB/s in 0.001..100000"),
    ("  per_nic_gbps: 50", "  per_nic_gbps: 1e6", "inter_node.per_nic_gbps: expected a GB/s in 0.001..100000"),
    ("  latency_us: 9.6", "  latency_us: 1e7", "inter_node.latency_us: expected microseconds in 0..1e+06"),
])
def test_rates_and_latencies_outside_what_a_link_can_be_are_refused(tmp_path, old, new, field):
    """N21: a subnormal rate passed "finite > 0" and made the model's time inf and its busbw 0.00."""
    bad = tmp_path / "t.yaml"
    text = GOOD.read_text()
    assert old in text
    bad.write_text(text.replace(old, new))
    done = run_tool("commbench", "model", "--topology", bad, "--nodes", 2, "--collective", "all_reduce", "-b", "1M",
                    "-e", "1G", "-f", 32)
    assert_one_line_error(done, f"topology file {bad}: field {field}")
    assert new.split(": ")[1] not in done.stderr


def test_model_strategies_table_keeps_every_case_name_whole_within_100_columns():
    """issue 49 item 7: `model --strategies` wrapped strategy names ('chunked 512K' / 'x1 >16M (=' / 'plain)')."""
    out = run_tool("commbench", "model", "--topology", "dgx-h100", "--nodes", "4", "--strategies",
                   "ring,chunked,hierarchical", "--chunk-size", "512K,2M,8M", env={"COLUMNS": "100"})
    lines = out.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    for name in ("chunked 512K x1 >16M *", "chunked 8M x1 >16M *", "hierarchical"):
        assert any(name in line for line in lines), name
    assert "* chunked runs plain all_gather (at or below its threshold) at: 1M" in out.stdout
