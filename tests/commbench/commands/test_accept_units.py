"""Units a person wrote (issue 39 item 7): a threshold's verdict, the JUnit failure, the drain reason and the
report's 'measured vs expected' print values in the unit and form of the spec (100 ms, 1 GB/s, 1,000,000 MB/s),
never an exponent (`expected <= 1e+05` for a 100 ms bound, `>= 1e+06` for 1,000,000 MB/s). Judged on records
without launching anything: commbench records as `commbench run` writes them, and fio's real JSON
(tests/fixtures/fio/shard-write.json, captured by tests/fixtures/fio/capture.py) as iobench reads it on a node's own
disk."""
import xml.etree.ElementTree as ET
from pathlib import Path

from benchcore.results import read, schema
from commbench.commands.accept import drain, outputs, report
from commbench.commands.accept.command import Result, judge
from commbench.commands.accept.spec import load_spec

FIO = Path(__file__).resolve().parents[2] / "fixtures" / "fio" / "shard-write.json"
SPEC = """checks:
  - name: latency
    kind: commbench
    collective: all_reduce
    nproc_per_node: 2
    thresholds:
      - time <= 100 ms at 8M
      - busbw >= 1 GB/s at 8M
      - time_us <= 50000 at 8M
  - name: storage
    kind: iobench
    mounts: [/data]
    profiles: shard-write
    thresholds:
      - shard-write MB/s >= 1000000
      - shard-write MB/s >= 0.1 GB/s
"""


def results(tmp_path):
    spec_path = tmp_path / "spec.yaml"
    spec_path.write_text(SPEC)
    spec = load_spec(spec_path)
    comm = [schema.measurement("commbench", run_id="r", collective="all_reduce", size_bytes=8 << 20, count=2 << 20,
                               dtype="float32", op="sum", in_place=False, time_us=123456.0 + i, world_size=2,
                               nodes=1, algbw_gbps=0.068, busbw_gbps=0.068, wrong=0, hosts=["node-1"],
                               accept_check="latency", repeat=i) for i in range(3)]
    fio = [dict(r, hosts=["node-3"], fs_type="xfs", device="/dev/nvme0n1", storage_class="local-nvme",
                accept_check="storage") for r in read.load(str(FIO)).records if not r.get("event")]
    return spec, [judge(Result(spec.checks[0], [], comm), None), judge(Result(spec.checks[1], [], fio), None)]


def test_verdicts_junit_drain_reasons_and_the_report_speak_the_specs_units(tmp_path):
    spec, (latency, storage) = results(tmp_path)
    time_ms, busbw, time_us = latency.outcomes
    assert not time_ms.passed and time_ms.message.startswith(
        "measured time_us 123.5 ms, expected <= 100 ms at 8M (all_reduce 8M float32 sum out-of-place 2 ranks)")
    assert not busbw.passed and "measured busbw_gbps 0.068 GB/s, expected >= 1 GB/s at 8M" in busbw.message
    assert "measured time_us 123,457 us, expected <= 50,000 us at 8M" in time_us.message      # the spec wrote us
    million, tenth = storage.outcomes
    bw = read.load(str(FIO)).records[0]["bw_mbps"]          # 207.126123 MB/s as fio measured it
    assert not million.passed and million.message.startswith(
        f"measured bw_mbps {bw:.1f} MB/s, expected >= 1,000,000 MB/s at 16M (shard-write write")
    assert tenth.passed and f"bw_mbps {bw / 1000:.4f} GB/s meets >= 0.1 GB/s" in tenth.message
    outputs.junit([latency, storage], spec, 1.0, tmp_path / "junit.xml")
    failures = {(case.get("classname"), case.get("name")): case.find("failure")
                for case in ET.parse(tmp_path / "junit.xml").getroot().iter("testcase")}
    first = failures[("latency", "time <= 100 ms at 8M")]
    assert first.get("message") == time_ms.message
    assert first.text == "measured: 123.5 ms\nexpected: <= 100 ms\nsize: 8M\n"
    assert failures[("storage", "shard-write MB/s >= 1000000")].text.startswith(
        f"measured: {bw:.1f} MB/s\nexpected: >= 1,000,000 MB/s\n")
    assert drain.named_nodes(storage) == {"node-3": f"iobench: {million.message}"}   # the reason scontrol gets
    assert report._versus(latency, time_ms) == "time <= 100 ms at 8M: measured 123.5 ms, expected <= 100 ms"
    assert report._versus(storage, million).endswith(f"measured {bw:.1f} MB/s, expected >= 1,000,000 MB/s")
    said = (tmp_path / "junit.xml").read_text() + "".join(o.message for r in (latency, storage) for o in r.outcomes)
    assert "e+" not in said and "e-0" not in said


def test_storage_below_its_bound_drains_its_node_only_when_the_storage_is_known_to_be_its_own(tmp_path):
    """The same failed storage check on a node's own disk names the node; on an object store through FUSE
    (mountpoint-s3 as it mounts: type fuse, source mountpoint-s3; or with a subtype) it is shared; on a FUSE file
    system no table knows (bindfs) it is of unknown locality: nobody drained, and the line says why."""
    spec, (_, storage) = results(tmp_path)
    assert drain.fault(storage, None) == ("fail", {"node-3": f"iobench: {storage.outcomes[0].message}"})
    assert drain.fault(storage, "here")[0] == "fail"
    for fs_type, device, kind in (("fuse", "mountpoint-s3", "shared"), ("fuse.mountpoint-s3", "mountpoint-s3",
                                                                        "shared"),
                                  ("fuse.gcsfuse", "bucket", "shared"), ("fuse.bindfs", "/src", "unknown")):
        moved = Result(storage.check, [], [dict(r, fs_type=fs_type, device=device) for r in storage.records])
        judged = judge(moved, None)
        assert drain.fault(judged, "here") == (kind, {}) and drain.status(judged) == kind
        assert drain.named_nodes(judged) == {}
    assert drain.elsewhere(judged) == ("storage of unknown locality (fuse.bindfs) below its bound: commbench drains a "
                                       "node only for storage known to be its own; nobody drained")


def test_a_drain_reason_names_the_checks_whole_definition(tmp_path):
    """Two checks named alike differ in a threshold, a parameter or the env: their digests differ, so a reason one
    wrote never matches the other's prefix (--on-pass resume). The same definition elsewhere in another spec (its
    line moved) has the same digest."""
    spec, _ = results(tmp_path)
    storage = spec.checks[1]
    (tmp_path / "looser.yaml").write_text(SPEC.replace("MB/s >= 1000000", "MB/s >= 1"))
    (tmp_path / "other-mount.yaml").write_text(SPEC.replace("[/data]", "[/scratch]"))
    (tmp_path / "moved.yaml").write_text("\n\n" + SPEC)
    looser, other, moved = (load_spec(tmp_path / f"{n}.yaml").checks[1]
                            for n in ("looser", "other-mount", "moved"))
    digests = {drain.digest(c) for c in (storage, looser, other)}
    assert len(digests) == 3 and all(len(d) == 10 for d in digests)
    assert drain.digest(moved) == drain.digest(storage) and moved.line != storage.line
    assert drain.prefix(storage) == f"commbench accept: storage [{drain.digest(storage)}]: "
