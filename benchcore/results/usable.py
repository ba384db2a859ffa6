"""Numbers as the suite judges them: a measured value is usable only when it is a finite positive number (a
count such as `wrong` may be 0); a record read back is used only when the fields that name what it measured
have the right types; a float CLI option is finite and in range (click's float takes "nan" and "inf").
"""
import math
import sys

import click

from benchcore.inputs import MAX_WHOLE, finite, shown

# Fields that name what a record measured (benchcore.results.read identities and labels) -> (type(s), what).
_WHOLE = (int,)
SHAPES = {"size_bytes": (_WHOLE, "a whole number of bytes"), "count": (_WHOLE, "a whole number"),
          "world_size": (_WHOLE, "a whole number of ranks"), "nodes": (_WHOLE, "a whole number of nodes"),
          "chunk_bytes": (_WHOLE, "a whole number of bytes"), "inflight": (_WHOLE, "a whole number"),
          "root": (_WHOLE, "a rank"), "in_place": ((bool,), "true or false"), "env": ((dict,), "a mapping"),
          "bs_bytes": (_WHOLE, "a whole number of bytes"), "iodepth": (_WHOLE, "a whole number"),
          "numjobs": (_WHOLE, "a whole number"), "cycle": (_WHOLE, "a whole number"),
          **{k: ((str,), "text") for k in ("collective", "strategy", "pattern", "phase", "dtype", "op", "backend",
                                             "sweep_config", "profile", "rw", "direction", "mount",
                                             "storage_class")}}
COUNTS = ("wrong",)     # measured fields for which 0 is a good value
# measured fields that are differences or shares and may be 0 or negative: finite is all they must be
SIGNED = ("overlap_efficiency", "sequential_efficiency", "exposed_comm_us", "predicted_exposed_comm_us",
          "predicted_overlap_efficiency")


def flaw(value, count=False, signed=False):
    """Why value is not a usable measurement (None when it is: finite, > 0, >= 0 for a count, any sign when
    signed)."""
    if value is None:
        return "null"
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return f"{shown(repr(value), 40)} (not a number)"
    if isinstance(value, int) and abs(value) > MAX_WHOLE:
        return "beyond 2**63 - 1 (no measurement is)"
    if not math.isfinite(value):
        return "NaN" if value != value else "Infinity" if value > 0 else "-Infinity"
    if not signed and (value < 0 or (value == 0 and not count)):
        return f"{value:g}"
    return None


def usable(value, count=False):
    return flaw(value, count) is None


def shape_flaw(rec):
    """The first field naming what rec measured that has a wrong type ('size_bytes is 'abc', ...'), or None."""
    for key, (types, what) in SHAPES.items():
        v = rec.get(key)
        if v is not None and (not isinstance(v, types) or (bool not in types and isinstance(v, bool))):
            return f"{key} is {shown(repr(v), 40)}, not {what}"
        if types is _WHOLE and v is not None and abs(v) > MAX_WHOLE:
            return f"{key} is beyond 2**63 - 1, more than any run has"
    return None


def sound(records, what, check=shape_flaw):
    """records without the malformed ones (check(rec): why, or None), with one warning per kind of flaw on stderr."""
    out, skipped = [], {}
    for rec in records:
        why = check(rec) if isinstance(rec, dict) else "not a JSON object"
        if why is None:
            out.append(rec)
        else:
            skipped[why] = skipped.get(why, 0) + 1
    for why, n in skipped.items():
        print(f"warning: {what}: {n} record{'s' if n > 1 else ''} skipped: {why}", file=sys.stderr)
    return out


class Finite(click.ParamType):
    """A float option that is finite and within [lo, hi] ((lo, hi] with lo_open): 'nan', 'inf', '1e999' refused."""
    name = "number"

    def __init__(self, lo=None, hi=None, lo_open=False):
        self.lo, self.hi, self.lo_open = lo, hi, lo_open

    def convert(self, value, param, ctx):
        return finite(value, f"{param.opts[-1] if param else 'value'}", self.lo, self.hi, self.lo_open)


SECONDS = Finite(0, 1e6, lo_open=True)     # a timeout: > 0 and at most 11 days (timedelta and sleep take it)
FRACTION = Finite(0, 1)
