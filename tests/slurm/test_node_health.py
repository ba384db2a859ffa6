"""accept's `node` check under a real Slurm cluster (tests/slurm/conftest.py): scripts/slurm/healthcheck run on every
node as slurmd runs a HealthCheckProgram, each node reading its own GPUs through the NVML boundary
(commbench/health/boundary.py, `{node}` in the capture's path is the node's host name): node 1's capture has a GPU
with a row-remap failure and node 2's a PCIe link at Gen4 x8, both real 8 x H100 `nvidia-smi -q` captures edited to
those values (tests/fixtures/nvidia_smi/SOURCES.md), nodes 0 and 3 the capture as it is; every node the same real
8-port InfiniBand tree. Nodes 1 and 2 fail and are drained, each with its failing GPU and item as the reason; 0 and 3
pass and stay in service. This module has its own cluster: tests/slurm/test_slurm.py was being edited elsewhere."""
import shutil

import pytest

from commbench.commands.accept import drain
from commbench.commands.accept.spec import load_spec
from tests.commbench.health.conftest import IB, KLOG, SMI, hooks
from tests.conftest import BIN, ROOT
from tests.slurm.conftest import needs_slurm

pytestmark = [pytest.mark.slow, pytest.mark.root, needs_slurm]
HEALTHCHECK = str(ROOT / "scripts" / "slurm" / "healthcheck")
SPEC = """topology: dgx-h100
checks:
  - name: node-health
    kind: node
    level: quick
    seconds: 1
"""
CAPTURES = {1: "edited-h100-gpu3-remap-failure-q.txt", 2: "edited-h100-gpu2-pcie-gen4-x8-q.txt"}


def test_accept_node_check_drains_the_node_with_a_bad_gpu_alone(cluster, tmp_path, capsys):
    spec = tmp_path / "node.yaml"
    spec.write_text(SPEC)
    nvml = tmp_path / "nvml"
    nvml.mkdir()
    for i, node in enumerate(cluster.nodes):
        shutil.copy(SMI / CAPTURES.get(i, "h100-sxm-x8-q.txt"), nvml / f"{node}.txt")
    env = {**hooks(sysfs=IB / "gpud-h100", kmsg=KLOG / "gpud-dmesg-xid-119.log"),
           "CAPTURED_NVML": str(nvml / "{node}.txt"), "COMMBENCH": str(BIN / "commbench"),
           "PYTHON": str(BIN / "python"), "SPEC": str(spec), "REPORTS": str(tmp_path / "reports")}
    runs = []
    try:
        runs = [cluster.spawn(HEALTHCHECK, node=i, env={**env, "SLURMD_NODENAME": node}, log=f"node-health-{i}")
                for i, node in enumerate(cluster.nodes)]
        codes = [p.wait(timeout=150) for p in runs]
        reasons = dict(line.split("|", 1) for line in
                       cluster.run("sinfo", "-R", "-h", "-o", "%N|%E").stdout.splitlines())
        states = cluster.states()
    finally:
        for p in runs:
            if p.poll() is None:
                p.kill()
        cluster.resume()
    out = [(cluster.work / f"node-health-{i}.out").read_text() for i in range(len(cluster.nodes))]
    assert codes == [0, 1, 1, 0], (codes, out)
    prefix = drain.prefix(load_spec(str(spec)).checks[0])
    n1, n2 = cluster.nodes[1], cluster.nodes[2]
    assert sorted(reasons) == [n1, n2], reasons
    assert reasons[n1] == f"{prefix}node: GPU 3 00000000:5D:00.0 row remap failure: yes: RMA the GPU", reasons
    assert reasons[n2] == f"{prefix}node: GPU 2 00000000:3A:00.0 PCIe link: Gen4 x8 of Gen5 x16", reasons
    assert not any(states[n].startswith(("drain", "drng")) for n in (cluster.nodes[0], cluster.nodes[3])), states
    with capsys.disabled():
        print(f"\n[healthcheck with a node check on {n1}]\n{out[1].strip()}\n[sinfo -R]\n{reasons}")
