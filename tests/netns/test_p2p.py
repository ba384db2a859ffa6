"""commbench p2p between two real nodes (network namespaces, 1gbit tbf link): bandwidth against the shaped rate,
judged as `selftest link` judges all_reduce (0.90-1.00 of the TCP payload ceiling, best of the cycles)."""
import time

import pytest

from commbench import netns
from commbench.selftest import CEILING, PASS_RANGE
from tests.conftest import read_records
from tests.netns.conftest import RATE, needs_netns, wait_all

pytestmark = [pytest.mark.slow, pytest.mark.root, needs_netns]


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
    assert PASS_RANGE[0] <= of_ceiling <= PASS_RANGE[1], (of_ceiling, best)
    assert best["p2p_bibw"] > best["p2p_bw"]  # both directions at once move more than one
    print(f"\n[p2p across a {RATE} link: bw {of_ceiling:.3f} of the TCP ceiling; bibw {best['p2p_bibw'] * 8:.3f} "
          f"Gbit/s both ways]")
