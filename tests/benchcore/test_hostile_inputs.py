"""Inputs and outputs a user gets wrong, or that a crash leaves behind, for every command that reads or writes
them: torn record files, output paths that already hold the user's files, streams, devices and FIFOs given as
inputs, logs far larger than memory, and foreign files that are not as fio writes them. Each class is one
table over the commands it concerns; each row ends in one line and a non-zero exit, or in the run going on
with the rest of the data, never in a traceback, a hang or a lost file."""
import json
import os
from pathlib import Path

import pytest

from benchcore.inputs import name
from benchcore.results import read, records
from tests.conftest import assert_one_line_error, read_records, run_tool

pytestmark = pytest.mark.host_mount   # runs iobench on a host file system (its lock: one at a time)

FOREIGN = Path(__file__).resolve().parent.parent / "fixtures" / "foreign"
LOG = FOREIGN / "nccl-tests-2.13-tag-output.log"
GIB = 1 << 30
TORN = b'{"tool": "commbench", "run_id": "old", "collective": "all_re'


@pytest.fixture
def torn_records(tmp_path):
    """A record file as a crash and a careless hand leave it: a JSON list line first, then real records, a binary
    line, and a last line torn mid-record. Returns (path, the numbers of the lines that are not records)."""
    path = tmp_path / "results.jsonl"
    good = [records.dumps(r).encode() for r in read.load(str(LOG)).records]
    path.write_bytes(b"[1, 2]\n" + b"\n".join(good) + b"\n\x00\xff\xfe binary\n" + TORN)
    return path, [1, len(good) + 2, len(good) + 3]


# Every command that appends records: a torn last line never swallows the first new record.
WRITERS = [
    pytest.param(["commbench", "import", LOG], id="commbench-import"),
    pytest.param(["iobench", "ckpt", "{dir}", "--quick", "--profile", "small-random-write", "--runtime", 1,
                  "--format", "json"], id="iobench-ckpt", marks=pytest.mark.slow),
    pytest.param(["commbench", "run", "--collective", "all_reduce", "--nproc-per-node", 2, "-b", 8, "-e", 8, "-n", 1,
                  "-w", 0, "--format", "json"], id="commbench-run", marks=pytest.mark.slow),
]


@pytest.mark.parametrize("argv", WRITERS)
def test_a_torn_last_line_never_swallows_the_next_record(tmp_path, argv):
    out = tmp_path / "results.jsonl"
    out.write_bytes(TORN)
    (tmp_path / "m").mkdir()
    tool, *args = [str(a).format(dir=tmp_path / "m") for a in argv]
    proc = run_tool(tool, *args, "--out", out, timeout=120, memory_limit=4 * GIB)
    assert proc.returncode == 0, proc.stderr
    assert out.read_bytes().startswith(TORN + b"\n")          # the user's bytes kept, the new ones on a fresh line
    found = read_records(out)
    assert found and all(r["run_id"] != "old" for r in found)


# Every command that reads records: a torn or foreign line is skipped with a warning naming it; the rest is kept.
READERS = {
    "diff": (["commbench", "diff", "{f}", "{f}"], "rows joined: 0 slower beyond noise, 0 faster"),
    "report": (["iobench", "report", "{f}", "--out", "{dir}/report"], "wrote report.md"),
    "model-fit": (["commbench", "model", "--fit", "{f}", "--topology", "dgx-h100", "--format", "json"],
                  '"points": 6'),
    "sweep-resume": (["commbench", "sweep", "--env", "NCCL_ALGO=Ring,Tree", "--resume", "--out", "{f}", "--dry-run"],
                     "--plan"),
}


@pytest.mark.parametrize("reader", READERS)
def test_readers_skip_torn_and_foreign_lines_with_a_warning_and_keep_the_rest(tmp_path, torn_records, reader):
    path, bad = torn_records
    argv, kept = READERS[reader]
    tool, *args = [str(a).format(f=path, dir=tmp_path) for a in argv]
    proc = run_tool(tool, *args, timeout=60, memory_limit=4 * GIB)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr
    warned = [ln for ln in proc.stderr.splitlines() if "not a JSON record" in ln]
    assert {ln.split(":")[2] for ln in warned} == {str(n) for n in bad}, proc.stderr
    assert all(ln.startswith(f"warning: {path}:") for ln in warned)
    assert kept in proc.stdout + proc.stderr


