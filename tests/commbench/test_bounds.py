"""Bounds that follow what the machine and the launcher can do: an option past one is refused in one line naming it
and the real cause, before anything starts (no torchrun, no fio), and `commbench model` of it answers at once
instead of filling the memory. One table over both tools; {crowd} and {share} are counts of ranks that this machine's
memory cannot hold (computed when the row runs)."""
import pytest

from benchcore.processes import procs
from benchcore.processes.torchrun import PROCESS_FLOOR_BYTES
from tests.conftest import assert_one_line_error, run_tool

GIB = 1 << 30
TINY = ["-b", 8, "-e", 8, "-n", 1, "-w", 0]   # rows that cannot take --dry-run: a short run if a refusal is lost
H100 = ["--topology", "dgx-h100"]

CASES = [
    # operations per payload per iteration (chunks, buckets), and the in-flight process groups
    ("commbench", ["model", *H100, "--overlap", "ddp", "--buckets", 1000000000],
     "--buckets 1000000000: one iteration issues at most 16384 collective calls per payload"),
    ("commbench", ["overlap", "--buckets", 1000000, "-b", "1M", "--dry-run"],
     "--buckets 1000000: one iteration issues at most 16384 collective calls per payload"),
    ("commbench", ["overlap", "--patterns", "ddp", "--buckets", 1000, "-b", "1K", "-e", "1K", "--dry-run"],
     "--buckets 1000: the 1K payload holds 256 float32 elements, fewer than its buckets"),
    ("commbench", ["chunked", "--inflight", 2000, "--dry-run"], "--inflight 2000: at most 128 operations in flight"),
    ("commbench", ["chunked", "--chunk-size", 4, "--threshold", 4, "--dry-run"], "--chunk-size 4 makes"),
    ("commbench", ["model", *H100, "--strategies", "chunked", "--chunk-size", 4, "--threshold", 4],
     "--chunk-size 4 makes 268435456 chunks of the 8G payload on 8 ranks"),
    ("commbench", ["model", *H100, "--overlap", "pipelined", "--chunk-size", 4],
     "a --chunk-size of at least 512K or a smaller -e/--max-bytes"),
    # what the ranks can count, and the cause the memory check names (a GEMM's: tests/commbench/cases/test_overlap.py)
    ("commbench", ["p2p", "--time-budget", "1e10", "--dry-run"],
     "--time-budget 1e10: the ranks share a budget in 64-bit nanoseconds"),
    ("commbench", ["run", "--nproc-per-node", "{share}", *TINY],
     "a rank needs about 512M before any buffer"),
    # the same floor of torch processes in both tools (before the path is looked at)
    ("iobench", ["torch-ckpt", "{tmp}/gone", "--ranks", "{crowd}", "--size", "{crowd}M"], "torch processes, at least"),
    # a link that names no interface
    ("commbench", ["topo", "--link", "nonexist0"], "--link 'nonexist0': no such interface on this node"),
]


@pytest.mark.parametrize("tool, args, needle", CASES, ids=[f"{t}-{'-'.join(map(str, a))}"[:80] for t, a, _ in CASES])
def test_past_a_bound_is_one_line_before_anything_starts(tmp_path, tool, args, needle):
    counts = {"tmp": tmp_path, "crowd": procs.meminfo("MemTotal") // PROCESS_FLOOR_BYTES,   # + torchrun's agent
              "share": procs.mem_available() // (300 << 20)}   # 300M a rank: less than its runtime alone
    done = run_tool(tool, *[str(a).format(**counts) for a in args], timeout=60, memory_limit=4 * GIB, cwd=tmp_path)
    assert_one_line_error(done, needle)
    assert done.returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == []   # nothing written, nothing run



@pytest.mark.parametrize("args", [["overlap", "--gemm", "²,1,1", "-b", "1M", "-e", "1M"],
                                  ["overlap", "--gemm", "9" * 5000 + ",1,1", "-b", "1M", "-e", "1M"],
                                  ["run", "--nodes", 2, "--rdzv-endpoint", "h:²", "--node-rank", 0]])
def test_digits_that_are_not_ascii_or_too_many_are_refused_in_one_short_line(args):
    """'²' is a digit to str.isdigit() and not to int(): a traceback; 5,000 digits: int() refuses them."""
    done = run_tool("commbench", *args, timeout=60)
    assert_one_line_error(done, "")
    assert len(done.stderr) < 300, done.stderr
