"""Rows without their header (an excerpt whose '#' lines were cut): the header a row's number of fields says, as
each nccl-tests version prints the rows of the collective (import --collective, or the file's name).

From NVIDIA/nccl-tests' sources: before 2.13 each test printed its own leading columns (src/<collective>.cu's
print_line_header), 2.13 on every test prints 'size count type redop root' (src/common.cu, later src/util.cu). How
a value is printed tells the versions apart where two print as many fields: 1.x prints times in ms with three
decimals ('%7.3f'), 2.x in us with at most two; 1.x to 2.12 print the max abs error ('%.0le': '0e+00', '2e-07'),
2.13 on the count of wrong elements ('%g': '0')."""
import re

from benchcore.errors import UserError

# the columns before 'time' that each test printed after 'size count type' before 2.13
# (alltoall's header said redop, its rows printed it blank)
OWN = {"all_reduce": "redop", "reduce_scatter": "redop", "all_to_all": "", "reduce": "redop root",
       "broadcast": "root", "gather": "root", "scatter": "root", "all_gather": "", "sendrecv": "", "hypercube": ""}
FIRST = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")     # the 1.x tests (2017)
TIME_MS = re.compile(r"\d+\.\d{3}$")                                             # 1.x: '%7.3f' ms
TIME_US = re.compile(r"\d+(?:\.\d{1,2})?$|\d\.\de[+-]\d+$")                     # 2.x: %.2f/.1f/.0f, huge: %.1e
ERROR = re.compile(r"\d(?:\.\d+)?e[+-]\d+$|N/A$")                                # '%.0le' or N/A
WRONG = re.compile(r"\d+$|N/A$|[1-9](?:\.\d+)?e\+\d+$")                          # '%g' of a count or N/A
PER_ITERATION = " i_min i_max i_p99 i_cv%"                                       # -I 1 (2026)

# (versions, columns before the placements (None: this version had no such test), a placement's columns, the time's
# and the check's forms, placements, fields after the last placement), newest first: where two versions print as many
# fields and both forms fit, the newer is read
LATEST = "size count type redop root"
GENERATIONS = (
    ("2.13 on", lambda c: LATEST, "time algbw busbw #wrong", TIME_US, WRONG, 2, 0),
    ("2.13 on with -S 1 (timestamps)", lambda c: LATEST, "time algbw busbw #wrong", TIME_US, WRONG, 2, 2),
    ("2.13 on with -I 1 (per-iteration)", lambda c: LATEST, "time algbw busbw #wrong" + PER_ITERATION, TIME_US, WRONG,
     2, 0),
    ("2.13 on with -I 1 -S 1", lambda c: LATEST, "time algbw busbw #wrong" + PER_ITERATION, TIME_US, WRONG, 2, 2),
    ("2.0 - 2.12", lambda c: f"size count type {OWN[c]}" if c in OWN else None, "time algbw busbw error", TIME_US,
     ERROR, 2, 0),
    ("1.x", lambda c: f"bytes N type {OWN[c]}" if c in FIRST else None, "time algbw busbw res", TIME_MS, ERROR,
     1, 0),
)


def layouts(collective):
    """[(versions, header line, fields per row, [(field index, its form)])] of the collective's rows in each
    nccl-tests version: the forms of each placement's time and check."""
    out = []
    for versions, lead, place, time, check, places, extra in GENERATIONS:
        first = lead(collective)
        if first is None:
            continue
        places = 2 if places == 2 or collective != "broadcast" else 1       # 1.x broadcast: out-of-place only
        line = " ".join([first] + [place] * places + (["timestamp"] if extra else []))
        n, width = len(first.split()), len(place.split())
        forms = [(n + k * width + i, form) for k in range(places) for i, form in ((0, time), (3, check))]
        out.append((versions, line, n + places * width + extra, forms))
    return out


def inferred(collective, toks):
    """(versions, header line) of a row of these fields (its tokens) of the collective; UserError naming the number
    of fields where no version prints such a row."""
    found = layouts(collective)
    for versions, line, width, forms in found:
        if width == len(toks) and all(form.match(toks[i]) for i, form in forms):
            return versions, line
    known = "; ".join(f"{width} in {versions}" for versions, _, width, _ in found)
    raise UserError(f"rows without a header: {len(toks)} fields per row, which no nccl-tests version prints for "
                    f"{collective} (fields per row: {known})")
