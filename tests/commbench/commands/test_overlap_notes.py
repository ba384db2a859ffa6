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


def measured(size, comm, comp, over, repeat=0, **fields):
    """A total record as a run writes it: the real rules (hidden, ratio_note) on the timings given."""
    from commbench.cases.overlap_figures import ratio_note
    rec = {**total(size, comm, comp, over), "backend": "gloo", "world_size": 2, "local_world_size": 2, "nodes": 1,
           "emulated": False, "time_source": "cpu", "compute_threads": 1, "host_cpus": 2, "rank_threads": 7,
           "comm_us": comm, "compute_us": comp, "overlapped_us": over, "sequential_us": comm + comp, "wrong": 0,
           "compute_ratio_measured": comp / comm, "run_id": "r", "repeat": repeat, **fields}
    if rec["case"] != "ddp":
        del rec["buckets"]
    note = ratio_note(rec["compute_ratio"], comp / comm)
    return {**rec, **({"compute_ratio_note": note} if note else {})}


def printed(records, capsys):
    from commbench.commands.overlap import judge, print_overlap
    print_overlap(records + judge(records))
    return capsys.readouterr().out


def test_the_verdict_and_n_count_what_was_used(capsys):
    """2 repeats measured, 1 not figured (beyond the floor's noise): n reads 1/2 and the verdict says it used 1 of 2,
    instead of '2 repeats' followed by 'fewer than 2 repeats'."""
    pipelined = {"case": "pipelined", "chunk_bytes": 1 << 20, "inflight": 1, "max_bytes": 4 << 20}
    recs = [measured(4 << 20, 100, 100, 150), measured(4 << 20, 100, 100, 60, repeat=1),
            measured(4 << 20, 100, 100, 120, **pipelined), measured(4 << 20, 100, 100, 125, repeat=1, **pipelined)]
    text = printed(recs, capsys)
    rows = {line.split("\u2502")[1].strip(): line for line in text.splitlines() if line.startswith("\u2502")}
    assert rows["ddp B=4 R=1"].rstrip("\u2502 ").split("\u2502")[-2].strip() == "1/2", rows
    assert rows["pipelined 1024K x1 R=1"].rstrip("\u2502 ").split("\u2502")[-2].strip() == "2", rows
    verdict = next(line for line in text.splitlines() if line.startswith("  at 4M"))
    assert "(fewer than 2 figured repeats: no interval)" in verdict
    assert verdict.endswith("used 1 of 2 measurements of ddp B=4 R=1 (the rest not figured: see the note)"), verdict
    assert "fewer than 2 repeats" not in text


def test_compute_off_the_asked_ratio_is_marked_and_said(capsys):
    """Compute asked at 1x that came out 11x: kept, its ratio marked * in the table, one line says how far and where;
    within the band nothing is marked."""
    recs = [measured(4 << 20, 100, 1100, 1250), measured(4 << 20, 100, 1050, 1200, repeat=1),
            measured(8 << 20, 200, 210, 300), measured(8 << 20, 200, 190, 290, repeat=1)]
    text = printed(recs, capsys)
    cells = [line.split("\u2502") for line in text.splitlines() if line.startswith("\u2502 ddp")]
    ratios = [c[6].strip() for c in cells if len(c) > 8]
    assert ratios == ["10.75*", "1.00"], ratios
    line = next(ln for ln in text.splitlines() if ln.startswith("* compute/comm:"))
    assert "2 of 4 measurements' compute alone came out 10.50-11.00x their communication where 1x was asked" in line
    assert "(off by more than 1.5x; ddp B=4 R=1 at 4M): kept and marked" in line


def test_shared_cores_said_where_ranks_share_a_hosts_cpus(capsys):
    """Local CPU ranks, or emulated nodes, share one host's CPUs: the table says so and what it means; ranks on
    separate hosts, or on GPUs, do not get the line."""
    local = printed([measured(4 << 20, 100, 100, 150)], capsys)
    assert "; cores shared: see below" in local
    line = next(ln for ln in local.splitlines() if ln.startswith("shared cores:"))
    assert line.startswith("shared cores: 2 ranks on one host's 2 CPUs, each with 1 compute thread of its 7 OS "
                           "threads (gloo's beside it): compute and communication take turns on these cores"), line
    assert "oversubscribed" not in line
    two = printed([measured(4 << 20, 100, 100, 150, compute_threads=2)], capsys)
    assert "; 4 compute threads on 2 CPUs: compute alone is oversubscribed too" in two
    emulated = printed([measured(4 << 20, 100, 100, 150, emulated=True, local_world_size=1, nodes=2)], capsys)
    assert "shared cores: 2 ranks on one host's" in emulated
    for other in ({"local_world_size": 1, "nodes": 2}, {"time_source": "cuda_events", "backend": "nccl"}):
        assert "shared cores" not in printed([measured(4 << 20, 100, 100, 150, **other)], capsys)


def test_a_chunk_holding_every_payload_is_labelled_whole(capsys):
    """chunked --overlap adds a chunk of -e's size (one all_gather of the whole payload): its row reads 'whole',
    said once under the table, not '65536K x1'."""
    whole = {"case": "pipelined", "chunk_bytes": 64 << 20, "inflight": 1, "max_bytes": 64 << 20}
    cut = {**whole, "chunk_bytes": 1 << 20}
    text = printed([measured(4 << 20, 100, 100, 150, **whole), measured(4 << 20, 100, 100, 150, **cut)], capsys)
    assert "\u2502 pipelined whole R=1 " in text and "65536K" not in text and "pipelined 1024K x1 R=1" in text
    assert "whole = a chunk as large as -e: every payload in one operation, nothing pipelined" in text


def test_chunked_overlap_answers_against_the_whole_payload_row():
    """chunked --overlap's answer finds its one-all_gather baseline by the 'whole' label (it parsed '65536K'): the
    pipelined chunks that leave less exposed communication than ddp B=1 and than the whole payload are the answer."""
    from commbench.commands.chunked import overlap_answer
    size, big = 16 << 20, 64 << 20
    ring = {"case": "ddp", "buckets": 1}
    whole = {"case": "pipelined", "chunk_bytes": big, "inflight": 1, "max_bytes": big}
    cut = {**whole, "chunk_bytes": 1 << 20}
    recs = [measured(size, 100, 100, 100 + exposed + r, repeat=r, **cfg)
            for cfg, exposed in ((ring, 90), (whole, 95), (cut, 20)) for r in range(3)]
    answer, = overlap_answer(recs)
    assert answer["winner"] == "pipelined 1024K x1 R=1" and answer["beats_from_bytes"] == size, answer["reason"]
    assert "one plain all_gather (ratio" in answer["reason"]
