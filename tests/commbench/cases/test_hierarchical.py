"""The hierarchical all-reduce: exact on emulated nodes and across two network-namespace nodes."""
import time

import pytest

from tests.conftest import HOOKS_ON, read_records, run_tool
from tests.netns.conftest import fresh, needs_netns, pair, wait_all  # noqa: F401 (fixtures)

PHASES = ["reduce_scatter", "all_reduce", "all_gather", "total"]


def check(recs, sizes, nodes, local):
    """Four exact records per payload; busbw factors of each step on its own group."""
    n = nodes * local
    recs = [r for r in recs if not r.get("event")]   # the verdict of one strategy: nothing to rank
    assert [(r["size_bytes"], r["phase"]) for r in recs] == [(s, p) for s in sizes for p in PHASES]
    factor = {"reduce_scatter": (local - 1) / local, "all_gather": (local - 1) / local,
              "all_reduce": 2 * (nodes - 1) / nodes / local, "total": 2 * (n - 1) / n}
    for rec in recs:
        assert rec["strategy"] == "hierarchical" and rec["wrong"] == 0, rec
        assert rec["nodes"] == nodes and rec["world_size"] == n and rec["local_world_size"] == local
        assert rec["collective"] == ("all_reduce" if rec["phase"] == "total" else rec["phase"])
        assert rec["busbw_gbps"] == pytest.approx(rec["algbw_gbps"] * factor[rec["phase"]])
        assert rec["timed_apart"] is True   # each phase and the total in loops of their own: the records say it


@pytest.mark.slow
@pytest.mark.parametrize("nodes, local", [(2, 2), (3, 1)])
def test_exact_on_emulated_nodes(tmp_path, nodes, local):
    """2 nodes x 2 ranks, and 3 nodes x 1 rank (one-rank node groups); 100004 B divides by neither. Labels never
    overstate (issue 39): emulated nodes are said so once on stderr, in every title and in every record; the
    phases' contract (timed apart from the total, so they need not add up to it) is in the title too."""
    out = tmp_path / "h.jsonl"
    proc = run_tool("commbench", "compare", "--strategies", "hierarchical", "--baseline", "hierarchical",
                    "--nodes", nodes, "--nproc-per-node", local, "-b", 100004, "-e", 400016, "-f", 4,
                    "-n", 2, "-w", 1, "--repeats", 1, "--out", out)
    assert proc.returncode == 0, proc.stderr
    check(read_records(out), [100004, 400016], nodes, local)
    assert "hierarchical (all_reduce)" in proc.stdout
    assert all(r["emulated"] is True for r in read_records(out) if not r.get("event"))
    said = f"--nodes {nodes} without --rdzv-endpoint, a Slurm allocation or --hosts: " + \
        ("both nodes" if nodes == 2 else f"all {nodes} nodes") + " are emulated on this host"
    assert proc.stderr.count(said) == 1, proc.stderr
    flat = " ".join(proc.stdout.split())   # titles wrap
    assert flat.count(f"{nodes * local} ranks on {nodes} emulated nodes on one host") == 2 and "node(s)" not in flat
    assert flat.count("phases timed apart from the total, each in a loop of its own: they need not add up") == 2


def test_a_skipped_step_is_caught(tmp_path):
    """The check runs the whole operation into a fresh buffer: without it, the result is wrong."""
    out = tmp_path / "h.jsonl"
    proc = run_tool("commbench", "compare", "--strategies", "hierarchical", "--baseline", "hierarchical",
                    "--nodes", 2, "--nproc-per-node", 1,
                    "-b", "4K", "-e", "4K", "-n", 1, "-w", 0, "--repeats", 1, "--out", out,
                    env={**HOOKS_ON, "COMMBENCH_TEST_SKIP": "hierarchical"})
    assert proc.returncode == 1 and "wrong elements" in proc.stderr
    assert all(r["wrong"] > 0 for r in read_records(out))


@pytest.mark.slow
@pytest.mark.root
@needs_netns
def test_across_two_namespace_nodes(fresh, tmp_path):
    out = tmp_path / "h.jsonl"
    args = ["compare", "--strategies", "hierarchical", "--baseline", "hierarchical", "--nodes", 2,
            "--nproc-per-node", 2, "--rdzv-endpoint", f"{fresh.addr(0)}:29530", "-b", "1M", "-e", "4M", "-f", 4,
            "-n", 2, "-w", 1, "--repeats", 1, "--timeout", 30, "--rdzv-timeout", 30]
    p1 = fresh.commbench(1, *args, "--node-rank", 1)
    p0 = fresh.commbench(0, *args, "--node-rank", 0, "--out", out)
    (r0, e0, _), (r1, e1, _) = wait_all([p0, p1], time.monotonic(), 180)
    assert r0 == 0 and r1 == 0, e0 + e1
    recs = [r for r in read_records(out) if not r.get("event")]
    check(recs, [1 << 20, 4 << 20], 2, 2)
    assert all(r["hosts"] == [fresh.host(0), fresh.host(1)] and r["launcher"] == "torchrun" for r in recs)
    assert all(r["emulated"] is False for r in recs) and "emulated" not in e0   # real nodes, with an endpoint
