"""benchcore.units: sizes parsed and formatted the one way both tools use."""
import time

import pytest

from benchcore.errors import UserError
from benchcore.units import format_size, parse_size, size_list


@pytest.mark.parametrize("text,n", [("8", 8), ("1K", 1024), ("64M", 64 << 20), ("1G", 1 << 30), ("2T", 2 << 40),
                                    ("1536", 1536), ("3m", 3 << 20), ("4KiB", 4096), ("16MB", 16 << 20)])
def test_parse_and_format_round_trip(text, n):
    assert parse_size(text) == n
    assert parse_size(format_size(n)) == n


def test_exact_formatting_keeps_bytes_that_are_not_a_whole_unit():
    assert [format_size(n) for n in (1, 1024, 1536, 64 << 20, (1 << 30) + 1)] == [
        "1", "1K", "1536", "64M", "1073741825"]


def test_approximate_formatting_for_messages():
    assert [format_size(n, approx=True) for n in (100, 1024, 1536, 300 << 20, 3 << 29, (1 << 30) + 1, 5 << 40)] == [
        "100", "1K", "1.5K", "300M", "1.5G", "1G", "5T"]


@pytest.mark.parametrize("text", ["", "abc", "1X", "1.5G", "-1K", "0", "K"])
def test_bad_sizes_are_user_errors(text):
    with pytest.raises(UserError, match="--size"):
        parse_size(text, "--size")


@pytest.mark.parametrize("text", ["1" + " " * 100_000 + "x", "1" * 5000, " " * 50_000 + "1" + " " * 50_000 + "Q"])
def test_a_size_of_100_kb_is_refused_at_once_in_a_short_line(text):
    """A run of blanks between optional parts once made the pattern backtrack quadratically (100 KB: minutes), and
    5,000 digits made int() raise its own ValueError; both are one short UserError in milliseconds now."""
    start = time.monotonic()
    with pytest.raises(UserError) as err:
        parse_size(text, "--size")
    assert time.monotonic() - start < 30 and len(str(err.value)) < 400   # milliseconds; minutes when quadratic


def test_size_list():
    assert size_list("512K, 1M,2M") == [512 << 10, 1 << 20, 2 << 20]
    with pytest.raises(UserError):
        size_list("1M,huge")
