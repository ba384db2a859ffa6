"""The acceptance report's 'at size' column (issue 49 item 8): a whole unit as nccl-tests spells it, any other size
readable and exact (it printed 'at size 22484704')."""
from commbench.commands.accept.report import _size


def test_sizes_read_as_a_person_reads_them_and_stay_exact():
    assert _size(16 << 20) == "16M" and _size(1024) == "1K" and _size(8) == "8"
    assert _size(22484704) == "21.4M (22,484,704 B)"
    assert _size(None) == "n/a"
