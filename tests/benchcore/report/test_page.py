"""`report`: Markdown + one self-contained HTML page + real PNGs + data, numbers equal to the records'."""
import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from benchcore.report import page
from benchcore.results import read, schema

ROOT = Path(__file__).resolve().parents[3]
FOREIGN = ROOT / "tests" / "fixtures" / "foreign"
INPUTS = [str(FOREIGN / name) for name in ("nccl-tests-2.13-tag-output.log", "nccl-tests-truncated.log",
                                           "fio-3-multijob.json", "fio-2.20.json")]


def run_report(tmp_path, *args):
    return subprocess.run([sys.executable, "-m", "iobench.cli", "report", *INPUTS, "--out", str(tmp_path / "rep"),
                           *args], capture_output=True, text=True, cwd=ROOT, timeout=300)


def html_tables(path):
    """{h2 title: [[cell, ...], ...]} of the page, read with an XML parser (the page must be well-formed)."""
    text = path.read_text().replace("<!DOCTYPE html>", "")
    root = ET.fromstring(text)
    out, title = {}, None
    for el in root.iter():
        if el.tag == "h2":
            title = el.text
        if el.tag == "table":
            out[title] = [[td.text for td in tr] for tr in el.iter("tr")]
    return root, out


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("report")
    base = tmp / "base.jsonl"
    # baseline: the 2.13 log with every time 10 % lower
    recs = read.load(INPUTS[0]).records
    base.write_text("".join(json.dumps(dict(r, time_us=r["time_us"] * 0.9)) + "\n" for r in recs))
    done = run_report(tmp, "--baseline", str(base), "--format", "parquet")
    assert done.returncode == 0, done.stderr
    return tmp / "rep"


def test_files_and_real_pngs(report):
    names = sorted(p.name for p in report.iterdir())
    assert names == ["busbw-all-reduce.png", "report.html", "report.md", "results.parquet", "storage.png"]
    import matplotlib.image
    for png in report.glob("*.png"):
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        image = matplotlib.image.imread(str(png))
        assert image.shape[0] > 300 and image.shape[1] > 600 and image.std() > 0   # drawn, not blank


def test_html_is_self_contained_and_its_tables_equal_the_records(report):
    root, tables = html_tables(report / "report.html")
    srcs = [img.get("src") for img in root.iter("img")]
    assert len(srcs) == 2 and all(s.startswith("data:image/png;base64,") for s in srcs)
    text = (report / "report.html").read_text()
    assert "http://" not in text and "https://" not in text and "<link" not in text and "<script" not in text
    recs = read.load_many(INPUTS)[0]
    comm = [r for r in recs if r["tool"] == "commbench" and not r.get("event")]
    rows = tables["commbench: all_reduce"][1:]
    assert len(rows) == len(comm) == 14
    header = [th.text for th in next(root.iter("thead")).iter("th")]
    col = {h: i for i, h in enumerate(header)}
    for row in rows:
        match = [r for r in comm if r["time_us"] == pytest.approx(float(row[col["time us"]]), abs=0.005)
                 and r["busbw_gbps"] == pytest.approx(float(row[col["busbw GB/s"]]), abs=5e-5)
                 and ("in" if r["in_place"] else "out") == row[col["place"]]]
        assert match, row
        assert float(row[col["new/baseline"]]) == pytest.approx(1 / 0.9, abs=0.001)
    io = [r for r in recs if r["tool"] == "iobench"]
    io_rows = [row for title, t in tables.items() if title.startswith("iobench") for row in t[1:]]
    assert len(io_rows) == len(io) == 5
    assert sorted(float(row[5]) for row in io_rows) == pytest.approx(sorted(round(r["bw_mbps"], 1) for r in io))


def test_markdown_lists_the_events_and_the_same_numbers(report):
    md = (report / "report.md").read_text()
    assert "truncated: all_reduce table ends after a row cut mid-way at line 37" in md
    assert "![all_reduce: busbw and time vs size, busbw from 128M on a linear axis](busbw-all-reduce.png)" in md
    assert "| 8G | float32 | sum | out | 16 | 2 | 18411 | 466.56 | 1816.45 | 0 |" in md     # as the log printed them


def test_parquet_holds_the_records(report):
    import pandas as pd
    frame = pd.read_parquet(report / "results.parquet")
    recs = read.measurements(read.load_many(INPUTS)[0])
    assert len(frame) == len(recs)
    assert list(frame["busbw_gbps"].dropna()) == [r["busbw_gbps"] for r in recs if r.get("busbw_gbps") is not None]


def test_out_dir_is_never_overwritten(report, tmp_path):
    (tmp_path / "rep").mkdir()
    (tmp_path / "rep" / "mine.txt").write_text("keep")
    done = run_report(tmp_path)
    assert done.returncode == 2 and "exists and is not an empty directory" in done.stderr
    assert (tmp_path / "rep" / "mine.txt").read_text() == "keep"


def test_link_peak_and_model_lines(tmp_path):
    recs = [schema.measurement("commbench", run_id="r", collective="all_reduce", size_bytes=s, dtype="float32",
                               in_place=False, time_us=s / 1e3, busbw_gbps=1.0, link_peak_gbps=2.0,
                               predicted_time_us=s / 1.5e3, world_size=2, nodes=2) for s in (1 << 20, 4 << 20)]
    written = page.write(["mem"], recs, tmp_path / "r")
    assert "busbw-all-reduce.png" in written and (tmp_path / "r" / "results.csv").exists()
