"""A user's fio job file for `iobench run`: parsed as fio parses it, then checked against an allow-list.

fio reads a line as: leading blanks dropped; a line starting with ';' or '#' is a comment;
otherwise the text is cut at the first ';' and at the first '#' (so `rw=write ; note` and
`[global] ; note` are valid), trailing blanks dropped; `[name]` opens a section, `key=value` or
`key` sets an option. Only options in ALLOWED may appear, each value checked by its checker:
no option may name a program, a library, a device setting, a trace file or a path, since fio
must write only inside the private directory iobench hands it.

The file may be anything a user names (a link to /etc/shadow): a refusal gives the line's number and the reason,
and an option's name only where it is a name (benchcore.inputs.key), never a value or a line.
"""
import re

from benchcore.errors import UserError
from benchcore.inputs import key, name, read_text
from benchcore.importers.fio_json import plain_size  # noqa: F401 (iobench.jobfile.working_set is used elsewhere)
from benchcore.importers.fio_json import working_set

# I/O engines that test a file system through files in the directory.
ENGINES = {"psync", "sync", "pvsync", "pvsync2", "vsync", "libaio", "io_uring", "posixaio", "mmap", "splice",
           "falloc", "ftruncate", "filecreate", "filestat", "filedelete", "dircreate", "dirstat", "dirdelete"}
_NAME = re.compile(r"^[A-Za-z0-9_.,+=%@$-]+$")   # a plain file name (fio's $jobnum/$filenum allowed)
_INT = re.compile(r"^\d+$")
_PLAIN = re.compile(r"^[A-Za-z0-9_.,:%/+-]*$")   # sizes, ranges, percentages, splits, times


def _engine(value):
    return None if value in ENGINES else f"this ioengine is not allowed (allowed: {', '.join(sorted(ENGINES))})"


def _names(value):
    parts = value.split(":")
    bad = [p for p in parts if not _NAME.match(p) or p in (".", "..", "-") or p.startswith("-")]
    return "{key} names a path or a special file; only plain file names are allowed " \
           "(files go into iobench's private directory)" if bad or not value else None


def _int(value):
    return None if _INT.match(value) else "{key} is not a whole number"


def _plain(value):
    return None if _PLAIN.match(value) else "{key}: unexpected characters"


def _flag(value):
    return None if value in ("", "0", "1") else "{key} must be 0 or 1"


def _thread(value):
    # iobench runs jobs as threads of one fio (forked jobs call setsid() and would outlive a killed fio)
    return None if value in ("", "1") else "{key}: iobench runs jobs as threads (thread=1)"


# option -> value checker (None: the value is fine; else the refusal, {key} filled in).
ALLOWED = {"ioengine": _engine, "filename": _names, "filename_format": _names, "name": _names,
           "description": lambda v: None, "thread": _thread}
ALLOWED.update(dict.fromkeys((
    "numjobs", "iodepth", "iodepth_batch", "iodepth_batch_submit", "iodepth_batch_complete",
    "iodepth_batch_complete_min", "iodepth_batch_complete_max", "iodepth_low", "nrfiles", "openfiles",
    "fsync", "fdatasync", "loops", "rwmixread", "rwmixwrite", "percentage_random", "randseed",
    "buffer_compress_percentage", "dedupe_percentage", "thinktime_blocks", "rate_iops", "rate_iops_min",
    "thinktime", "thinktime_spin", "write_barrier"), _int))
ALLOWED.update(dict.fromkeys((
    "direct", "buffered", "sync", "end_fsync", "fsync_on_close", "create_on_open", "create_only",
    "time_based", "norandommap", "randrepeat", "allrandrepeat", "zero_buffers", "refill_buffers",
    "scramble_buffers", "invalidate", "pre_read", "unlink", "unlink_each_loop", "overwrite", "file_append",
    "stonewall", "wait_for_previous", "new_group", "group_reporting", "lat_percentiles",
    "clat_percentiles", "slat_percentiles", "disable_lat", "disable_clat", "disable_slat",
    "disable_bw_measurement", "gtod_reduce", "unique_filename", "hipri", "fixedbufs", "registerfiles",
    "userspace_reap", "exitall", "exitall_on_error", "serialize_overlap", "do_verify", "verify_fatal",
    "continue_on_error"), _flag))
ALLOWED.update(dict.fromkeys((
    "rw", "readwrite", "bs", "blocksize", "bsrange", "blocksize_range", "bssplit", "ba", "blockalign",
    "size", "filesize", "io_size", "io_limit", "offset", "offset_increment", "runtime", "ramp_time",
    "startdelay", "file_service_type", "random_distribution", "random_generator", "fallocate", "rate",
    "rate_min", "rate_process", "fadvise_hint", "verify", "verify_backlog", "percentile_list", "kb_base",
    "unit_base", "buffer_compress_chunk", "ignore_error", "lockfile", "max_latency", "sync_file_range",
    "number_ios"), _plain))


def fio_line(raw):
    """A job-file line as fio reads it: comments cut, blanks stripped ('' when nothing is left)."""
    line = raw.strip()
    if line[:1] in (";", "#"):
        return ""
    return re.split(r"[;#]", line, maxsplit=1)[0].strip()


def read_job_file(path):
    """(text, sections): sections as [(name, {option: value})], [global] merged into later jobs.

    Refuses (UserError, one line) anything outside the allow-list, before fio starts."""
    text = read_text(path, "job file")
    sections, defaults, current, starts = [], {}, None, {}
    for number, raw in enumerate(text.splitlines(), 1):
        where = f"{name(path)}:{number}"
        if "${" in raw:
            raise UserError(f"{where}: environment variables (${{...}}) are not allowed; write the value out")
        line = fio_line(raw)
        if not line:
            continue
        if line.startswith("[") and line.endswith("]"):
            job = line[1:-1].strip()
            current = defaults if job == "global" else {**defaults}
            if job != "global":
                if _names(job):
                    raise UserError(f"{where}: a job's name must be a plain name")
                sections.append((job, current))
                starts[id(current)] = number
            continue
        option, _, value = (part.strip() for part in line.partition("="))
        _check_option(where, option, value)
        if current is None:
            raise UserError(f"{where}: option {key(option)} outside any [section]")
        current[option] = value
    if not sections:
        raise UserError(f"job file {name(path)} defines no job ([name] section)")
    for _, opts in sections:
        block = plain_size(opts.get("bs", opts.get("blocksize", "4k")))
        if opts.get("direct") == "1" and block and block % 512:
            raise UserError(f"{name(path)}:{starts[id(opts)]}: this job's bs is not a multiple of 512 bytes, which "
                            "O_DIRECT needs")
    return text, sections


def _check_option(where, option, value):
    word = option.split()[0] if option.split() else option
    if word not in ALLOWED:
        raise UserError(f"{where}: option {key(word)} is not allowed in `iobench run` (only options that shape I/O "
                        "on files in iobench's private directory are; run plain fio for anything else)")
    why = ALLOWED[word](value)
    if why:
        raise UserError(f"{where}: {why.replace('{key}', word)}")


def space_estimate(sections):
    """Bytes the jobs' files will hold (0 for a job whose sizes are not plain)."""
    return sum(working_set(opts) or 0 for _, opts in sections)
