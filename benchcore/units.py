"""Binary size strings (8, 1K, 64M, 1G) as nccl-tests and fio spell them."""
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
