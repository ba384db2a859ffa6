"""`commbench node` on this machine (no GPU, no InfiniBand: for real) and on captured systems through the NVML and
sysfs boundary (conftest.py): each verdict class reached from captured data, or from a capture edited to the failing
value where no public capture shows it (tests/fixtures/nvidia_smi/SOURCES.md says which lines were edited)."""
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from commbench.health.survey import failing, survey
from tests.commbench.health.conftest import IB, KLOG, hooks

SECONDS = 0.3


def rows(result, subject):
    found = dict([("node", result["node"])] + result["gpus"] + result["ports"])
    key = next(k for k in found if k == subject or k.startswith(subject + " "))
    return {r["item"]: (r["verdict"], r["value"]) for r in found[key]}


def commbench(*args, env=None):
    return subprocess.run([sys.executable, "-m", "commbench.commands.cli", "node", *args], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **(env or {})})


@pytest.mark.slow
def test_this_machine_has_no_gpu_and_no_ib_and_says_so():
    """For real: no hook, the real pynvml (no driver here), the real /sys and /dev/kmsg."""
    if Path("/sys/class/infiniband").exists():
        pytest.skip("this machine has an InfiniBand class")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMBENCH_TEST")}
    p = subprocess.run([sys.executable, "-m", "commbench.commands.cli", "node", "--format", "json"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr
    recs = [json.loads(line) for line in p.stdout.splitlines()]
    verdict = recs[-1]
    assert verdict["event"] == "verdict" and verdict["passed"] is None and verdict["bad_nodes"] == []
    assert "nothing to check here: GPUs: none: no NVIDIA driver" in verdict["reason"]
    assert "InfiniBand: no port (no /sys/class/infiniband)" in verdict["reason"]
    assert {r["item"]: r["health"] for r in recs[:-1]} == {"GPUs": "unknown", "InfiniBand ports up": "ok"}


def test_an_h100_node_with_its_ib_ports_is_healthy(captured):
    captured("h100-sxm-x8-q.txt", sysfs=IB / "gpud-h100", kmsg=KLOG / "gpud-dmesg-xid-119.log")
    result = survey("quick", SECONDS)
    assert failing(result) == [] and len(result["gpus"]) == 8 and len(result["ports"]) == 9
    assert rows(result, "node") == {"GPUs": ("ok", "8"),
                                    "InfiniBand ports up": ("ok", "8 InfiniBand ports LinkUp at >= 400 Gb/s of 8")}
    g0 = rows(result, "GPU 0")
    assert g0["model"] == ("ok", "NVIDIA H100 80GB HBM3") and g0["persistence mode"] == ("ok", "enabled")
    assert g0["ECC uncorrected, volatile"] == ("ok", "0") and g0["row remap failure"] == ("ok", "no")
    assert g0["retired pages"] == ("ok", "not used: this GPU remaps rows instead")
    assert g0["row remaps"] == ("ok", "0 uncorrectable, 0 correctable")
    assert g0["PCIe link"] == ("ok", "Gen5 x16 of Gen5 x16 idle")
    assert g0["PCIe replays"] == ("ok", "0.0/min of 31/min (7 since reset)")   # DCGM: ceil(1.92 x 16)
    assert g0["fabric"] == ("ok", "completed")
    assert g0["NVLink links up"] == ("unknown", "NVML reported no NVLink state")     # -q prints none
    assert g0["temperature"][0] == "unknown"          # driver 565 prints T.Limit margins, not the slowdown temperature
    assert g0["XIDs since boot"] == ("ok", "none")    # the log's XID 119 is on 9b:00, no GPU of this node
    assert g0["XIDs during the check"][0] == "unknown"
    assert g0["clocks-event reasons"] == ("ok", f"none (idle) of {g0['clocks-event reasons'][1].split(' of ')[1]}")
    ib0 = rows(result, "mlx5_0:1")
    assert ib0["state"] == ("ok", "ACTIVE") and ib0["physical state"] == ("ok", "LinkUp")
    assert ib0["rate"] == ("ok", "400 Gb/s of 400") and ib0["link layer"] == ("ok", "InfiniBand")
    assert ib0["symbol errors"][0] == "ok" and rows(result, "mlx5_1:1")["link downed"][1].endswith("(255 in all)")
    assert rows(result, "mlx5_bond_0:1")["rate"] == ("ok", "200 Gb/s (Ethernet: not an expected InfiniBand port)")


@pytest.mark.parametrize("capture, gpus, model, temp, nodes", [
    ("a100-sxm4-x4-q.txt", 4, "NVIDIA A100-SXM4-80GB", "ok", ("fail", "0 InfiniBand ports LinkUp at >= 200 Gb/s of 1")),
    ("h100-nvl-x2-q.txt", 2, "NVIDIA H100 NVL", "unknown", ("ok", "none: no InfiniBand class in sysfs")),
    ("l40s-x1-q.txt", 1, "NVIDIA L40S", "unknown", ("ok", "none: no InfiniBand class in sysfs"))])
def test_other_captured_systems(captured, capture, gpus, model, temp, nodes):
    captured(capture)
    result = survey("quick", SECONDS)
    g0 = rows(result, "GPU 0")
    assert len(result["gpus"]) == gpus and g0["model"] == ("ok", model)
    assert rows(result, "node")["InfiniBand ports up"] == nodes    # gpud expects 1 port at 200 Gb/s on an A100 node
    assert g0["temperature"][0] == temp                            # the A100's driver prints an absolute 89 C
    if capture.startswith("a100"):
        assert g0["temperature"][1].endswith("of 89 C") and g0["fabric"] == ("unknown", "not reported")
    else:
        assert g0["fabric"] == ("ok", "n/a: a PCIe card")
    if capture.startswith("l40s"):     # a real idle link: Gen1 of Gen4, a warning at the quick level, not a fault
        assert g0["NVLink links up"] == g0["NVLink errors"] == ("ok", "none: not an NVLink GPU")
        assert g0["PCIe link"] == ("warn", "Gen1 x16 of Gen4 x16 idle (a link slows when idle: --level full reads it "
                                           "under load)")
    if capture.startswith("a100"):     # the real capture's GPU 1 has a row remap pending: reset it
        assert rows(result, "GPU 1")["row remap pending"] == ("fail", "yes: reset the GPU")
        assert failing(result)[1:] == ["GPU 1 00000000:9E:00.0 row remap pending: yes: reset the GPU"]


@pytest.mark.slow
@pytest.mark.parametrize("capture, gpu, item, value", [
    ("edited-h100-gpu3-remap-failure-q.txt", "GPU 3 00000000:5D:00.0", "row remap failure", "yes: RMA the GPU"),
    ("edited-h100-gpu2-pcie-gen4-x8-q.txt", "GPU 2 00000000:3A:00.0", "PCIe link", "Gen4 x8 of Gen5 x16")])
def test_a_failing_gpu_fails_the_node_and_names_itself(capture, gpu, item, value, tmp_path):
    """The CLI end to end: exit 1, 'error: verdict: ...' naming the GPU and item, and the records say it."""
    out, prom = tmp_path / "node.jsonl", tmp_path / "node.prom"
    p = commbench("--seconds", str(SECONDS), "--out", str(out), "--metrics", str(prom),
                  env=hooks(capture, sysfs=IB / "gpud-h100"))
    assert p.returncode == 1, p.stderr
    assert p.stderr.strip().startswith(f"error: verdict: {gpu} {item}: {value}"), p.stderr
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    bad = [r for r in recs if r.get("health") == "fail"]
    assert [(r["subject"], r["item"]) for r in bad] == [(gpu, item)]
    assert recs[-1]["passed"] is False and recs[-1]["bad_nodes"] == [recs[-1]["hosts"][0]]
    assert "DCGM" in bad[0]["source"] or "NVIDIA" in bad[0]["source"]
    host = recs[-1]["hosts"][0]
    metrics = prom.read_text()
    assert f'commbench_node_health{{host="{host}",subject="{gpu}",item="{item}"}} 2.0' in metrics
    assert f'commbench_node_health{{host="{host}",subject="mlx5_0:1",item="rate"}} 0.0' in metrics
    assert f'commbench_bad_node{{host="{host}",check="node"}} 1.0' in metrics


def test_an_xid_since_boot_fails_its_gpu_and_an_unreadable_log_is_unknown(captured, tmp_path):
    captured("h100-sxm-x8-q.txt", kmsg=KLOG / "edited-xid-119-on-9a.log")
    result = survey("quick", SECONDS)
    assert rows(result, "GPU 4")["XIDs since boot"] == ("fail", "119 (GSP RPC timeout)")
    assert rows(result, "GPU 3")["XIDs since boot"] == ("ok", "none")
    captured("h100-sxm-x8-q.txt", kmsg=tmp_path / "missing")
    result = survey("quick", SECONDS)
    verdict, value = rows(result, "GPU 0")["XIDs since boot"]
    assert verdict == "unknown" and "not readable (No such file or directory" in value
    assert any(n.startswith("XIDs since boot: kernel log ") for n in result["notes"])


def test_ib_ports_down_slow_or_counting_errors_during_the_check_fail(captured, tmp_path):
    """The captured tree, edited: mlx5_5 Polling and DOWN, mlx5_6 at 200 Gb/s (before the check), and mlx5_4 counting
    3 symbol errors and 1 receive error during it."""
    root = tmp_path / "sys"
    shutil.copytree(IB / "gpud-h100", root)
    port = root / "class/infiniband/{}/ports/1"
    (Path(str(port).format("mlx5_5")) / "state").write_text("1: DOWN\n")
    (Path(str(port).format("mlx5_5")) / "phys_state").write_text("2: Polling\n")
    (Path(str(port).format("mlx5_6")) / "rate").write_text("200 Gb/sec (4X HDR)\n")
    captured("h100-sxm-x8-q.txt", sysfs=root)
    counters = Path(str(port).format("mlx5_4")) / "counters"

    def count_errors():
        time.sleep(0.3)
        (counters / "symbol_error").write_text("3\n")
        (counters / "port_rcv_errors").write_text("15\n")
    writer = threading.Thread(target=count_errors)
    writer.start()
    result = survey("quick", 1.0)
    writer.join()
    assert rows(result, "mlx5_5:1")["state"] == ("fail", "DOWN")
    assert rows(result, "mlx5_5:1")["physical state"] == ("fail", "Polling: cable or peer lost")
    assert rows(result, "mlx5_6:1")["rate"] == ("fail", "200 Gb/s of 400")
    mlx4 = rows(result, "mlx5_4:1")
    assert mlx4["symbol errors"][0] == "fail" and mlx4["symbol errors"][1].startswith("+3 in ")
    assert mlx4["receive errors"][0] == "warn" and mlx4["receive errors"][1].endswith("(15 in all)")
    assert rows(result, "node")["InfiniBand ports up"] == ("fail", "6 InfiniBand ports LinkUp at >= 400 Gb/s of 8")


def test_the_full_level_without_cuda_says_there_was_no_load(captured):
    pytest.importorskip("torch")
    captured("h100-sxm-x8-q.txt")
    result = survey("full", SECONDS)
    assert "no load: CUDA is not available to torch" in result["notes"] and result["loaded"] is False
    assert rows(result, "GPU 0")["PCIe link"] == ("ok", "Gen5 x16 of Gen5 x16 idle")


def test_nvlinks_up_against_the_expected_and_a_link_down(captured):
    """The A100 capture with NVLink states from another real A100 host's `nvidia-smi nvlink --status` (its first 4
    GPUs), as it is and edited so that GPU 3's link 7 is down; the error counters are in neither capture (unknown)."""
    captured("a100-sxm4-x4-q.txt", nvlink="gpud-a100-x8-nvlink-status.txt")
    result = survey("quick", SECONDS)
    assert rows(result, "GPU 3")["NVLink links up"] == ("ok", "12 up of 12, 300 GB/s")
    assert rows(result, "GPU 3")["NVLink errors"] == ("unknown", "error counters not reported")
    captured("a100-sxm4-x4-q.txt", nvlink="edited-a100-gpu3-link7-down-nvlink-status.txt")
    result = survey("quick", SECONDS)
    assert rows(result, "GPU 3")["NVLink links up"] == ("fail", "11 up of 12, 275 GB/s; down: 7")
    assert rows(result, "GPU 2")["NVLink links up"][0] == "ok"


@pytest.mark.gpu
def test_the_full_level_on_real_gpus_reads_every_gpu_under_load():
    """Where a GPU and its driver are (no hooks): every GPU judged, the PCIe link read under the load."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    env = {k: v for k, v in os.environ.items() if not k.startswith("COMMBENCH_TEST")}
    p = subprocess.run([sys.executable, "-m", "commbench.commands.cli", "node", "--level", "full", "--seconds", "5",
                        "--format", "json"], capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode in (0, 1), p.stderr
    recs = [json.loads(line) for line in p.stdout.splitlines()]
    pcie = [r for r in recs if r.get("item") == "PCIe link"]
    assert len(pcie) == torch.cuda.device_count() and all("under load" in r["value"] for r in pcie), pcie
    assert any(r.get("subject") == "copy engine" and r["item"].startswith("H2D GPU") for r in recs)


def test_an_xid_during_the_check_fails_its_gpu(captured):
    """NVML's XID events, delivered by the boundary from a real kernel log's XID 119 (its bus edited onto GPU 4 of
    the H100 capture, tests/fixtures/kernel_log/SOURCES.md) 0.1 s into the check; the boot log has none."""
    captured("h100-sxm-x8-q.txt", kmsg=KLOG / "gpud-dmesg-xid-13.log", xid=("edited-xid-119-on-9a.log", 0.1))
    result = survey("quick", 0.6)
    assert rows(result, "GPU 4")["XIDs during the check"] == ("fail", "119 (GSP RPC timeout)")
    assert rows(result, "GPU 4")["XIDs since boot"] == ("ok", "none")
    assert rows(result, "GPU 3")["XIDs during the check"] == ("ok", "none")