# Every --plot: a file that exists is the user's and is never replaced; a suffix matplotlib cannot write is refused
# too, both before anything runs (no fio, no torchrun: the refusal takes the time of reading the command line).
PLOTS = {
    "iobench-ckpt": ["iobench", "ckpt", "{dir}", "--quick"],
    "compare": ["commbench", "compare", "-b", "1M", "-e", "1M"],
    "chunked": ["commbench", "chunked", "-b", "1M", "-e", "1M"],
    "sweep": ["commbench", "sweep", "--env", "NCCL_ALGO=Ring,Tree", "--out", "{dir}/sweep.jsonl"],
    "pairs": ["commbench", "pairs", "--nodes", 2, "--size", "1M"],
    "overlap": ["commbench", "overlap", "-b", "1M", "-e", "1M"],
}


@pytest.mark.parametrize("name", ["photo.png", "plot.txt"])
@pytest.mark.parametrize("command", PLOTS)
def test_plot_never_replaces_a_file_and_its_suffix_is_checked_before_the_run(tmp_path, command, name):
    plot = tmp_path / name
    if name == "photo.png":
        plot.write_bytes(b"\x89PNG the user's photo")
    (tmp_path / "m").mkdir()
    tool, *args = [str(a).format(dir=tmp_path / "m") for a in PLOTS[command]]
    proc = run_tool(tool, *args, "--plot", plot, timeout=30, memory_limit=4 * GIB)
    assert_one_line_error(proc, "exists; refusing to replace" if name == "photo.png" else "must end in .png")
    assert os.listdir(tmp_path / "m") == []                    # nothing ran: no iobench-<run-id>, no records
    assert not plot.exists() if name == "plot.txt" else plot.read_bytes() == b"\x89PNG the user's photo"


# Every input that is read: a device never ends and a FIFO never opens; both are refused before being read.
INPUTS = {
    "commbench-import": ["commbench", "import", "{f}"],
    "iobench-import": ["iobench", "import", "{f}"],
    "diff": ["commbench", "diff", "{f}", "{f}"],
    "report": ["commbench", "report", "{f}", "--out", "{dir}/report"],
    "model-fit": ["commbench", "model", "--fit", "{f}", "--topology", "dgx-h100"],
}


@pytest.mark.parametrize("kind", ["/dev/zero", "/dev/urandom", "fifo"])
@pytest.mark.parametrize("command", INPUTS)
def test_devices_and_fifos_are_refused_not_read(tmp_path, command, kind):
    path = kind
    if kind == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)
    tool, *args = [str(a).format(f=path, dir=tmp_path) for a in INPUTS[command]]
    proc = run_tool(tool, *args, timeout=30, memory_limit=1 * GIB)
    assert_one_line_error(proc, "is not a regular file")


def _fio_doc(version=None, drop=None, jobs=None, options=None):
    """fio 3.1's document (tests/fixtures/foreign) with one thing changed as a hand or a cut file changes it."""
    doc = json.loads((FOREIGN / "fio-3.1.json").read_text())
    doc["fio version"] = version or doc["fio version"]
    doc["jobs"] = jobs or doc["jobs"]
    if drop:
        del doc["jobs"][0]["read"][drop]
    if options:
        doc["jobs"][0]["job options"] = options
    return json.dumps(doc)


# Files that are not what they claim (hand-edited, cut, binary, badly named), through every command that reads them.
BAD_FILES = {
    "nested-fio-json": (["commbench", "import"], '{"fio version": "fio-3.33", "jobs": [' + "[" * 100000 + "]" * 100000
                        + "]}", "nested too deep"),
    "null-job": (["iobench", "import"], _fio_doc(jobs=[None]), "jobs[0] is null, not an object"),
    "job-options-list": (["iobench", "import"], _fio_doc(options=["bs=4k"]), "job options is a JSON list"),
    "3.x-without-bw_bytes": (["iobench", "import"], _fio_doc(version="fio-3.33"), "bw_bytes is missing"),
    "no-iops": (["iobench", "import"], _fio_doc(drop="iops"), "iops is missing"),
    "no-io_bytes": (["iobench", "import"], _fio_doc(drop="io_bytes"), "io_bytes is missing"),
    "huge-fio-version": (["iobench", "import"], _fio_doc(version="fio-99999999999999999999.1"),
                         "not as fio writes it"),
    "binary-log": (["commbench", "import"], b"\x7fELF\x02\x01\x01\x00" * 512, "neither an nccl-tests/rccl-tests"),
    "binary-fit": (["commbench", "model", "--topology", "dgx-h100", "--fit"], b"\x00\xff\x10\n" * 64,
                   "not a record file"),
    "json-list-fit": (["commbench", "model", "--topology", "dgx-h100", "--fit"], "[1, 2]\n", "not a record file"),
    "binary-resume": (["commbench", "sweep", "--env", "GLOO_SOCKET_IFNAME=lo", "--dry-run", "--resume", "--out"],
                      b"\x00\xff\x10\n" * 64, "not a record file"),
    "json-list-resume": (["commbench", "sweep", "--env", "GLOO_SOCKET_IFNAME=lo", "--dry-run", "--resume", "--out"],
                         "[1, 2]\n", "not a record file"),
}


