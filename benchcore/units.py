"""Binary size strings (8, 1K, 64M, 1G) as nccl-tests and fio spell them, and measured values as a person reads
them (45.24 ms, 1 GB/s, 1,000,000 MB/s: never an exponent)."""
import math
import re

from benchcore.errors import UserError

_SUFFIX = {"": 1, "B": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}
# matched whole against the stripped text (a pattern with blanks at both ends of optional parts backtracks
# quadratically over a long run of blanks); 30 digits at most (int() refuses thousands)
_SIZE_RE = re.compile(r"(-?\d{1,30})\s*([KMGT]?)(I?B)?", re.IGNORECASE)


def parse_size(text, what="size"):
    """'64M' -> 67108864. Raises UserError on anything that is not a positive size."""
    if isinstance(text, int):
        value = text
    else:
        m = _SIZE_RE.fullmatch(str(text).strip())
        if not m:
            raise UserError(f"{what} {_quoted(text)} is not a size (examples: 8, 1K, 64M, 1G)")
        value = int(m.group(1)) * _SUFFIX[m.group(2).upper()]
    if value <= 0:
        raise UserError(f"{what} must be positive, got {_quoted(text)}")
    return value


def _quoted(text):
    """text as an error quotes it: repr (control characters escaped), at most 100 characters."""
    text = repr(text)
    return text if len(text) <= 100 else text[:97] + "..."


def format_size(n, approx=False):
    """67108864 -> '64M'. Exact: a size that is not a whole unit keeps its bytes (parse_size reads
    it back). approx: the largest unit, one decimal, for messages (1610612736 -> '1.5G')."""
    for suffix in ("T", "G", "M", "K"):
        unit = _SUFFIX[suffix]
        if n >= unit and n % unit == 0:
            return f"{n // unit}{suffix}"
        if n >= unit and approx:
            return f"{n / unit:.1f}".rstrip("0").rstrip(".") + suffix
    return str(n)


def readable_size(n):
    """A size in a message: '16M' where it is a whole unit, else '21.4M (22,484,704 B)' (never a bare 8-digit byte
    count, still exact)."""
    exact = format_size(n)
    return f"{format_size(n, approx=True)} ({n:,} B)" if exact.isdigit() and n >= 1024 else exact


def size_list(text, what="size"):
    """'512K,1M,2M' -> [524288, 1048576, 2097152]."""
    return [parse_size(part, what) for part in str(text).split(",") if part.strip()]


def size_range(min_bytes, max_bytes, factor):
    """nccl-tests' -b/-e/-f sweep: min, min*f, ... up to and including max."""
    if min_bytes > max_bytes:
        raise UserError(f"--min-bytes {format_size(min_bytes)} is larger than --max-bytes {format_size(max_bytes)}")
    if min_bytes == max_bytes:
        return [min_bytes]  # one size, whatever the factor
    if factor < 2:
        raise UserError(f"--step-factor must be at least 2, got {factor}")
    sizes, size = [], min_bytes
    while size <= max_bytes:
        sizes.append(size)
        size *= factor
    return sizes


# A field's unit from its name's ending (the first that fits): what a value of it is shown in. Times scale (us, ms,
# s); a bandwidth stays in its tool's unit (commbench GB/s as nccl-tests, iobench MB/s as fio).
FIELD_UNITS = (("_per_s", "/s"), ("_us", "us"), ("_s", "s"), ("_gbps", "GB/s"), ("_mbps", "MB/s"))
TIME_UNITS = {"us": 1, "ms": 1e3, "s": 1e6}     # factors to us
SIGNIFICANT = 4
HUGE = 1e15          # beyond this a value is shown as an exponent after all (a record read back with 1e308 us)


def number(value, digits=SIGNIFICANT):
    """A number with `digits` significant digits, thousands separated, trailing zeros cut, never an exponent for
    values a person measures: 100000 -> '100,000', 45.2449 -> '45.24', 0.003141 -> '0.003141'."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    if not math.isfinite(value) or (value and not 1 / HUGE <= abs(value) < HUGE):
        return f"{value:.{digits}g}"
    if isinstance(value, int) or value == int(value) and abs(value) >= 10 ** (digits - 1):
        return f"{int(value):,}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(value)))) if value else 0
    text = f"{value:,.{decimals}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text


def unit_of(field):
    """The unit a field's values are in, from its name ('' for a count: iops, wrong): its ending, or a unit followed
    by what the figure is (time_us_p99, bw_mbps_min)."""
    return next((unit for end, unit in FIELD_UNITS if field.endswith(end) or f"{end}_" in field), "")


def human(value, field):
    """value of field as a person reads it: a time in us, ms or s by its size, anything else in its field's unit:
    human(45240.0, 'time_us') -> '45.24 ms', human(1e6, 'bw_mbps') -> '1,000,000 MB/s'; None -> 'n/a'."""
    if value is None or isinstance(value, bool) or not isinstance(value, (int, float)):
        return "n/a" if value is None else str(value)
    unit = unit_of(field)
    if unit in TIME_UNITS:
        us = value * TIME_UNITS[unit]
        unit = "us" if abs(us) < 1e3 else "ms" if abs(us) < 1e6 else "s"
        value = us / TIME_UNITS[unit]
    return f"{number(value)} {unit}".rstrip()
