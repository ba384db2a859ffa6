"""selftest overlap's judgement over its cycles, on hand-made total records (the measuring is tests/netns)."""
from commbench.commands.selftest.overlap import judge


def total(cycle, pattern, comm, over, efficiency):
    """A total record of one cycle: 16 steps, compute half the communication, the control at -0.3."""
    shape = {"chunk_bytes": 1 << 20, "inflight": 2} if pattern == "pipelined" else {"buckets": 16}
    return {"cycle": cycle, "phase": "total", "pattern": pattern, "size_bytes": 16 << 20, "steps": 16, **shape,
            "compute_ratio": 0.5, "comm_us": comm, "compute_us": comm / 2, "overlapped_us": over,
            "overlap_efficiency": efficiency, "sequential_efficiency": -0.3, "wrong": 0}


def test_a_cycle_that_passes_is_judged_not_the_shortest_overlapped_one():
    """The shortest overlapped time came from a cycle whose communication alone ran slow: 6.6 % under that floor,
    efficiency n/a (CI, 2026-12-06). Another cycle passed; the pattern passes on it."""
    records = [total(0, "ddp", 282374, 293886, 0.861),
               total(0, "pipelined", 170271, 159024, None),          # under its floor: n/a
               total(1, "pipelined", 152000, 160500, 0.888)]
    rows, passed = judge(records, [16 << 20])
    assert passed and {r["kind"]: r["overlapped_us"] for r in rows} == {"ddp": 293886, "pipelined": 160500}
    rows, passed = judge(records[:2], [16 << 20])   # without the cycle that passed: fails, showing the n/a one
    assert not passed and [r["verdict"] for r in rows] == ["ok", "OFF"]
