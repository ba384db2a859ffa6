"""fio JSON -> measurements, on output captured from real fio 3.33 runs (tests/fixtures/fio/capture.py)."""
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from benchcore.errors import UserError
from iobench.fio import measurements, parse_output

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "fio"


def load(name):
    return (FIXTURES / name).read_text()


def raw_job(name, direction):
    text = load(name)
    return json.loads(text[text.index("{"):])["jobs"][0][direction]


@pytest.mark.parametrize("name,direction,rw", [
    ("small-random-write.json", "write", "randwrite"),
    ("shard-write.json", "write", "write"),
    ("restore-read.json", "read", "read"),
    ("metadata.json", "write", "write"),
])
def test_profile_captures_convert_units(name, direction, rw):
    (m,) = measurements(parse_output(load(name)))
    raw = raw_job(name, direction)
    assert (m["rw"], m["direction"], m["lat_kind"]) == (rw, direction, "lat")
    assert m["bw_mbps"] == pytest.approx(raw["bw_bytes"] / 1e6)
    assert m["bw_mbps"] == pytest.approx(raw["bw"] * 1024 / 1e6, rel=0.01)  # bw is KiB/s
    assert m["iops"] == pytest.approx(raw["iops"])
    assert m["lat_mean_us"] == pytest.approx(raw["lat_ns"]["mean"] / 1000)
    n = raw["lat_ns"]["N"]
    assert m["lat_samples"] == n
    for key, pct, needs in (("lat_p50_us", "50.000000", 2), ("lat_p99_us", "99.000000", 100),
                            ("lat_p999_us", "99.900000", 1000)):
        # a percentile with fewer than 1/(1-p) samples is n/a (None), not fio's nearest sample
        expected = raw["lat_ns"]["percentile"][pct] / 1000 if n >= needs else None
        assert m[key] == (pytest.approx(expected) if expected else None), (key, n)
    assert m["runtime_s"] == pytest.approx(raw["runtime"] / 1000)
    assert m["size_bytes"] == 16 << 20


def test_options_come_from_global_and_job_sections():
    (m,) = measurements(parse_output(load("shard-write.json")))
    assert (m["bs_bytes"], m["numjobs"], m["direct"], m["ioengine"]) == (1 << 20, 2, 0, "psync")
    (m,) = measurements(parse_output(load("small-random-write.json")))
    assert (m["bs_bytes"], m["iodepth"], m["direct"], m["ioengine"]) == (4096, 64, 1, "libaio")


def test_metadata_reports_fsync_latency():
    (m,) = measurements(parse_output(load("metadata.json")))
    sync = json.loads(load("metadata.json"))["jobs"][0]["sync"]["lat_ns"]
    assert m["fsync_lat_mean_us"] == pytest.approx(sync["mean"] / 1000)
    assert m["fsync_samples"] == sync["N"]
    assert m["fsync_lat_p99_us"] == (pytest.approx(sync["percentile"]["99.000000"] / 1000) if sync["N"] >= 100
                                     else None)
    assert m["files"] == m["io_bytes"] // m["bs_bytes"]
    assert m["files_per_s"] == pytest.approx(m["files"] / m["runtime_s"])
    # per file: what a checkpoint writer waits for, far more than the write() call alone
    assert m["file_lat_mean_us"] > m["lat_mean_us"] + m["fsync_lat_mean_us"]


def test_note_line_before_json_is_skipped():
    text = load("warning-before-json.json")
    assert text.startswith("note: both iodepth >= 1 and synchronous I/O engine")
    (m,) = measurements(parse_output(text, stderr=""))
    assert m["io_bytes"] == 1 << 20 and m["bs_bytes"] == 64 << 10


@settings(max_examples=50, deadline=None)
@given(st.lists(st.text(st.characters(blacklist_characters="\n\r", blacklist_categories=("Cs",)))
                .filter(lambda line: not line.lstrip().startswith("{")), max_size=5))
def test_any_lines_before_the_json_are_skipped(notes):
    text = "".join(f"{line}\n" for line in notes) + load("shard-write.json")
    assert measurements(parse_output(text)) == measurements(parse_output(load("shard-write.json")))


def test_without_lat_percentiles_completion_latency_is_used():
    read, write = measurements(parse_output(load("randrw-clat.json")))
    raw = raw_job("randrw-clat.json", "read")
    assert (read["direction"], write["direction"]) == ("read", "write")
    assert read["lat_kind"] == "clat" and not raw["lat_ns"].get("percentile")
    assert read["lat_mean_us"] == pytest.approx(raw["clat_ns"]["mean"] / 1000)
    assert read["lat_p99_us"] == pytest.approx(raw["clat_ns"]["percentile"]["99.000000"] / 1000)


def test_truncated_json_is_a_clear_error():
    with pytest.raises(UserError, match="truncated or malformed.*stderr: fio: terminating"):
        parse_output(load("truncated.json"), stderr="fio: terminating on signal 9\n")


@pytest.mark.parametrize("stdout", ["", "fio: pid=0, err=22/file:filesetup.c:805, func=open, error=Invalid argument\n"])
def test_no_json_is_a_clear_error(stdout):
    with pytest.raises(UserError, match="fio printed no JSON"):
        parse_output(stdout, stderr="fio: something went wrong")


def test_job_error_is_reported():
    data = json.loads(load("shard-write.json"))
    data["jobs"][0]["error"] = 5
    with pytest.raises(UserError, match="ended with error 5"):
        measurements(data)
