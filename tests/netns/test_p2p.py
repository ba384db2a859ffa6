"""commbench p2p between two real nodes (network namespaces, 1gbit tbf link): bandwidth against the shaped rate,
judged as `selftest link` judges all_reduce (0.90-1.00 of the TCP payload ceiling, best of the cycles), on
torch.distributed (a torchrun rendezvous across the link) and on MPI (mpirun across the namespaces)."""
import os
import time

import pytest

from benchcore.emulate import netns
from commbench.commands.selftest.link import CEILING, PASS_RANGE
from commbench.launch.mpirun import MPIRUN_ARGS_ENV
from tests.conftest import read_records
from tests.netns.conftest import NETNS_CLUSTER, RATE, needs_netns, wait_all

pytestmark = [pytest.mark.slow, pytest.mark.root, needs_netns]
# selftest link's range; a window starts on tbf's full bucket (its burst), which a 64 MiB window feels by ~1%
LOW, HIGH = PASS_RANGE[0], PASS_RANGE[1] + 0.03


def test_p2p_bandwidth_across_namespaces_is_the_shaped_rate(fresh, tmp_path):
    out = tmp_path / "p2p.jsonl"
    args = ["--mode", "bw,bibw", "--nodes", 2, "--rdzv-endpoint", f"{fresh.addr(0)}:29530", "-b", "16M", "-e", "16M",
            "-n", 3, "-w", 1, "-N", 2, "--window", 4, "--timeout", 60, "--rdzv-timeout", 30]
    p1 = fresh.commbench(1, "p2p", *args, "--node-rank", 1)
    p0 = fresh.commbench(0, "p2p", *args, "--node-rank", 0, "--out", out)
    (r0, e0, _), (r1, e1, _) = wait_all([p0, p1], time.monotonic(), 180)
    assert r0 == 0 and r1 == 0, e0 + e1
    recs = read_records(out)
    assert all(r["wrong"] == 0 and r["nodes"] == 2 and r["world_size"] == 2 for r in recs)
    best = {mode: max(r["busbw_gbps"] for r in recs if r["collective"] == mode) for mode in ("p2p_bw", "p2p_bibw")}
    of_ceiling = best["p2p_bw"] * 8e9 / netns.parse_rate(RATE) / CEILING
    assert LOW <= of_ceiling <= HIGH, (of_ceiling, best)
    assert best["p2p_bibw"] > best["p2p_bw"]  # both directions at once move more than one
    print(f"\n[p2p across a {RATE} link: bw {of_ceiling:.3f} of the TCP ceiling; bibw {best['p2p_bibw'] * 8:.3f} "
          f"Gbit/s both ways]")


def test_mpi_p2p_across_namespaces_is_the_shaped_rate(fresh, tmp_path):
    """mpirun in node 0 starts node 1's rank through an ssh stand-in that enters the namespace (plm_ssh_agent)."""
    agent = tmp_path / "agent"
    hosts = {netns.node_addr(i): i for i in (0, 1)}
    agent.write_text("#!/bin/sh\nhost=$1; shift\ncase \"$host\" in\n"
                     + "".join(f"  {addr}) node={i};;\n" for addr, i in hosts.items())
                     + f"  *) exit 1;;\nesac\nexec {NETNS_CLUSTER} exec --prefix {fresh.prefix} \"$node\" -- sh -c \"$*\"\n")
    agent.chmod(0o755)
    out = tmp_path / "mpi.jsonl"
    os.environ[MPIRUN_ARGS_ENV] = f"--host {','.join(hosts)} --prtemca plm_ssh_agent {agent} --mca coll ^han"
    try:
        p0 = fresh.commbench(0, "p2p", "--backend", "mpi", "--nodes", 2, "--mode", "bw", "-b", "16M", "-e", "16M",
                             "-n", 3, "-w", 1, "-N", 2, "--window", 4, "--out", out)
    finally:
        del os.environ[MPIRUN_ARGS_ENV]
    ((r0, e0, _),) = wait_all([p0], time.monotonic(), 180)
    assert r0 == 0, e0
    recs = read_records(out)
    assert all(r["wrong"] == 0 and r["nodes"] == 2 and r["backend"] == "mpi" for r in recs)
    assert set(recs[0]["hosts"]) == {fresh.host(0), fresh.host(1)}
    of_ceiling = max(r["busbw_gbps"] for r in recs) * 8e9 / netns.parse_rate(RATE) / CEILING
    assert LOW <= of_ceiling <= HIGH, of_ceiling
    print(f"\n[MPI p2p across a {RATE} link: bw {of_ceiling:.3f} of the TCP ceiling]")
