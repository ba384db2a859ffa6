"""Result records: one JSON object per line, appended on a fresh line and flushed per record.

Both tools write through RecordWriter and read through read_records, so a file
can mix commbench and iobench records; readers skip what they do not know.
"""
import datetime
import json
import math
import os
import socket
import stat
import subprocess
import sys
import uuid
from json.encoder import encode_basestring_ascii as _json_str
from pathlib import Path

from benchcore.errors import UserError
from benchcore.files import check_append, make_parents, open_append
from benchcore.inputs import MAX_RECORD_BYTES, lines, name, regular_file

NO_FILE = os.devnull
WARNINGS_PER_FILE = 5            # lines named one by one; the rest of a file's bad lines are counted in one more
_ENCODER = json.JSONEncoder(default=str, allow_nan=False)


def new_run_id():
    """Short unique id, sortable by time: 20261202T130405-1a2b3c."""
    stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%S")
    return f"{stamp}-{uuid.uuid4().hex[:6]}"


def timestamp():
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


def hostname():
    return socket.gethostname()


def git_revision():
    """The suite's git revision, '-dirty' when tracked files differ from it; 'unknown' outside a checkout."""
    here = str(Path(__file__).resolve().parent)
    try:
        rev = subprocess.run(["git", "-C", here, "rev-parse", "--short=12", "HEAD"],
                             capture_output=True, text=True, timeout=5)
        dirty = subprocess.run(["git", "-C", here, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    if rev.returncode:
        return "unknown"
    return rev.stdout.strip() + ("-dirty" if dirty.returncode == 0 and dirty.stdout.strip() else "")


def version_option():
    """--version for a tool's click group: the suite's version and the git revision it runs from (what records carry
    as versions.suite), so a result can be traced to the code that made it."""
    from importlib.metadata import version

    import click  # here: a rank imports this module, never click

    def show(ctx, _, value):
        if value and not ctx.resilient_parsing:
            click.echo(f"{ctx.find_root().info_name} {version('commbench-iobench')} (git {git_revision()})")
            ctx.exit()
    return click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=show,
                        help="Show the version and the git revision, then exit.")


def output_file(out):
    """--out of either tool, checked before anything runs: the path to append to, or None.

    None and /dev/null mean no file. A missing parent directory is created. Anything that
    exists and is not a regular file (a directory, /dev/full, a FIFO) is refused in one line.
    """
    if out is None or os.path.realpath(out) == NO_FILE:
        return None
    path = Path(out)
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UserError(f"--out {out}: {exc.strerror}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise UserError(f"--out {out} is a directory")
    if st is not None and not stat.S_ISREG(st.st_mode) and not stat.S_ISLNK(st.st_mode):
        raise UserError(f"--out {out} is not a regular file (use /dev/null for no file)")
    check_append(path, "--out")
    try:
        make_parents(path, "--out")
    except OSError as exc:
        raise UserError(f"--out {out}: cannot create {path.parent}: {exc.strerror}") from None
    if not os.access(path.parent, os.W_OK) or (st is not None and not os.access(path, os.W_OK)):
        raise UserError(f"--out {out} is not writable")
    return str(path)


def new_output(path, what, suffixes=()):
    """An output path other than --out (a plot, a kept fio JSON, a report file), checked before anything runs:
    never a file that exists (this run did not create it: it is the user's), a suffix among `suffixes` when
    given, a directory that exists (or can be made) and is writable. Returns the path, or None for None."""
    if path is None:
        return None
    shown_path = name(path)
    if suffixes and not str(path).lower().endswith(tuple(suffixes)):
        raise UserError(f"{what} {shown_path}: must end in {' or '.join(suffixes)}")
    if os.path.lexists(path):
        raise UserError(f"{what} {shown_path} exists; refusing to replace a file this run did not create "
                        "(choose a new name or remove it)")
    parent = Path(path).parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"{what} {shown_path}: cannot create {name(parent)}: {exc.strerror}") from None
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UserError(f"{what} {shown_path}: {name(parent)} is not writable")
    return str(path)


PLOT_SUFFIXES = (".png", ".svg", ".pdf")


def new_output_option(what, suffixes=()):
    """A click callback checking an output option with new_output as the command line is read, so a refusal
    comes before anything runs: `@click.option("--plot", callback=new_output_option("--plot", PLOT_SUFFIXES))`."""
    return lambda ctx, param, value: new_output(value, what, suffixes)


def _finite(value):
    """value with every float that is not finite replaced by None, and the paths of those replaced."""
    if isinstance(value, float) and not math.isfinite(value):
        return None, [""]
    if isinstance(value, dict):
        out, bad = {}, []
        for k, v in value.items():
            out[k], sub = _finite(v)
            bad += [f"{k}.{b}" if b else str(k) for b in sub]
        return out, bad
    if isinstance(value, (list, tuple)):
        pairs = [_finite(v) for v in value]
        return [v for v, _ in pairs], [f"{i}.{b}" if b else str(i) for i, (_, sub) in enumerate(pairs) for b in sub]
    return value, []


def row_format(base, own):
    """base (a record) as a %-format with a %s hole for each of its fields in own (in base's order) and a last
    hole for fields some records add (', "root": 0'): the rows of an imported table become record lines without
    a dict and an encoding each. ValueError where base is not finite JSON."""
    return "{" + ", ".join(_json_str(k) + ": " + ("%s" if k in own else _ENCODER.encode(v).replace("%", "%%"))
                           for k, v in base.items()) + "%s}"


def dumps(record):
    """One record as a JSON line: never NaN or Infinity (null instead, the fields named in `nonfinite`). A str is
    a record already encoded (an imported table row, by row_format) and is its own line."""
    if type(record) is str:
        return record
    try:
        return _ENCODER.encode(record)
    except ValueError:          # a float that is not finite somewhere
        pass
    clean, bad = _finite(record)
    if bad:
        clean["nonfinite"] = sorted(set(clean.get("nonfinite") or []) | set(bad))
    return json.dumps(clean, sort_keys=False, default=str, allow_nan=False)


class RecordWriter:
    """Appends records to a JSONL file, starting on a fresh line (a torn last line from a crash never swallows
    the first new record); each record is flushed and fsynced before the next, or, with every=False (bulk
    conversion), once at close. what: how a refusal names the file (its option)."""

    def __init__(self, path, every=True, what="--out"):
        self.path, self.every = Path(path), every
        make_parents(self.path, what)
        self._file = open_append(self.path, what, buffering=1 << 20 if not every else -1)
        size = os.fstat(self._file.fileno()).st_size
        if size and os.pread(self._file.fileno(), 1, size - 1) != b"\n":
            self._file.write("\n")

    def write(self, record):
        self._file.write(dumps(record) + "\n")
        if self.every:
            self._file.flush()
            os.fsync(self._file.fileno())

    def close(self):
        if not self.every and not self._file.closed:
            self._file.flush()
            os.fsync(self._file.fileno())
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_records(path, run_id=None, tool=None, what=None):
    """Records from a JSONL file (none when it does not exist); a line that is not a JSON object (a torn last
    line after a crash, a line of something else) is skipped with a warning naming the file and line, and the
    rest are kept. The file must be regular (a FIFO or device is refused, never read) and is read line by line.
    With what (how an error names the file: '--fit'), a file of which no line is a record is refused in one
    line instead (a binary file, a file of something else)."""
    if not os.path.lexists(path):
        return []
    regular_file(path, what or "record file")
    records, found, bad, skipped = [], 0, [], 0
    with open(path, "rb") as f:
        for number, line, _ in lines(f, MAX_RECORD_BYTES):
            rec = _record(line)
            if rec is None:
                if line.strip():
                    skipped += 1
                    if len(bad) < WARNINGS_PER_FILE:
                        bad.append(number)
                continue
            found += 1
            if (run_id is None or rec.get("run_id") == run_id) and (tool is None or rec.get("tool") == tool):
                records.append(rec)
    if skipped and what and not found:
        raise UserError(f"{what} {name(path)}: not a record file (JSONL): no line is a JSON record "
                        f"(line {bad[0]} is not)")
    _warn(path, bad, skipped)
    return records


def _record(line):
    """The JSON object on one line (bytes or text), or None."""
    try:
        rec = json.loads(line)
    except (ValueError, RecursionError):
        return None
    return rec if isinstance(rec, dict) else None


def _warn(path, numbers, skipped):
    """One warning per line in numbers (the first few skipped), one more counting the other skipped lines."""
    for number in numbers:
        print(f"warning: {name(path)}:{number}: not a JSON record (a torn line from a crash?); skipped",
              file=sys.stderr)
    if skipped > len(numbers):
        print(f"warning: {name(path)}: {skipped - len(numbers)} more lines that are not JSON records skipped",
              file=sys.stderr)


def parse_line(line, path, number):
    """The JSON object on one line of a record file; None (after a warning) when the line holds none."""
    if not line.strip():
        return None
    rec = _record(line)
    if rec is None:
        _warn(path, [number], 1)
    return rec
