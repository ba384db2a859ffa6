"""Copy-engine bandwidth (commbench/health/copies.py): the verdict and the matrix on a real nvbandwidth run of an
HGX H100 (tests/fixtures/nvbandwidth/, its source there), one pair edited slow to be flagged; n/a here, where no GPU
is; the measurement itself where CUDA is (marked gpu)."""
import re

import pytest

from commbench.health import copies
from commbench.health.survey import survey
from commbench.model.topology import resolve
from tests.commbench.health.conftest import FIXTURES

CAPTURE = FIXTURES / "nvbandwidth" / "h100-hgx-write-ce.txt"


def captured():
    """The capture as copies.measure() returns it: the D2D matrix and the H2D/D2H rows."""
    text = CAPTURE.read_text()
    cases = dict(re.findall(r"Running (\w+)\.\n.*\n.*\n((?:\s*\d+ .*\n)+)", text))
    rows = lambda case: [[None if v == "N/A" else float(v) for v in line.split()[1:]]   # noqa: E731
                         for line in cases[case].splitlines()]
    return {"d2d": rows("device_to_device_memcpy_write_ce"), "h2d": rows("host_to_device_memcpy_ce")[0],
            "d2h": rows("device_to_host_memcpy_ce")[0]}


def test_a_healthy_h100_matches_its_published_values_and_a_slow_pair_is_flagged():
    measured = captured()
    rows, flagged = copies.judge(measured, resolve("dgx-h100"))
    assert flagged == set() and {r["verdict"] for r in rows} == {"ok"} and len(rows) == 17
    assert rows[0]["value"] == "55.4 GB/s of 55.3 published" and "acceptance log" in rows[0]["source"]
    assert rows[-1]["value"] == "min 397.4, median 397.5 GB/s of 397.5 published"
    measured["d2d"][2][5] = 190.0                        # edited: a pair at half its rate
    rows, flagged = copies.judge(measured, resolve("dgx-h100"))
    assert flagged == {(2, 5)} and rows[-1]["verdict"] == "warn" and rows[-1]["value"].endswith("; slow: 2->5 190.0")
    table = copies.matrix(measured["d2d"], flagged)
    assert table[2]["5"] == "190.0 !" and table[2]["2"] == "-" and table[5]["2"] == "397.5"
    rows, flagged = copies.judge(measured, resolve("hgx-h200"))           # no published value: the median
    assert flagged == {(2, 5)} and "the node's own median" in rows[-1]["source"]


def test_without_cuda_the_full_level_says_n_a():
    pytest.importorskip("torch")
    import torch
    if torch.cuda.is_available():
        pytest.skip("CUDA is here")
    result = survey("full", 0.2)
    assert result["copy"]["rows"] == [{"item": "copy-engine bandwidth", "value": "n/a: CUDA is not available to torch",
                                       "verdict": "unknown", "threshold": "n/a", "source": "n/a", "read": "torch"}]


@pytest.mark.gpu
def test_the_copy_engines_are_measured_on_the_gpus():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA")
    measured = copies.measure(64 << 20)
    n = torch.cuda.device_count()
    assert len(measured["h2d"]) == n and all(v > 1 for v in measured["h2d"] + measured["d2h"])
    assert all(measured["d2d"][i][j] > 1 for i in range(n) for j in range(n) if i != j)
