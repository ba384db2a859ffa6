"""The sampler beside every GPU measurement (commbench/health/beside.py, sampler.py), through the NVML boundary
(conftest.py: the fake answers from real `nvidia-smi -q` captures; the throttling is the capture edited so that GPU 5
reports HW slowdown and HW thermal slowdown, tests/fixtures/nvidia_smi/SOURCES.md): its timing, a real commbench run
(2 Gloo ranks) whose records and table carry the throttling, and commbench judge naming it as the cause of a slow
number."""
import json
import time

import pytest

from benchcore.results import read
from commbench.health.beside import causes
from commbench.health.nvml import open_session
from commbench.health.sampler import Sampler
from commbench.model.judge import judge
from commbench.model.topology import resolve
from tests.commbench.health.conftest import FIXTURES, hooks
from tests.conftest import run_tool

THROTTLED = ("edited-h100-gpu5-hw-thermal-q.txt", 0)


@pytest.mark.alone
def test_the_sampler_polls_at_its_interval_and_times_a_reason_that_comes_halfway(captured):
    """0.1 s polls over a 1.2 s window; GPU 5 throttles from 0.6 s on: about half its samples."""
    captured("h100-sxm-x8-q.txt", then=("edited-h100-gpu5-hw-thermal-q.txt", 0.6))
    session, why = open_session()
    assert why is None
    sampler = Sampler(session, interval=0.1).start()
    t0 = time.monotonic()
    time.sleep(1.2)
    t1 = time.monotonic()
    sampler.stop()
    summary = sampler.summary(t0, t1)
    assert 9 <= summary[5]["samples"] <= 15, summary[5]
    assert 0.3 <= summary[5]["throttle"]["HW thermal slowdown"] <= 0.7, summary[5]
    assert summary[0]["throttle"] == {} and summary[5]["temp_peak_c"] == 87
    line = causes({"node": summary})
    assert line[0].startswith("node GPU 5 HW slowdown ") and line[0].endswith(" % of the run"), line


@pytest.mark.slow
def test_a_run_on_a_throttling_gpu_is_flagged_in_its_records_and_table(tmp_path):
    out = tmp_path / "run.jsonl"
    proc = run_tool("commbench", "run", "--collective", "all_reduce", "--nproc-per-node", 2, "-b", "1M", "-e", "2M",
                    "-n", 5, "-w", 1, "--out", out, env=hooks("h100-sxm-x8-q.txt", then=THROTTLED))
    assert proc.returncode == 0, proc.stderr
    recs = [json.loads(line) for line in out.read_text().splitlines() if '"busbw_gbps"' in line]
    assert len(recs) == 2
    for rec in recs:
        health = rec["gpu_health"]
        (host, gpus), = health["nodes"].items()
        assert len(gpus) == 8 and gpus[5]["throttle"] == {"HW slowdown": 1.0, "HW thermal slowdown": 1.0}
        assert gpus[0]["throttle"] == {} and gpus[5]["pcie"] == [5, 16] and gpus[5]["samples"] >= 2
        assert health["causes"] == [f"{host} GPU 5 HW slowdown 100 % of the run",
                                    f"{host} GPU 5 HW thermal slowdown 100 % of the run"]
    assert f"# GPU while measured  : all_reduce 1M: {host} GPU 5 HW slowdown 100 % of the run" in proc.stdout


def test_judge_names_the_throttling_gpu_as_the_cause_of_a_slow_number(captured):
    """A real 8 x H100 nccl-tests log (tests/fixtures/gpu_logs/), its busbw cut to a third (edited: a slow run), with
    the sampler's summary of the throttling capture attached as a run's records carry it."""
    captured("h100-sxm-x8-q.txt", then=THROTTLED)
    session, _ = open_session()
    sampler = Sampler(session, interval=0.05).start()
    t0 = time.monotonic()
    time.sleep(0.3)
    sampler.stop()
    nodes = {"gpu-node-7": sampler.summary(t0, time.monotonic())}
    health = {"nodes": nodes, "causes": causes(nodes)}
    log = FIXTURES / "gpu_logs" / "h100-1node-aws-p5-batch-all_reduce.log"
    recs = [r for r in read.records_of(str(log))[1] if not r.get("event") and r.get("busbw_gbps")]
    slow = [{**r, "busbw_gbps": r["busbw_gbps"] / 3, "gpu_health": health, "world_size": 8, "nodes": 1}
            for r in recs]
    rows, _ = judge(slow, resolve("dgx-h100"))
    judged = [r for r in rows if r.klass == "slow"]
    assert judged and all(": gpu-node-7 GPU 5 HW slowdown 100 % of the run; gpu-node-7 GPU 5 HW thermal slowdown "
                          "100 % of the run" in r.line for r in judged), judged
    plain, _ = judge([{k: v for k, v in r.items() if k != "gpu_health"} for r in slow], resolve("dgx-h100"))
    assert all("a slow GPU or link" in r.line for r in plain if r.klass == "slow")


def test_a_link_down_and_a_downtrained_pcie_link_are_named_as_causes(captured):
    """What the sampler's summary says of a measurement on the edited captures (SOURCES.md): an NVLink down (GPU 3's
    link 7 on the A100 host) and a PCIe link at Gen4 x8 (GPU 2 of the H100 host)."""
    found = []
    for capture, nvlink in (("a100-sxm4-x4-q.txt", "edited-a100-gpu3-link7-down-nvlink-status.txt"),
                            ("edited-h100-gpu2-pcie-gen4-x8-q.txt", None)):
        captured(capture, **({"nvlink": nvlink} if nvlink else {}))
        session, _ = open_session()
        sampler = Sampler(session, interval=0.05).start()
        t0 = time.monotonic()
        before = [session.counters(i) for i in range(len(session.handles))]
        entries = sampler.summary(t0, time.monotonic(), before, [session.counters(i) for i in
                                                                  range(len(session.handles))])
        sampler.stop()
        for i, entry in enumerate(entries):
            static = session.static(i)
            entry["pcie_max"] = [static["pcie_gen_max"], static["pcie_width_max"]]
        session.close()
        found += causes({"n1": entries})
    assert found == ["n1 NVLink 7 of GPU 3 down", "n1 GPU 2 PCIe Gen4 x8 of Gen5 x16"]


def test_an_xid_beside_a_measurement_is_a_cause(captured):
    """NVML's XID event (a real kernel log's XID 119, its bus edited onto GPU 4: tests/fixtures/kernel_log/) during
    the measurement's window."""
    captured("h100-sxm-x8-q.txt", xid=("edited-xid-119-on-9a.log", 0.1))
    session, _ = open_session()
    sampler = Sampler(session, interval=0.05).start()
    t0 = time.monotonic()
    time.sleep(0.4)
    t1 = time.monotonic()
    sampler.stop()
    summary = sampler.summary(t0, t1)
    assert summary[4]["xids"] == [119] and summary[3]["xids"] == []
    assert causes({"n1": summary}) == ["n1 GPU 4 XID 119"]
