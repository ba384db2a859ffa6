"""What an nccl-tests user runs into first (issue 18): runaway inputs, stale checks, device files, memory,
different command lines per node, CPU defaults, start-up, rendezvous errors, nccl-tests' flags."""
import json
import socket
import subprocess
import sys

import pytest

from benchcore.results import schema
from commbench.cases.collectives import COLLECTIVES
from commbench.cases.registry import COLLECTIVE_NAMES
from commbench.transports.torch_dist import drops
from tests.conftest import BIN, HOOKS_ON, assert_one_line_error, read_records, run_tool

CLI_MEMORY = 1 << 30   # the command line never imports torch: 1 GiB of address space is plenty


@pytest.mark.parametrize("factor", [1, 0, -3])
def test_one_size_whatever_the_factor_in_bounded_memory(factor):
    proc = run_tool("commbench", "run", "-b", "1K", "-e", "1K", "-f", factor, "--dry-run", timeout=30,
                    memory_limit=CLI_MEMORY)
    assert proc.returncode == 0, proc.stderr
    plan = json.loads(proc.stdout.splitlines()[1])   # the plan file's here-document
    assert plan["sizes"] == [1024]


def test_a_plan_larger_than_memory_is_refused_before_launch():
    proc = run_tool("commbench", "run", "-b", "10G", "-e", "10G", timeout=30, memory_limit=CLI_MEMORY)
    assert_one_line_error(proc, "all_reduce at 10G needs about")
    assert "per rank; there is" in proc.stderr


def test_cli_does_not_import_torch():
    code = "import sys, commbench.commands.cli, iobench.cli; sys.exit(1 if 'torch' in sys.modules else 0)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0


