"""The collectives registry against nccl-tests' tables and an independent simulation."""
import numpy as np
import pytest
import torch

from benchcore import vocabulary
from benchcore.errors import UserError
from commbench.cases.collectives import (COLLECTIVE_CASES, COLLECTIVES, DTYPES, OPS, PERIOD, fill_values, pattern,
                                         poison_value)

# nccl-tests doc/PERFORMANCE.md bus factors.
NCCL_TESTS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0, "sendrecv": lambda n: 1.0,
}
# (send elements, recv elements) for a size of `count` elements on n ranks (nccl-tests' *GetCollByteCount).
NCCL_TESTS_COUNTS = {
    "all_reduce": lambda c, n: (c, c), "all_gather": lambda c, n: (c // n, c),
    "reduce_scatter": lambda c, n: (c, c // n), "all_to_all": lambda c, n: (c, c),
    "broadcast": lambda c, n: (c, c), "reduce": lambda c, n: (c, c), "sendrecv": lambda c, n: (c, c),
}


def test_registry_has_every_collective():
    assert set(COLLECTIVES) == set(NCCL_TESTS_FACTOR)


def test_the_vocabulary_names_the_registry_s_collectives_and_types():
    assert tuple(COLLECTIVES) == vocabulary.COLLECTIVES
    assert all(vocabulary.nccl_tests_type(d.nccl_tests) == (name, d.bytes) for name, d in DTYPES.items())


@pytest.mark.parametrize("name", sorted(NCCL_TESTS_FACTOR))
@pytest.mark.parametrize("n", [1, 2, 3, 8, 64])
def test_bus_factor_and_counts_match_nccl_tests(name, n):
    coll = COLLECTIVES[name]
    assert coll.bus_factor(n) == pytest.approx(NCCL_TESTS_FACTOR[name](n))
    count = 12 * 64 * 5
    assert coll.counts(count, n) == NCCL_TESTS_COUNTS[name](count, n)


def simulate(name, n, count, op, root):
    """Every rank's receive buffer, computed from the collective's definition with numpy."""
    reduce_fn = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min,
                 "avg": lambda a, axis: np.sum(a, axis=axis) / n}[op]   # avg: the fills make the mean whole
    send_n, _ = NCCL_TESTS_COUNTS[name](count, n)
    inputs = [np.array([fill_values(r, n, "float32", op)[i % PERIOD] for i in range(send_n)], dtype=np.int64)
              for r in range(n)]
    m = count // n
    if name == "all_reduce":
        return [reduce_fn(np.stack(inputs), axis=0)] * n
    if name == "reduce":
        return [reduce_fn(np.stack(inputs), axis=0) if r == root else None for r in range(n)]
    if name == "broadcast":
        return [inputs[root]] * n
    if name == "all_gather":
        return [np.concatenate(inputs)] * n
    if name == "reduce_scatter":
        total = reduce_fn(np.stack(inputs), axis=0)
        return [total[r * m:(r + 1) * m] for r in range(n)]
    if name == "all_to_all":
        return [np.concatenate([inputs[q][r * m:(r + 1) * m] for q in range(n)]) for r in range(n)]
    if name == "sendrecv":
        return [inputs[(r - 1) % n] for r in range(n)]
    raise AssertionError(name)


@pytest.mark.parametrize("name", sorted(COLLECTIVES))
@pytest.mark.parametrize("n", [1, 2, 3])
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("last_root", [False, True])
def test_expected_result_matches_simulation(name, n, op, last_root):
    count = 6 * 7  # divisible by 1, 2, 3; not a multiple of the fill period
    coll = COLLECTIVES[name]
    vals = lambda r: fill_values(r, n, "float32", op)  # noqa: E731
    root = n - 1 if last_root else 0
    truth = simulate(name, n, count, op, root)
    for rank in range(n):
        regions = coll.expected(rank, n, count, op, vals, root)
        if truth[rank] is None:
            assert regions == []
            continue
        got = np.zeros(len(truth[rank]), dtype=np.int64) - 1
        for offset, length, values, start in regions:
            got[offset:offset + length] = pattern(values, start, length, torch.int64, "cpu").numpy()
        assert (got == truth[rank]).all(), (name, rank, got, truth[rank])


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", ["sum", "prod"])
def test_fill_sums_and_products_stay_exact_and_below_the_poison(dtype, op):
    dt = getattr(torch, dtype)
    reduce_fn = {"sum": sum, "prod": np.prod}[op]
    for n in [n for n in (2, 3, 8, 64, 256) if n <= DTYPES[dtype].exact]:  # more ranks: refused (test_plan)
        total = int(reduce_fn([max(fill_values(r, n, dtype, op)) for r in range(n)]))
        assert total <= DTYPES[dtype].exact and total != poison_value(dtype)
        assert torch.tensor(total, dtype=torch.float64).to(dt).to(torch.float64).item() == total
    poison = torch.tensor(poison_value(dtype), dtype=torch.float64).to(dt).to(torch.float64).item()
    assert poison < 1 or poison > DTYPES[dtype].exact  # no fill value, sum or product equals it


def check_size(name, size, dtype, n):
    COLLECTIVE_CASES[name].check_size(size, DTYPES[dtype].bytes, n)


def test_sizes_that_do_not_divide_are_refused():
    check_size("all_gather", 12, "float32", 3)
    with pytest.raises(UserError, match="multiple of 12 B"):
        check_size("all_gather", 8, "float32", 3)
    with pytest.raises(UserError, match="multiple of 2 B"):
        check_size("all_reduce", 3, "bfloat16", 2)
    check_size("all_reduce", 4, "float32", 3)  # all_reduce has no per-rank split
