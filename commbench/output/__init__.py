"""What a measuring command prints on stdout: tables (tables.py: rich tables, one per collective and placement),
nccl-tests' own text (nccltests.py), either streamed row by row to a pipe as it is measured (stream.py for the
tables, nccltests.NcclStream for the text); render() picks the --format."""
from benchcore.report.render import emit
from commbench.output.nccltests import print_nccl_tests


def render(records, fmt, table_fn):
    """stdout in the chosen --format: table_fn's tables, nccl-tests' text, JSON lines or CSV."""
    if fmt == "nccl-tests":
        print_nccl_tests(records)
    else:
        emit(records, fmt, table_fn)
