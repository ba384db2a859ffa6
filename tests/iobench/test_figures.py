"""One name, one meaning (issue 25, item 7): per-I/O latency, the time per file and the end fsync are separate
fields, separate columns with headers that say which, separate threshold aliases, and a verdict names what it
judged. Real fio (shard-write and metadata, --quick) on a local directory."""
import re
from pathlib import Path

import pytest

from benchcore.importers.fio_json import TIME_FIGURES
from benchcore.results import thresholds
from tests.conftest import host_mount_lock, read_records, run_tool
from tests.iobench.tables import compact_tables

pytestmark = pytest.mark.host_mount   # runs iobench on a host file system (its lock: one at a time)

STORAGE_GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide" / "storage.md"


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    d = tmp_path_factory.mktemp("figures")
    (d / "data").mkdir()
    with host_mount_lock():
        proc = run_tool("iobench", "ckpt", d / "data", "--profile", "shard-write,metadata", "--quick", "--size", "8M",
                        "--ranks", "2", "--out", d / "r.jsonl", env={"COLUMNS": "250"})
    assert proc.returncode == 0, proc.stderr
    recs = read_records(d / "r.jsonl")
    return proc.stdout, {r["profile"]: r for r in recs}, recs, d / "r.jsonl"


def test_metadata_lat_threshold_judges_per_io_latency_and_says_so(run):
    _, by, recs, _ = run
    meta, shard = by["metadata"], by["shard-write"]
    assert meta["file_lat_mean_us"] > meta["lat_mean_us"]  # two different figures: the name must tell which
    lat = thresholds.judge(thresholds.parse("metadata lat <= 1 s", "iobench"), recs)
    assert lat.passed and lat.measured == meta["lat_mean_us"]
    assert "lat_mean_us (mean latency per I/O" in lat.message
    # between the two: the per-I/O latency meets it, the time per file does not, each judged on its own field
    mid = (meta["lat_mean_us"] + meta["file_lat_mean_us"]) / 2
    assert thresholds.judge(thresholds.parse(f"metadata lat <= {mid} us", "iobench"), recs).passed
    per_file = thresholds.judge(thresholds.parse(f"metadata per-file <= {mid} us", "iobench"), recs)
    assert not per_file.passed and per_file.measured == meta["file_lat_mean_us"]
    assert "file_lat_mean_us (mean time per file in one job" in per_file.message
    end = thresholds.judge(thresholds.parse("shard-write end-fsync <= 60000 ms", "iobench"), recs)
    assert end.passed and end.measured == shard["end_fsync_s"] and "final fsync" in end.message


def test_table_headers_say_what_each_time_is(run):
    stdout, by, _, _ = run
    found = compact_tables(stdout)   # headers over several lines joined again
    main = next(t.header for t in found if "MB/s" in t.header)
    assert main == ("mount", "profile", "MB/s", "IOPS", "I/O lat avg us", "I/O lat P99 us", "I/O lat P99.9 us",
                    "I/Os")
    durable = next(t.header for t in found if "per-file us" in t.header)
    assert durable == ("mount", "profile", "per-file us", "files/s", "fsync avg us", "fsync P99 us", "fsyncs",
                       "end fsync s")
    found = {t.header: t.rows for t in found}
    cells = {row[1]: dict(zip(main, row)) for row in found[main]}
    assert cells["metadata"]["I/O lat avg us"] == f"{by['metadata']['lat_mean_us']:.1f}"
    assert cells["shard-write"]["I/O lat avg us"] == f"{by['shard-write']['lat_mean_us']:.1f}"
    cells = {row[1]: dict(zip(durable, row)) for row in found[durable]}
    assert cells["metadata"]["per-file us"] == f"{by['metadata']['file_lat_mean_us']:.1f}"
    assert cells["shard-write"]["end fsync s"] == f"{by['shard-write']['end_fsync_s']:.4f}"
    assert cells["shard-write"]["per-file us"] == "n/a" and cells["metadata"]["end fsync s"] == "n/a"


def test_metadata_fsync_count_is_explained(run):
    """fio's fsync=1 fsyncs before a job's next write: the last file of each job gets none (128 files, 127 fsyncs)."""
    stdout, by, _, _ = run
    meta = by["metadata"]
    assert meta["files"] == 128 and meta["fsync_samples"] == meta["files"] - meta["numjobs"] == 127
    note = " ".join(stdout.split())
    assert "metadata on " in note and "127 fsyncs for 128 files" in note and "closed without one" in note


def test_readme_column_table_covers_every_figure():
    text = STORAGE_GUIDE.read_text()
    rows = [ln for ln in text.splitlines() if ln.startswith("| `") and "I/O" in text]
    for field, (header, _, _) in TIME_FIGURES.items():
        assert any(f"`{header}`" in r and f"`{field}`" in r for r in rows), header
    for alias, field in thresholds.ALIASES["iobench"].items():
        if field in TIME_FIGURES:
            assert re.search(rf"`{re.escape(alias)}`", text, re.I), alias


def test_report_uses_the_same_headers(run, tmp_path):
    _, _, _, results = run
    done = run_tool("iobench", "report", results, "--out", tmp_path / "rep")
    assert done.returncode == 0, done.stderr
    header = next(ln for ln in (tmp_path / "rep" / "report.md").read_text().splitlines() if "| profile |" in ln)
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert [c for c in cells if c in {h for h, _, _ in TIME_FIGURES.values()}] == [
        "I/O lat avg us", "I/O lat P50 us", "I/O lat P99 us", "I/O lat P99.9 us", "per-file us", "end fsync s"]
