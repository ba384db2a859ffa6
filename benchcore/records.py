"""Result records: one JSON object per line, appended and flushed per record.

Both tools write through RecordWriter and read through read_records, so a file
can mix commbench and iobench records; readers skip what they do not know.
"""
import datetime
import json
import os
import socket
import stat
import subprocess
import uuid
from pathlib import Path

from benchcore.errors import UserError

NO_FILE = os.devnull


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


def output_file(out):
    """--out of either tool, checked before anything runs: the path to append to, or None.

    None and /dev/null mean no file. A missing parent directory is created. Anything that
    exists and is not a regular file (a directory, /dev/full, a FIFO) is refused in one line.
    """
    if out is None or os.path.realpath(out) == NO_FILE:
        return None
    path = Path(out)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise UserError(f"--out {out}: {exc.strerror}") from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise UserError(f"--out {out} is a directory")
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise UserError(f"--out {out} is not a regular file (use /dev/null for no file)")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UserError(f"--out {out}: cannot create {path.parent}: {exc.strerror}") from None
    if not os.access(path.parent, os.W_OK) or (st is not None and not os.access(path, os.W_OK)):
        raise UserError(f"--out {out} is not writable")
    return str(path)


class RecordWriter:
    """Appends records to a JSONL file; each is flushed and fsynced before the next."""

    def __init__(self, path):
        self.path = Path(path)
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(self.path, "a", encoding="utf-8")

    def write(self, record):
        self._file.write(json.dumps(record, sort_keys=False, default=str) + "\n")
        self._file.flush()
        os.fsync(self._file.fileno())

    def close(self):
        self._file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def read_records(path, run_id=None, tool=None):
    """Records from a JSONL file; a torn last line (crash mid-write) is skipped."""
    records = []
    path = Path(path)
    if not path.exists():
        return records
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if run_id is not None and rec.get("run_id") != run_id:
                continue
            if tool is not None and rec.get("tool") != tool:
                continue
            records.append(rec)
    return records
