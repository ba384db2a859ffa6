"""Run the real fio binary and turn its JSON into measurements (benchcore.importers.fio_json reads it, for every fio version).

Units in fio 3.x JSON: `bw` KiB/s, `bw_bytes` B/s, `lat_ns`/`clat_ns` mean and percentiles in ns,
`runtime` ms. Measurements use us and MB/s (1e6 B/s). fio may print notes or errors before its
JSON on stdout, so parsing starts at the JSON object; stderr is kept apart for error messages.
"""
import shutil

from benchcore.errors import UserError
from benchcore.importers.fio_json import PERCENTILES, measurements, parse_output, percentile  # noqa: F401 (one parser)
from benchcore.processes import procs
from benchcore.processes.procs import one_line

INSTALL_HINT = "fio not found on PATH: install it (Debian/Ubuntu: apt-get install fio; RHEL: dnf install fio)"


def fio_binary():
    path = shutil.which("fio")
    if path is None:
        raise UserError(INSTALL_HINT)
    return path


def fio_version():
    return procs.run([fio_binary(), "--version"], 30).stdout.strip() or "unknown"


def run_fio(args, timeout, cwd=None, what="fio"):
    """Run fio with args (after --output-format=json); return its parsed JSON or raise UserError."""
    done = procs.run([fio_binary(), "--output-format=json", *args], timeout, cwd=cwd)
    if done.timed_out:
        raise UserError(f"{what}: fio did not finish within {timeout} s and was stopped; "
                        f"fio stderr: {one_line(done.stderr)}")
    if done.returncode < 0:
        raise UserError(f"{what}: fio was killed by signal {-done.returncode}; fio stderr: {one_line(done.stderr)}")
    if done.returncode != 0:
        detail = one_line(done.stderr) if done.stderr.strip() else one_line(done.stdout)
        raise UserError(f"{what}: fio failed (exit {done.returncode}): {detail}")
    return parse_output(done.stdout, done.stderr, what)
