"""benchcore.units: sizes parsed and formatted the one way both tools use."""
import time

import pytest

from benchcore.errors import UserError
from benchcore.units import format_size, human, number, parse_size, size_list


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


@pytest.mark.parametrize("value, field, shown", [
    (45240.0, "time_us", "45.24 ms"), (1e5, "time_us", "100 ms"), (812.34, "time_us", "812.3 us"),
    (2.5e7, "time_us", "25 s"), (123.0, "time_us_p99", "123 us"), (0.5, "end_fsync_s", "500 ms"),
    (1e6, "bw_mbps", "1,000,000 MB/s"), (1.0, "busbw_gbps", "1 GB/s"), (0.003141, "busbw_gbps", "0.003141 GB/s"),
    (1816.45, "busbw_gbps", "1,816 GB/s"), (12345.678, "iops", "12,346"), (0, "wrong", "0"), (None, "time_us", "n/a")])
def test_values_read_as_a_person_writes_them_never_as_an_exponent(value, field, shown):
    """Issue 39 item 7: diff printed 4.524e+04 us, verdicts `expected <= 1e+05` for a 100 ms bound."""
    assert human(value, field) == shown


def test_an_absurd_value_read_back_stays_short():
    """A record read back with 1e308 us is shown in a few characters, not 300 digits."""
    assert len(human(1e308, "time_us")) < 20 and number(1e-308) == "1e-308"
