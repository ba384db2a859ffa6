"""The spellings the tools and the importers share: collective names (commbench's, in every spelling nccl-tests,
rccl-tests and people use), element types (torch's name, nccl-tests' name, bytes per element) and the short names of
record fields (busbw, p99, MB/s) thresholds and diff --metric take."""
import re
from dataclasses import dataclass

# The collectives commbench runs (commbench/cases/collectives.py has a row for each), then those nccl-tests /
# rccl-tests measure that commbench does not (their logs import under these names). A name is known in every
# spelling people use: all_reduce, allreduce, all-reduce, AllReduce (nccl-tests' own), alltoall; spelled the same
# once case and separators are dropped.
COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce", "all_to_all", "sendrecv")
NAMES = (*COLLECTIVES, "gather", "scatter", "all_to_allv", "hypercube")
_SPELLED = {re.sub(r"[^a-z0-9]", "", name): name for name in NAMES}


def named(word):
    """The collective a word spells ('allreduce', 'All-Reduce', 'AlltoAll', 'reduce_scatter'), else None."""
    return _SPELLED.get(re.sub(r"[^a-z0-9]", "", str(word).lower()))


def named_in(text):
    """The collectives a free text such as a file name names, in order, each once: its words (split at
    separators, case changes and digits) joined in runs of up to 3 adjacent words, the longest run first
    ('h100-all_reduce-2node.txt', 'AllGather16gpu.log', 'reduce_scatter_perf'); 'gpu_perf' names none."""
    words = re.findall(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+", str(text))
    found, i = [], 0
    while i < len(words):
        for j in range(min(len(words), i + 3), i, -1):
            name = named("".join(words[i:j]))
            if name:
                found += [name] if name not in found else []
                i = j
                break
        else:
            i += 1
    return found


@dataclass(frozen=True)
class Dtype:
    name: str          # torch's name (torch.<name>), the suite's
    nccl_tests: str    # how nccl-tests prints it
    bytes: int


TYPES = {d.name: d for d in [
    Dtype("float32", "float", 4), Dtype("float16", "half", 2), Dtype("bfloat16", "bfloat16", 2),
    Dtype("float64", "double", 8), Dtype("int8", "int8", 1), Dtype("uint8", "uint8", 1), Dtype("int32", "int32", 4),
    Dtype("uint32", "uint32", 4), Dtype("int64", "int64", 8), Dtype("uint64", "uint64", 8),
    Dtype("float8_e4m3fn", "f8e4m3", 1), Dtype("float8_e5m2", "f8e5m2", 1),
]}
# every spelling of a type in nccl-tests' and rccl-tests' tables (older versions: char, int, fp8_*) -> its Dtype
_NCCL_TESTS_TYPES = {**{d.nccl_tests: d for d in TYPES.values()},
                    **{alias: TYPES[name] for alias, name in (("char", "int8"), ("int", "int32"),
                                                              ("fp8_e4m3", "float8_e4m3fn"),
                                                              ("fp8_e5m2", "float8_e5m2"))}}


def nccl_tests_type(word):
    """(torch's name, bytes per element) of a type as nccl-tests or rccl-tests print it; (word, None) for a type
    this table does not know."""
    known = _NCCL_TESTS_TYPES.get(word)
    return (known.name, known.bytes) if known else (word, None)


# The names a person gives a field (thresholds, diff --metric), per tool; a record field's own name works too.
ALIASES = {
    "commbench": {"busbw": "busbw_gbps", "algbw": "algbw_gbps", "time": "time_us", "p50": "time_us_p50",
                  "p99": "time_us_p99"},
    "iobench": {"mb/s": "bw_mbps", "iops": "iops", "p50": "lat_p50_us", "p99": "lat_p99_us",
                "p99.9": "lat_p999_us", "lat": "lat_mean_us", "files/s": "files_per_s",
                # one name, one meaning: lat and P50/P99/P99.9 are per I/O; a file's or the end fsync's time apart
                "per-file": "file_lat_mean_us", "fsync": "fsync_lat_mean_us", "fsync-p99": "fsync_lat_p99_us",
                "end-fsync": "end_fsync_s"},
}
