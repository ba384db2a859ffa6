"""--format nccl-tests in a pipe prints each row as it is measured, as nccl-tests does (issue 49 item 7): read
line by line from a real run's stdout while it runs."""
import os
import subprocess
import time

import pytest

from commbench.output import nccl_tests_text
from tests.conftest import BIN, read_records


@pytest.mark.slow
def test_rows_reach_a_pipe_while_the_run_goes_on(tmp_path):
    """all_reduce and all_gather, 1K to 4M: the first row is read while the run still measures (the larger
    sizes take seconds more); all_reduce's rows stream, all_gather's block follows whole; the text is the same
    nccl-tests text the records make, printed once."""
    out = tmp_path / "r.jsonl"
    proc = subprocess.Popen([BIN / "commbench", "run", "--collective", "all_reduce,all_gather", "--nproc-per-node", "2",
                             "-b", "1K", "-e", "4M", "-f", "4", "-n", "10", "-w", "1", "--format", "nccl-tests",
                             "--quiet", "--out", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "100"})
    try:
        lines, running_at_first_row = [], None
        for line in proc.stdout:
            lines.append(line)
            if running_at_first_row is None and line[:1] != "#":
                running_at_first_row = proc.poll() is None
                arrived = time.monotonic()
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
        ended = time.monotonic()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert running_at_first_row, "the first row came only once the run had ended"
    assert ended > arrived
    text = "".join(lines)
    assert text == nccl_tests_text(read_records(out))    # printed once, in the records' order
    assert text.count("# Collective test starting: all_reduce_perf") == 1
    assert text.index("# Collective test concluded: all_reduce_perf") < text.index(
        "# Collective test starting: all_gather_perf")
