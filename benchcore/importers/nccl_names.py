"""Which collective an imported nccl-tests/rccl-tests result measured, by the collective names of
benchcore/vocabulary.py (one source of names, in every spelling people use). A word that is not a collective
there (a binary renamed gpu_perf) never becomes one: the caller asks for --collective instead."""
import re

from benchcore import vocabulary
from benchcore.errors import UserError
from benchcore.inputs import shown

# the binary: X of X_perf (X_perf_mpi) on a command line, in a banner or a path
PROGRAM = re.compile(r"(?:^|[\s/=-])([A-Za-z0-9]+(?:_[A-Za-z0-9]+)*)_perf(?:_mpi)?\b")


def stem(program):
    """X of a binary X_perf (X_perf_mpi), else the word itself."""
    return (PROGRAM.findall(" " + program) or [program])[0]


def named(word):
    """The collective a word or binary names ('all_reduce_perf', 'AllReduce', 'alltoall'), else None."""
    return vocabulary.named(stem(word)) if word else None


def in_file_name(path):
    """The collectives a file's name names (several: it names none for sure)."""
    return vocabulary.named_in(path.rsplit("/", 1)[-1])


def option(word):
    """--collective's value as a collective; UserError when it names none."""
    name = vocabulary.named(word)
    if name is None:
        raise UserError(f"--collective {shown(repr(word), 60)}: not a collective (one of "
                        f"{', '.join(vocabulary.NAMES)}; allreduce, all-reduce, AllReduce are all_reduce)")
    return name


def unnamed(path, from_file, inside):
    """Why a result has no collective, and what to do, in one line (inside: what the file itself says)."""
    stems = PROGRAM.findall(" " + path.rsplit("/", 1)[-1])
    said = (f"names several ({', '.join(from_file)})" if from_file else
            f"says {stems[0]}_perf, and '{shown(stems[0], 40)}' is not a collective" if stems else "names none")
    return (f"no collective named: {inside}, and the file name {said}; say which with import "
            f"--collective NAME ({', '.join(vocabulary.NAMES)})")
