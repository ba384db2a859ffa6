"""overlap's notes (issue 39): the README's example printed 46 near-identical `note:` lines, one per measurement the
floor rule touched; now one line per kind (taken at the floor, not figured) says how many, how far under, which
patterns and which sizes. The notes are the real rule's (cases/overlap_figures.hidden) on the timings given."""
from commbench.cases.case import TOTAL
from commbench.cases.overlap_figures import hidden
from commbench.commands.overlap import note_lines

DDP = {"case": "ddp", "buckets": 4, "compute_ratio": 1.0, "gemm": None, "compute_kernel": "gemm", "dtype": "float32"}


def total(size, comm, comp, over, **cfg):
    return {**DDP, **cfg, "phase": TOTAL, "size_bytes": size, **hidden(comm, comp, over)}


def test_one_note_line_per_kind_however_many_measurements():
    records = [total(4 << 20, 100, 50, 99), total(8 << 20, 100, 50, 97), total(64 << 20, 100, 50, 98.5,
                                                                                 compute_ratio=2.0),
               total(4 << 20, 100, 50, 80), total(16 << 20, 100, 50, 90), total(16 << 20, 100, 50, 120)]
    lines = list(note_lines(records + [{"event": "verdict", "reason": "x"}]))
    assert lines == [
        "note: 3 of 6 measurements overlapped 1.0-3.0 % under their communication alone (noise between phases): "
        "taken at that floor, fully hidden (ddp B=4 R=1, ddp B=4 R=2 at 4M-64M)",
        "note: 2 of 6 measurements overlapped 10.0-20.0 % under their communication alone: a phase was disturbed, "
        "beyond 5 % noise; not figured (ddp B=4 R=1 at 4M-16M)"], lines
    assert list(note_lines([total(4 << 20, 100, 50, 120)])) == []
