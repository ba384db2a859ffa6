"""An option the user gave is never silently ignored: given where the rest of the command line makes it mean
nothing (an output with --dry-run, a strategy's option beside cases that never read it, a launcher's option
with another launcher), it is refused in one line naming it and what it goes with, before anything runs. One
table over both tools; every row refuses before a launch, fio or torchrun (--dry-run, or a check that comes
first)."""
import pytest

from tests.conftest import assert_one_line_error, run_tool

GIB = 1 << 30
DRY = "not with --dry-run"
TINY = ["-b", 8, "-e", 8, "-n", 1, "-w", 0]   # rows that cannot take --dry-run: a short run if a refusal is lost

CASES = [
    # commbench --dry-run prints the launch command lines: nothing is written or shown after a run
    ("commbench", ["run", "--dry-run", "--out", "{tmp}/r.jsonl"], "--out: " + DRY),
    ("commbench", ["run", "--dry-run", "--format", "json"], "--format: " + DRY),
    ("commbench", ["ring", "--dry-run", "--stats"], "--stats: " + DRY),
    ("commbench", ["compare", "--dry-run", "--plot", "{tmp}/p.png"], "--plot: " + DRY),
    ("commbench", ["pairs", "--nodes", 2, "--dry-run", "--plot", "{tmp}/m.png"], "--plot: " + DRY),
    ("commbench", ["sweep", "--env", "NCCL_ALGO=Ring,Tree", "--dry-run", "--out", "{tmp}/s.jsonl"],
     "--out: " + DRY),   # with --resume, --out is what it reads: kept
    # --stats is a table
    ("commbench", ["run", "--stats", "--format", "csv", *TINY], "--stats shows a table: not with --format csv"),
    ("commbench", ["sweep", "--env", "NCCL_ALGO=Ring,Tree", "--stats", "--format", "json", "--repeats", 1, *TINY],
     "--stats shows a table: not with --format json"),
    ("commbench", ["pairs", "--nodes", 2, "--stats", "--size", 8, "-n", 1, "-w", 0, "--rounds", 1],
     "--stats: pairs shows its node x node matrix"),
    # the launcher's rendezvous
    ("commbench", ["run", "--launcher", "local", "--rdzv-endpoint", "127.0.0.1:29500", "--dry-run"],
     "--rdzv-endpoint is the rendezvous of --launcher torchrun: not with --launcher local"),
    # nccl-tests' -r and -o where no case has a root or a reduction op
    ("commbench", ["run", "--collective", "all_gather", "-r", 1, "--dry-run"], "-r/--root: all_gather has no root"),
    ("commbench", ["ring", "-o", "max", "--dry-run"], "-o/--op: ring takes no reduction op"),
    ("commbench", ["pairs", "--nodes", 2, "-o", "max", "--dry-run"], "-o/--op: pair takes no reduction op"),
    # case options that none of the run's cases reads
    ("commbench", ["compare", "--strategies", "ring,plain,chunked", "--compress", "fp8", "--dry-run"],
     "--compress: ring, plain, chunked take no --compress (it goes with the compressed strategy)"),
    ("commbench", ["compare", "--strategies", "ring,hierarchical", "--place", "out", "--dry-run"],
     "--place: ring, hierarchical take no --place"),
    ("commbench", ["chunked", "--compress", "fp8", "--dry-run"], "--compress: ring, plain, chunked take no"),
    ("commbench", ["chunked", "--overlap", "--threshold", "8M", "--dry-run"],
     "--threshold: chunked --overlap cuts every payload into chunks, small ones too: no threshold sends one whole"),
    ("commbench", ["chunked", "--overlap", "--buckets", 8, "--dry-run"], "--buckets: chunked --overlap measures one"),
    ("commbench", ["overlap", "--patterns", "ddp", "--chunk-size", "1M", "--dry-run"],
     "--chunk-size: ddp takes no --chunk-size"),
    ("commbench", ["overlap", "--patterns", "pipelined", "--buckets", 8, "--dry-run"],
     "--buckets: pipelined takes no --buckets (it goes with the ddp overlap pattern)"),
    ("commbench", ["overlap", "--threshold", "8M", "--dry-run"], "--threshold: ddp, pipelined, pipelined-rs take no"),
    ("commbench", ["overlap", "--gemm", "64,64,64", "--compute-ratio", 2, "--dry-run"],
     "--compute-ratio: not with --gemm"),
    ("commbench", ["sweep", "--env", "NCCL_ALGO=Ring,Tree", "--chunk-size", "1M", "--dry-run"],
     "--chunk-size: all_reduce takes no --chunk-size"),
    ("commbench", ["sweep", "--env", "NCCL_ALGO=Ring,Tree", "--strategy", "chunked", "--collective", "all_gather",
                   "--dry-run"], "--collective: not with --strategy"),
    # p2p moves bytes; a window is what bw and bibw keep in flight
    ("commbench", ["p2p", "-d", "float32", "--dry-run"], "-d/--datatype: p2p moves bytes"),
    ("commbench", ["p2p", "--mode", "latency", "--window", 8, "--dry-run"], "--window: goes with --mode bw and bibw"),
    # model: predicts from the options it models; --fit from the records alone
    ("commbench", ["model", "--topology", "dgx-h100", "--collective", "all_reduce", "--compute-ratio", 2],
     "--compute-ratio: all_reduce takes no --compute-ratio"),
    ("commbench", ["model", "--topology", "dgx-h100", "--strategies", "ring,plain", "--chunk-size", "1M"],
     "--chunk-size: ring, plain take no --chunk-size"),
    ("commbench", ["model", "--topology", "dgx-h100", "--strategies", "rs-ag", "--place", "out"],
     "--place: the model does not tell it apart"),
    ("commbench", ["model", "--topology", "dgx-h100", "--overlap", "ddp", "--gemm", "64,64,64"],
     "--gemm: the model does not tell it apart"),
    ("commbench", ["model", "--fit", "{tmp}/r.jsonl", "--collective", "all_gather"], "--collective: not with --fit"),
    ("commbench", ["topo", "--calibrate", "--json"], "--json: not with --calibrate"),
    ("commbench", ["selftest", "link", "--rate", "1gbit", "--collective", "all_reduce,ring", "--threshold", "8M"],
     "--threshold: goes with chunked in --collective"),
    # iobench --dry-run prints the job file or fio's command
    ("iobench", ["ckpt", "{tmp}", "--dry-run", "--out", "{tmp}/r.jsonl"], "--out: " + DRY),
    ("iobench", ["ckpt", "{tmp}", "--dry-run", "--plot", "{tmp}/p.png"], "--plot: " + DRY),
    ("iobench", ["ckpt", "{tmp}", "--dry-run", "--format", "json"], "--format: " + DRY),
    ("iobench", ["run", "{tmp}/job.fio", "--directory", "{tmp}", "--dry-run", "--keep-json", "--out", "{tmp}/r.jsonl"],
     "--out, --keep-json: " + DRY),
    # profile overrides that no selected profile takes
    ("iobench", ["ckpt", "{tmp}", "--profile", "small-random-write", "--direct", "--dry-run"],
     "--direct: goes with shard-write"),
    ("iobench", ["ckpt", "{tmp}", "--profile", "metadata", "--ranks", 4, "--dry-run"],
     "--ranks: goes with shard-write and restore-read"),
    ("iobench", ["ckpt", "{tmp}", "--jobs", 2, "--ranks", 4, "--dry-run"], "--ranks: not with --jobs"),
    ("iobench", ["torch-ckpt", "{tmp}", "--no-fio", "--keep-json", "--out", "{tmp}/r.jsonl", "--size", "2M",
                 "--repeats", 1],
     "--keep-json: keeps fio's JSON: not with --no-fio"),
]


@pytest.mark.parametrize("tool, args, needle", CASES, ids=[f"{t}-{'-'.join(map(str, a))}"[:80] for t, a, _ in CASES])
def test_an_option_that_would_be_ignored_is_refused_in_one_line(tmp_path, tool, args, needle):
    done = run_tool(tool, *[str(a).format(tmp=tmp_path) for a in args], timeout=60, memory_limit=4 * GIB,
                    cwd=tmp_path)   # a default output (commbench-sweep.jsonl) would land here, and fail the test
    assert_one_line_error(done, needle)
    assert done.returncode == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == []   # nothing written, nothing run
