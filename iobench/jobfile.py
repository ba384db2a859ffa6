"""A user's fio job file for `iobench run`: refused when it could write outside iobench's directory."""
from pathlib import Path

from benchcore.errors import UserError
from benchcore.units import parse_size

# Options that place files or run commands outside the private directory iobench hands fio.
REFUSED = {"directory", "opendir", "exec_prerun", "exec_postrun", "replay_redirect", "cgroup"}
# Options whose value names a file fio writes: only plain names (relative to that directory).
FILE_OPTIONS = {"filename", "filename_format", "write_iolog", "write_bw_log", "write_lat_log",
                "write_iops_log", "write_hist_log"}


def read_job_file(path):
    """(text, sections): sections as [(name, {option: value})], [global] merged into later jobs."""
    p = Path(path)
    if not p.is_file():
        raise UserError(f"job file {path} does not exist or is not a file")
    text = p.read_text(errors="replace")
    sections, defaults, current = [], {}, None
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line[0] in ";#":
            continue
        if line.startswith("[") and line.endswith("]"):
            name = line[1:-1].strip()
            current = defaults if name == "global" else {**defaults}
            if name != "global":
                sections.append((name, current))
            continue
        key, _, value = (part.strip() for part in line.partition("="))
        _check_option(path, number, key, value, line)
        if current is None:
            raise UserError(f"{path}:{number}: option {key!r} outside any [section]")
        current[key] = value
    if not sections:
        raise UserError(f"job file {path} defines no job ([name] section)")
    return text, sections


def _check_option(path, number, key, value, line):
    where = f"{path}:{number}"
    if line.startswith("include ") or key in REFUSED:
        raise UserError(f"{where}: {key.split()[0]!r} is not allowed in `iobench run`: it would reach "
                        f"outside the directory iobench creates (run plain fio for that)")
    if "${" in line:
        raise UserError(f"{where}: environment variables (${{...}}) are not allowed; write the value out")
    if key in FILE_OPTIONS and any("/" in part or part == ".." for part in value.split(":")):
        raise UserError(f"{where}: {key}={value} names a path; only plain file names are allowed "
                        f"(files go into iobench's private directory)")


def plain_size(text):
    """A fio size option as bytes, or None when it is not a single size (ranges, percentages)."""
    try:
        return parse_size(text)
    except UserError:
        return None


def working_set(opts):
    """Bytes one job section's files hold: size, or filesize x nrfiles, times numjobs; None if not plain sizes."""
    per_job = plain_size(opts["size"]) if "size" in opts else None
    if per_job is None and "filesize" in opts:
        filesize = plain_size(opts["filesize"])
        per_job = filesize * int(opts.get("nrfiles", 1)) if filesize else None
    return per_job * int(opts.get("numjobs", 1)) if per_job else None


def space_estimate(sections):
    """Bytes the jobs' files will hold (0 for a job whose sizes are not plain)."""
    return sum(working_set(opts) or 0 for _, opts in sections)
