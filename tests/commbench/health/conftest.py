"""The NVML boundary of these tests: captured_pynvml.py stands in for pynvml (no GPU here), answering from real
`nvidia-smi -q` captures (tests/fixtures/nvidia_smi/SOURCES.md); IB sysfs trees and kernel logs are real captures too
(tests/fixtures/ib/, tests/fixtures/kernel_log/). Everything behind the boundary is commbench's own code."""
from pathlib import Path

import pytest

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures"
FAKE = Path(__file__).resolve().parent / "captured_pynvml.py"
SMI, IB, KLOG = FIXTURES / "nvidia_smi", FIXTURES / "ib", FIXTURES / "kernel_log"


def hooks(capture=None, sysfs=None, kmsg=None, then=None, nvlink=None, xid=None):
    """The environment that points commbench/health/boundary.py at captures."""
    env = {"COMMBENCH_TEST_HOOKS": "1", "COMMBENCH_TEST_PYNVML": str(FAKE),
           "COMMBENCH_TEST_SYSFS": str(sysfs or FIXTURES / "no-sysfs"),
           "COMMBENCH_TEST_KMSG": str(kmsg or KLOG / "gpud-dmesg-xid-13.log")}
    if capture:
        env["CAPTURED_NVML"] = str(SMI / capture)
    if then:
        env["CAPTURED_NVML_THEN"] = f"{SMI / then[0]}@{then[1]}"
    if nvlink:
        env["CAPTURED_NVLINK"] = str(SMI / nvlink)
    if xid:
        env["CAPTURED_XID"] = f"{KLOG / xid[0]}@{xid[1]}"
    return env


@pytest.fixture
def captured(monkeypatch):
    """captured(capture, ...) sets the hooks in this process (commbench's code reads them at each survey)."""
    def use(*args, **kwargs):
        for k in ("CAPTURED_NVML", "CAPTURED_NVML_THEN", "CAPTURED_NVLINK", "CAPTURED_XID"):
            monkeypatch.delenv(k, raising=False)
        for k, v in hooks(*args, **kwargs).items():
            monkeypatch.setenv(k, v)
    return use