@pytest.mark.slow
def test_a_skipped_collective_is_caught_in_every_placement(tmp_path):
    """The check's run does nothing: the poisoned output shows it, for every collective and placement."""
    out = tmp_path / "r.jsonl"
    every = ",".join(COLLECTIVE_NAMES)
    proc = run_tool("commbench", "run", "--collective", every, "--nproc-per-node", 2, "-b", "1K", "-e", "1K",
                    "-n", 1, "-w", 0, "--out", out, env={**HOOKS_ON, "COMMBENCH_TEST_SKIP": every})
    assert proc.returncode == 1 and "wrong elements" in proc.stderr
    recs = read_records(out)
    assert {(r["collective"], r["in_place"]) for r in recs} == {
        (c, p == "in") for c in COLLECTIVE_NAMES for p in COLLECTIVES[c].placements
        if not drops(c, {"in_place": p == "in"})}   # torch.distributed's placements
    assert all(r["wrong"] > 0 for r in recs), [(r["collective"], r["in_place"], r["wrong"]) for r in recs]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def node(rank, port, *args):
    argv = ["run", "--nodes", 2, "--nproc-per-node", 1, "--rdzv-endpoint", f"127.0.0.1:{port}", "--node-rank", rank,
            "-n", 1, "-w", 0, "--rdzv-timeout", 30, *args]
    return subprocess.Popen([str(BIN / "commbench"), *map(str, argv)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_nodes_with_different_command_lines_both_stop_naming_the_difference():
    port = free_port()
    procs = [node(1, port, "-b", "1K", "-e", "16K"), node(0, port, "-b", "1K", "-e", "1K")]
    results = [p.communicate(timeout=120) for p in procs]   # not a hang until --timeout (300 s), not a wrong blame
    for p, (_, err) in zip(procs, results):
        assert p.returncode != 0 and "Traceback" not in err
        assert "different command lines: sizes [1024" in err and "16384]" in err, err


def test_rendezvous_errors_are_told_apart_before_or_at_launch():
    port = free_port()
    with socket.socket() as busy:
        busy.bind(("", port))
        busy.listen()
        proc = run_tool("commbench", "run", "--nodes", 2, "--rdzv-endpoint", f"127.0.0.1:{port}", "--node-rank", 0,
                        "-e", "1K", timeout=60)
    assert_one_line_error(proc, f"port {port} is already in use")
    proc = run_tool("commbench", "run", "--nodes", 2, "--rdzv-endpoint", "192.0.2.1:29500", "--node-rank", 0,
                    "-e", "1K", timeout=60)   # TEST-NET-1: never an address of this machine; nothing is sent
    assert_one_line_error(proc, "192.0.2.1 (192.0.2.1) is not an address of this node")
    proc = run_tool("commbench", "run", "--nodes", 2, "--rdzv-endpoint", "nosuchhost.invalid:29500",
                    "--node-rank", 1, "-e", "1K", "--dry-run", timeout=60)
    assert proc.returncode == 0 and "--rdzv-endpoint nosuchhost.invalid:29500" in proc.stdout


@pytest.mark.slow
def test_nothing_listening_at_the_endpoint_is_named():
    proc = run_tool("commbench", "run", "--nodes", 2, "--rdzv-endpoint", f"127.0.0.1:{free_port()}",
                    "--node-rank", 1, "-e", "1K", "--rdzv-timeout", 10, timeout=120)   # a hang: past the timeout
    assert proc.returncode != 0
    assert "nothing listens there" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.slow
def test_cpu_default_is_two_ranks_and_a_shell_nccl_algo_does_not_stop_ring_on_gloo(tmp_path):
    out = tmp_path / "r.jsonl"
    proc = run_tool("commbench", "ring", "-b", "1K", "-e", "1K", "-n", 1, "-w", 0, "--out", out,
                    env={"NCCL_ALGO": "Tree"})
    assert proc.returncode == 0, proc.stderr
    assert "note: no GPU here: 2 local ranks on Gloo" in proc.stderr
    rec, = read_records(out)
    assert rec["world_size"] == 2 and rec["busbw_gbps"] > 0 and rec["command"].startswith("commbench ring -b 1K")
    assert rec["env"]["NCCL_ALGO"] == "Tree" and rec["versions"]["suite"] != "unknown"


@pytest.mark.slow
def test_nccl_tests_flags_on_three_ranks(tmp_path):
    """-d -o -r with lists and all, -m, -N, -z, -a, -c, -C as nccl-tests means them."""
    out = tmp_path / "r.jsonl"
    proc = run_tool("commbench", "run", "--collective", "all_reduce,reduce,broadcast", "--nproc-per-node", 3,
                    "-b", 96, "-e", 96, "-d", "int8,double", "-o", "prod,max", "-r", "all", "-m", 2, "-N", 2,
                    "-z", 1, "-a", 0, "-c", 1, "-C", 1, "-n", 2, "-w", 1, "--out", out)
    assert proc.returncode == 0, proc.stderr
    recs = read_records(out)
    # 2 cycles x 2 types x (all_reduce: 2 ops; reduce: 2 ops x 3 roots; broadcast: 3 roots)
    assert len(recs) == 2 * 2 * (2 + 6 + 3)
    assert {(r["collective"], r["dtype"], r["op"], r["root"]) for r in recs if r["collective"] == "reduce"} == {
        ("reduce", d, o, root) for d in ("int8", "float64") for o in ("prod", "max") for root in range(3)}
    for rec in recs:
        assert rec["wrong"] == 0 and rec["agg"] == "rank0" and rec["agg_iters"] == 2 and rec["blocking"] is True
        assert rec["time_source"] == "cpu" and rec["cycle"] in (0, 1) and not schema.problems(rec)


@pytest.mark.parametrize("args, needle", [
    (["-a", "7"], "-a/--agg '7'"),
    (["-d", "float128"], "unknown dtype 'float128'"),
    (["-c", "maybe"], "--check"),
])
def test_bad_nccl_tests_flags(args, needle):
    proc = run_tool("commbench", "run", *args, timeout=60)
    assert proc.returncode == 2 and needle in proc.stderr and "Traceback" not in proc.stderr


def test_avg_needs_nccl_and_all_skips_it_on_gloo():
    assert_one_line_error(run_tool("commbench", "run", "-o", "avg", "--dry-run", timeout=60),
                          "-o/--op avg needs NCCL: Gloo has no average")
    proc = run_tool("commbench", "run", "--collective", "all_reduce", "-o", "all", "-b", "1K", "-e", "1K",
                    "--dry-run", timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert all(f'"op":"{op}"' in proc.stdout for op in ("sum", "prod", "max", "min")) and '"op":"avg"' not in proc.stdout


@pytest.mark.parametrize("dtype", ["float32", "float16", "bfloat16", "float64", "int8", "int32"])
@pytest.mark.parametrize("n", [2, 3, 5, 8])
def test_avg_fill_values_average_exactly_the_way_nccl_averages(dtype, n):
    """No GPU here, so NCCL's ncclAvg is reproduced in torch on the CPU as NCCL documents it: floats are
    pre-multiplied by 1/n in the element type (also tried: in float32, then rounded) and summed; integers are
    summed and divided by n. The check's expected value must come out exactly either way."""
    import torch

    from commbench.cases.collectives import _reduced, fill_values
    typ = getattr(torch, dtype)
    vals = lambda r: fill_values(r, n, dtype, "avg")  # noqa: E731
    want = torch.tensor(_reduced("avg", n, vals), dtype=torch.float64)
    inputs = [torch.tensor(vals(r), dtype=typ) for r in range(n)]
    if typ.is_floating_point:
        ways = [lambda x: x * torch.tensor(1 / n, dtype=typ), lambda x: (x.float() * (1 / n)).to(typ)]
        for premultiply in ways:
            total = torch.zeros(len(want), dtype=typ)
            for x in inputs:
                total = total + premultiply(x)
            assert torch.equal(total.double(), want), (dtype, n, total, want)
    else:
        total = torch.stack(inputs).sum(0, dtype=typ) // n
        assert torch.equal(total.double(), want)
