"""accept's expect: a check fails where NCCL's own lines show something else than the spec requires, even when the
busbw passes. The records are the real nccl-tests 2.22.3 log of tests/fixtures/nccl_info (NVLink A100s: '0 nvls
channels', no GDRDMA line: the ranks share a node), imported as accept reads a check's records, with their evidence
attached as judge and import attach it; judged by the same functions accept's judge calls."""
from pathlib import Path

import pytest

from benchcore.errors import UserError
from benchcore.results import read, thresholds
from commbench.commands.accept import spec as accept_spec
from commbench.commands.accept.gates import check_expect, expect_outcome
from commbench.evidence import nccl

LOG = Path(__file__).parents[2] / "fixtures" / "nccl_info" / "nccl-2.22.3-a100-sendrecv-nccl-tests-331.log"


def records():
    recs, refused = read.load_many([LOG])
    assert not refused
    return nccl.attach(read.measurements(recs))


def test_nvls_required_fails_where_the_log_shows_none_while_busbw_passes():
    recs = records()
    busbw = thresholds.judge(thresholds.parse("busbw >= 70 GB/s at 1G", "commbench"), recs, None)
    assert busbw.passed
    out = expect_outcome({"nvls": "on", "net": "IB"}, recs)
    assert not out.passed and out.judged == len(recs) and len(out.missed) == len(recs)
    assert out.message.startswith(f"{len(recs)} of {len(recs)} measurements: nvls off where on is expected")
    assert expect_outcome({"nvls": "off", "net": "ib"}, recs).passed
    gdr = expect_outcome({"gdr": "all"}, recs)                          # no NET channel: GDR not shown
    assert not gdr.passed and "gdr not shown" in gdr.message
    algo = expect_outcome({"algo": "NVLS"}, recs)                       # sendrecv: no TUNING line
    assert not algo.passed and "algo not shown" in algo.message


def test_expect_is_checked_in_the_spec(tmp_path):
    spec = tmp_path / "s.yaml"
    spec.write_text("checks:\n  - name: one\n    kind: commbench\n    collective: all_reduce\n    max_bytes: 4K\n"
                    "    thresholds: [wrong == 0]\n    expect: {algo: nvls, gdr: all, net: IB}\n")
    assert accept_spec.load_spec(spec).checks[0].expect == {"algo": "NVLS", "gdr": "all", "net": "IB"}
    spec.write_text(spec.read_text().replace("gdr: all", "gdr: most"))
    with pytest.raises(UserError, match=r"s.yaml:7: check 'one': expect: gdr is most, expected one of all, some, none"):
        accept_spec.load_spec(spec)
    problems = []
    for bad in ({"colour": "x"}, {"net": 3}, []):
        with pytest.raises(UserError):
            check_expect(bad, lambda m: (problems.append(m), (_ for _ in ()).throw(UserError(m))))
    assert "unknown key 'colour'" in problems[0] and "net is a name" in problems[1]


def test_nvls_required_fails_on_a_log_that_shows_nvls_unavailable():
    # a real 2.27.7 run whose every device said 'NVLS multicast support is not available': its records' effective
    eff = nccl.read_text((LOG.parent / "nccl-2.27.7-p4d-net-plugin-fails-socket.log").read_text())
    recs = [{"collective": "all_reduce", "size_bytes": size, "busbw_gbps": 100.0,
             "effective": nccl.for_record(eff, "all_reduce", size, 4)} for size in (1 << 20, 1 << 30)]
    out = expect_outcome({"nvls": "on"}, recs)
    assert not out.passed and out.message.startswith("2 of 2 measurements: nvls off where on is expected")
    assert not expect_outcome({"net": "IB"}, recs).passed and expect_outcome({"net": "Socket"}, recs).passed
