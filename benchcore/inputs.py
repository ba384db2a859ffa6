"""Reading what a user hands in, bounded: regular files only (never a FIFO that blocks or a device that never
ends), a size cap where the whole file is read, UTF-8 or one line saying it is not, YAML with a bound on
aliases, nesting and size, numbers that are finite and in range, and excerpts that are short and carry no
terminal escape sequence. Every refusal is one UserError line naming the file.
"""
import math
import os
import re
import stat

import yaml

from benchcore.errors import UserError, key, name, printable, shown  # noqa: F401  (key: for the spec readers)

MAX_TEXT_BYTES = 8 << 20     # a spec, topology, matrix or job file is a few KB; 8 MiB is far past any real one
MAX_LINE_BYTES = 1 << 20     # a log line is at most a few KB; a file without newlines is cut here
MAX_RECORD_BYTES = 8 << 20   # one record line: a 100,000-node run's `hosts` is about 2 MB (host names of 20 characters)
MAX_YAML_ALIASES = 32        # anchors are handy; an alias bomb needs dozens (9 levels of 9: 81)
MAX_NESTING = 64             # real specs nest 4 deep; 400 levels is an attack or an accident
MAX_WHOLE = (1 << 63) - 1    # a size, count or rank read from a file: no run has more, and no table column holds it
MAX_FIELD_CHARS = 256        # a text an imported file gives a record: a host name has at most 253 characters, a type,
#                              op or version tens (200,000-character types made report's legends take minutes)
def regular_file(path, what="input"):
    """path, checked to be an existing regular file (not a directory, device, FIFO or socket): UserError else."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise UserError(f"{what} {name(path)}: no such file") from None
    except OSError as exc:
        raise UserError(f"{what} {name(path)}: {exc.strerror}") from None
    if stat.S_ISDIR(st.st_mode):
        raise UserError(f"{what} {name(path)} is a directory, not a file")
    if not stat.S_ISREG(st.st_mode):
        raise UserError(f"{what} {name(path)} is not a regular file (a device, FIFO or socket is never read)")
    return st


def read_bytes(path, what="input", limit=MAX_TEXT_BYTES):
    """The whole of a regular file of at most limit bytes."""
    st = regular_file(path, what)
    if st.st_size > limit:
        raise UserError(f"{what} {name(path)} is {st.st_size} bytes, more than the {limit} this reads whole")
    try:
        with open(path, "rb") as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise UserError(f"{what} {name(path)}: {exc.strerror}") from None
    if len(data) > limit:   # grew while read
        raise UserError(f"{what} {name(path)} is more than the {limit} bytes this reads whole")
    return data


def lines(f, limit=MAX_LINE_BYTES):
    """(number, line, ended) of each line of a binary file object, read in bounded memory: a line longer than
    limit bytes is cut there and the rest of it skipped. ended: the line ends with a newline."""
    number = 0
    while True:
        line = f.readline(limit)
        if not line:
            return
        number += 1
        rest = line
        while len(rest) == limit and not rest.endswith(b"\n"):   # the rest of an over-long line: dropped
            rest = f.readline(limit)
        ended = rest.endswith(b"\n")
        yield number, line, ended


def text_blocks(f, limit=MAX_LINE_BYTES):
    """The text of a binary file object in blocks that each end at a line's end (the last may not), read in
    bounded memory: a line of which more than limit bytes are held without its newline is cut there (a line passes
    whole up to 1.25 x limit: reads are limit/4), it ends there and its rest is dropped. Bytes that are not UTF-8
    read as U+FFFD."""
    rest, dropping = b"", False
    while True:
        data = f.read(limit // 4)
        if not data:
            break
        if dropping:                              # inside the rest of an over-long line
            end = data.find(b"\n")
            if end < 0:
                continue
            data, dropping = data[end + 1:], False
        data = rest + data
        end = data.rfind(b"\n") + 1
        block, rest = data[:end], data[end:]
        if len(rest) > limit:
            block, rest, dropping = block + rest[:limit] + b"\n", b"", True
        if block:
            yield block.decode("utf-8", errors="replace")
    if rest:
        yield rest.decode("utf-8", errors="replace")


def read_text(path, what="input", limit=MAX_TEXT_BYTES):
    """The whole of a regular UTF-8 text file of at most limit bytes."""
    data = read_bytes(path, what, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UserError(f"{what} {name(path)} is not UTF-8 text (byte {exc.start}: a binary file?)") from None


class _BoundedLoader(yaml.SafeLoader):
    """SafeLoader that refuses an alias bomb and deep nesting while composing, before anything is built."""

    def __init__(self, stream):
        super().__init__(stream)
        self._aliases = 0

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            self._aliases += 1
            if self._aliases > MAX_YAML_ALIASES:
                raise yaml.YAMLError(f"more than {MAX_YAML_ALIASES} aliases (refused: an alias bomb expands "
                                     "without bound)")
        depth = getattr(self, "_depth", 0)
        if depth >= MAX_NESTING:
            raise yaml.YAMLError(f"nested more than {MAX_NESTING} levels deep")
        self._depth = depth + 1
        try:
            return super().compose_node(parent, index)
        finally:
            self._depth = depth


def yaml_problem(exc):
    """What a YAML error says, and where, without the file's text: the parser's words (the tokens it quotes
    left out) and the line and column, never the snippet PyYAML prints under them."""
    mark = getattr(exc, "problem_mark", None)
    if mark is None:
        return shown(" ".join(str(exc).split()))
    words = " ".join(p for p in (getattr(exc, "context", None), getattr(exc, "problem", None)) if p)
    words = re.sub(r"'[^']*'|\"[^\"]*\"|%r", "(...)", words)
    return shown(f"{words} (line {mark.line + 1}, column {mark.column + 1})")


def yaml_text(text, where, loader=_BoundedLoader):
    """Parse YAML text with the bounds; one UserError line (the parser's message, shortened) when it fails."""
    try:
        return yaml.load(text, Loader=loader)
    except yaml.YAMLError as exc:
        raise UserError(f"{where}: not valid YAML: {yaml_problem(exc)}") from None
    except ValueError as exc:   # a scalar no value can hold: 2020-13-45, an integer of 5000 digits
        raise UserError(f"{where}: not valid YAML: {shown(str(exc), 100)}") from None
    except RecursionError:
        raise UserError(f"{where}: nested too deep") from None


def load_yaml(path, what="input", loader=_BoundedLoader):
    """A YAML file read whole (regular, UTF-8, capped) and parsed with the bounds."""
    return yaml_text(read_text(path, what), f"{what} {name(path)}", loader)


def clipped(value, limit=MAX_FIELD_CHARS):
    """value (a text, or a list or mapping of them, as a record's field holds it) printable (errors.printable: an
    escape sequence in a foreign file never reaches a terminal, a report or a plot through a record) with every text
    of more than limit characters cut to its first limit and '... (cut from N characters)': what a record made from
    a foreign file keeps."""
    if isinstance(value, str):
        value = printable(value)
        return value if len(value) <= limit else f"{value[:limit]}... (cut from {len(value)} characters)"
    if isinstance(value, list):
        return [clipped(v, limit) for v in value]
    if isinstance(value, dict):
        return {clipped(k, limit): clipped(v, limit) for k, v in value.items()}
    return value


def finite(value, what, lo=None, hi=None, lo_open=False):
    """value as a float that is finite and within [lo, hi] ((lo, hi] with lo_open); UserError in one line else."""
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise UserError(f"{what} must be a number, got {shown(repr(value), 60)}") from None
    if not math.isfinite(x):
        raise UserError(f"{what} must be a finite number, got {shown(repr(value), 60)}")
    if lo is not None and (x < lo or (lo_open and x == lo)):
        raise UserError(f"{what} must be {'>' if lo_open else '>='} {lo:g}, got {x:g}")
    if hi is not None and x > hi:
        raise UserError(f"{what} must be <= {hi:g}, got {x:g}")
    return x