@pytest.mark.parametrize("case", BAD_FILES)
@pytest.mark.parametrize("file_name", ["bad.json", "two\nlines\x1b[31m.json"])
def test_a_bad_file_ends_in_one_line_naming_it(tmp_path, case, file_name):
    argv, content, needle = BAD_FILES[case]
    path = tmp_path / file_name
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    proc = run_tool(*argv, path, timeout=60, memory_limit=1 * GIB)
    assert_one_line_error(proc, needle)
    assert name(path) in proc.stderr


def test_import_out_dev_null_writes_nowhere():
    proc = run_tool("commbench", "import", LOG, "--out", os.devnull, timeout=60)
    assert proc.returncode == 0 and proc.stdout == "", proc.stdout[:200]
    assert "8 measurements (nccl-tests)" in proc.stderr


def test_tables_of_tens_of_thousands_of_columns_import_in_seconds(tmp_path):
    """A header is compiled into a row pattern only up to nccltable.PLAIN_COLUMNS columns, and read_row takes each
    placement's cells without copying the rest of the row: six distinct headers of 60,000 columns, a row under
    each, import in about a second (compiled, or sliced quadratically, they took minutes and hundreds of MB)."""
    log = tmp_path / "all_reduce_perf.log"
    with open(log, "w") as f:
        for table in range(6):
            extra = " algbw" * (table + 1)               # six distinct headers
            f.write("#  size count type redop root" + " time algbw busbw" * 20000 + extra + "\n")
            f.write("  8  2  float  sum  -1" + " 1.00" * (60000 + table + 1) + "\n# Out of bounds values : 0 OK\n")
    proc = run_tool("commbench", "import", log, "--out", os.devnull, timeout=20, memory_limit=1 * GIB)
    assert proc.returncode == 0 and "6 measurements (nccl-tests)" in proc.stderr, proc.stderr[-500:]


def test_lines_of_hundreds_of_kb_that_almost_match_import_in_seconds(tmp_path):
    """The patterns a log's lines are searched with are bounded (nccltests.NCCL_LOG's host, NTHREAD's gap, one run
    of digits in nccltable.NUMBER): a line of 400 KB of host-name characters before ' NCCL INFO', one of 10,000
    settings lines' starts, and a row whose cell is 100,000 digits and an 'x' import in about a second (each
    search was quadratic: minutes for the first and last, half a minute for the second)."""
    log = LOG.read_text()
    header = next(line for line in log.splitlines() if "#wrong" in line).split(">:", 1)[1]
    (tmp_path / "all_reduce_perf.log").write_text("a" * 400_000 + " NCCL INFO x\n" + "nThread 1 nGpus 1 minBytes 8 "
                                                  "maxBytes 8 " * 10_000 + "\n" + log + header + "\n" +
                                                  "8 2 float sum -1 " + "1" * 100_000 + "x 1.0 1.0 0 1.0 1.0 1.0 0\n")
    proc = run_tool("commbench", "import", tmp_path / "all_reduce_perf.log", "--out", os.devnull, timeout=20)
    assert proc.returncode == 0 and "8 measurements (nccl-tests)" in proc.stderr, proc.stderr[-500:]


@pytest.mark.slow
def test_a_log_far_larger_than_its_records_streams_in_bounded_memory(tmp_path):
    """40 MB of nccl-tests log (the fixture's tables, repeated) imported in 320 MiB of address space: read
    whole, the log alone (bytes and text) and its 92,000 records would need several times that."""
    log, out = tmp_path / "big.log", tmp_path / "out.jsonl"
    block = LOG.read_bytes()
    copies = (40 << 20) // len(block)
    with open(log, "wb") as f:
        for _ in range(copies):
            f.write(block)
    proc = run_tool("commbench", "import", log, "--out", out, timeout=400, memory_limit=320 << 20)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-2000:]
    count = 8 * copies
    assert f"{count} measurements (nccl-tests)" in proc.stderr
    with open(out, "rb") as f:
        assert sum(1 for _ in f) == count
