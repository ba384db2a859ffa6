"""`commbench topo` detection on real systems' NVML answers (issue 40 item 6). This machine has no GPU: NVML is faked
at the pynvml boundary by tests/commbench/health/captured_pynvml.py (node health's too), which answers each call from
a real `nvidia-smi -q` capture (the same NVML queries, printed): tests/fixtures/nvidia_smi/, taken from github.com/thamada/nvidia-smi (gls/*_smi.py, commit
c4c8a463, captured 2024-11-12..14):
  h100-sxm-x8-q.txt    8 x NVIDIA H100 80GB HBM3 (SXM5), driver 565.57.01, Fabric State Completed / Success
  a100-sxm4-x4-q.txt   4 x NVIDIA A100-SXM4-80GB, driver 555.42.02, Fabric N/A (Ampere reports none)
  h100-nvl-x2-q.txt    2 x NVIDIA H100 NVL (PCIe cards), driver 550.54.14
  l40s-x1-q.txt        1 x NVIDIA L40S, driver 550.127.05
`nvidia-smi -q` prints no NVLink state: those calls answer NotSupported, as NVML does for what it cannot say, and
detection must say what it did not see."""
import re
from pathlib import Path

import pytest

from commbench.model import detect, topology
from tests.commbench.health import captured_pynvml

CAPTURES = Path(__file__).resolve().parents[2] / "fixtures" / "nvidia_smi"


@pytest.fixture
def nvml(monkeypatch):
    """pynvml answered from a capture (tests/commbench/health/captured_pynvml.py, the one stand-in for NVML):
    nvml(name) names the capture nvmlInit will read."""
    def answering(capture):
        monkeypatch.setenv("CAPTURED_NVML", str(capture))
        return captured_pynvml
    return answering


def detected(nvml, tmp_path, capture, ports=0, rate="400 Gb/sec (4X NDR)"):
    for i in range(ports):          # InfiniBand sysfs, as a DGX's CX-7 ports read
        port = tmp_path / f"class/infiniband/mlx5_{i}/ports/1"
        port.mkdir(parents=True)
        for name, text in (("rate", rate), ("state", "4: ACTIVE"), ("link_layer", "InfiniBand")):
            (port / name).write_text(text + "\n")
    (tmp_path / "class/net").mkdir(parents=True, exist_ok=True)
    return detect.detect(nvml=nvml(CAPTURES / capture), sys_root=tmp_path, tc=lambda name: None)


def test_an_h100_sxm_node_names_dgx_h100_and_not_its_h200_twin(nvml, tmp_path):
    found = detected(nvml, tmp_path, "h100-sxm-x8-q.txt", ports=8)
    fields = found["fields"]
    assert fields["gpu"] == "H100-SXM" and fields["gpus_per_node"] == 8 and fields["intra_node.fabric"] == "nvswitch"
    assert found["gpus"]["gpus"][0]["pcie"] == "Gen5 x16" and found["gpus"]["gpus"][0]["fabric_ok"] is True
    matched, _, diffs = detect.match(fields)
    assert matched.name == "dgx-h100" and diffs == []            # hgx-h200 has the same links: the GPU tells them apart
    assert "gpu H100-SXM vs H200" in detect.differences(fields, topology.resolve("hgx-h200"))
    assert "fabric manager: state completed, status success (the NVSwitch fabric is up)" in found["notes"]
    assert "NVLink: not reported by NVML; a H100-SXM has 18 NVLink4 links" in found["notes"]
    assert "intra_node.per_gpu_gbps" in detect.unreported(fields)        # what it did not see, it says


def test_a_fabric_manager_that_did_not_finish_is_named(nvml, tmp_path):
    edited = tmp_path / "h100-fabric-in-progress.txt"   # the H100 capture, every GPU's fabric state edited
    text = (CAPTURES / "h100-sxm-x8-q.txt").read_text()
    edited.write_text(re.sub(r"(\n {4}Fabric\n {8}State +:) Completed\n( {8}Status +:) Success", r"\1 In Progress\n\2 N/A",
                             text))
    assert edited.read_text() != text
    found = detect.detect(nvml=nvml(edited), sys_root=tmp_path, tc=lambda name: None)
    (note,) = [n for n in found["notes"] if n.startswith("fabric manager")]
    assert "in progress" in note and "nvidia-fabricmanager" in note and "NVLS" in note


@pytest.mark.parametrize("capture, model, fabric, closest", [
    ("a100-sxm4-x4-q.txt", "A100-SXM", "nvswitch", "dgx-a100"),
    ("h100-nvl-x2-q.txt", "H100-PCIe", "pcie", None),
    ("l40s-x1-q.txt", "L40S", "pcie", "pcie-l40s-8")])
def test_other_real_nodes_say_what_they_are_and_what_differs(nvml, tmp_path, capture, model, fabric, closest):
    found = detected(nvml, tmp_path, capture)
    fields = found["fields"]
    assert fields["gpu"] == model and fields["intra_node.fabric"] == fabric
    matched, near, diffs = detect.match(fields)
    assert matched is None and diffs                  # 4, 2 and 1 GPUs: no shipped file has that many
    if closest:
        assert near.name == closest and not any(d.startswith("gpu ") for d in diffs)
    else:                                             # an H100 PCIe card: no file of its kind
        assert all(detect.gpu_model(t.gpu) is None or detect.gpu_model(t.gpu)[0] != model
                   for t in topology.known().values())
        assert "GPU model: H100-PCIe is a PCIe card: no NVSwitch, no NVLink SHARP" in found["notes"]
    if model == "A100-SXM":
        assert "fabric manager: not reported (NVML reports the fabric state on Hopper and later)" in found["notes"]
