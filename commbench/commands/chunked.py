"""`commbench chunked`: does chunking beat ring and a plain all_gather, and with which settings (compare's tables
and verdicts, then the answer); with --overlap, the same question beside compute (overlap's tables and verdicts)."""
import click

from benchcore.errors import UserError, refuse_given
from benchcore.results import schema, stats
from benchcore.units import format_size
from commbench.cases.overlap import WHOLE
from commbench.commands import verdict
from commbench.commands.compare import PLOT_OPTION, run_strategies
from commbench.commands.options import (case_options, launch_options, measure_options, overlap_options, parse,
                                        repeats_option, time_budget_option)
from commbench.commands.overlap import judge, judged, plot, print_overlap
from commbench.runner import measure


def chunked_answer(outcomes, run_id):
    """The seed's question answered, as a verdict record whose reason is the paragraph."""
    outcomes = sorted(outcomes, key=lambda o: o.size)
    labels = list(dict.fromkeys(l for o in outcomes for g in o.groups for l in g.labels))
    chunked = [l for l in labels if l.split()[0] == "chunked"]
    plain = next((l for l in labels if l.split()[0] == "plain"), None)
    def top(label):  # payloads where this config is among the fastest, and its mean time over the best
        among = sum(1 for o in outcomes if o.group_of(label) in o.tied)
        return among, -stats.geometric_mean([o.group_of(label).time / o.groups[0].time for o in outcomes])
    best = max(chunked, key=top)

    def settled(o):  # one of ring, plain and the recommended config is significantly faster than the other two
        fam = list({id(g): g for g in (o.group_of("ring"), o.group_of(plain), o.group_of(best))}.values())
        fastest = min(fam, key=lambda g: g.time)
        return len(fam) > 1 and all((r := stats.ratio_interval(fastest.times, g.times)) is not None and r.high < 1
                                    for g in fam if g is not fastest)
    nothing = [o.size for o in outcomes if not settled(o)]
    tail = ("Among ring, plain and that config nothing is significantly better at " +
            ", ".join(format_size(s) for s in nothing) + "." if nothing else
            "At every payload one of ring, plain and that config is significantly faster than the other two.")
    beats_from, intervals = None, None
    for o in reversed(outcomes):
        mine = o.group_of(best)
        if plain in mine.labels or "ring" in mine.labels:
            break  # at or below its threshold: the same single all_gather as plain
        vs = [stats.ratio_interval(mine.times, o.group_of(other).times) for other in ("ring", plain)]
        if any(r is None or r.high >= 1 for r in vs):
            break
        beats_from, intervals = o.size, vs
    pick = _config_of(best)
    if beats_from is None:
        text = (f"Answer: do not chunk here: at the largest payload measured ({format_size(outcomes[-1].size)}) "
                f"no chunked config is significantly faster than both ring and plain all_gather, so there is no "
                f"payload from which chunking pays. {tail}")
        fields = dict(winner=None)
    else:
        ring_r, plain_r = intervals
        text = (f"Answer: use chunked with threshold {pick[0]}, chunk size {pick[1]}, in-flight {pick[2]} "
                f"({best}: among the fastest at {top(best)[0]} of {len(outcomes)} payloads). Chunking beats both ring "
                f"and plain all_gather from {format_size(beats_from)} up: time ratio vs ring {ring_r.text()}, vs plain "
                f"{plain_r.text()} at {format_size(beats_from)}. {tail}")
        fields = dict(winner=best, versus="ring, " + plain, ratio=ring_r.ratio, ratio_low=ring_r.low,
                      ratio_high=ring_r.high, beats_from_bytes=beats_from)
    return schema.event("commbench", "verdict", text, run_id=run_id, check="chunked", method=stats.METHOD,
                        sizes=[o.size for o in outcomes if beats_from and o.size >= beats_from],
                        no_difference_sizes=nothing, **fields)


def _config_of(label):
    """('16M', '2M', '1') from 'chunked 2M x1 >16M'."""
    _, chunk, inflight, threshold = label.split()[:4]
    return threshold.lstrip(">"), chunk, inflight.lstrip("x")


def overlap_answer(records):
    """chunked --overlap's answer, per compute ratio: from which payload pipelined chunks leave significantly less
    exposed communication than one all_reduce after the compute (ddp B=1) and than one plain all_gather (a single
    chunk), and by how much. A verdict record each, its reason the sentence."""
    run_id = next((r["run_id"] for r in records if r.get("run_id")), None)
    by_ratio = {}
    for rec in judged(records):
        by_ratio.setdefault(rec.get("compute_ratio"), []).append(rec)
    out = []
    for ratio, recs in sorted(by_ratio.items(), key=lambda kv: kv[0] or 0):
        outcomes = sorted(verdict.judge(recs), key=lambda o: o.size)
        beats_from, versus = None, None
        for o in reversed(outcomes):
            ring = next((g for g in o.groups if any(l.startswith("ddp B=1 ") for l in g.labels)), None)
            plain = next((g for g in o.groups if any(_single_chunk(l, o.size) for l in g.labels)), None)
            chunked = [g for g in o.groups if g not in (ring, plain) and g.labels[0].startswith("pipelined ")]
            if not (ring and plain and chunked):
                break
            best = min(chunked, key=lambda g: g.time)
            vs = [stats.ratio_interval(best.times, g.times) for g in (ring, plain)]
            if any(r is None or r.high >= 1 for r in vs):
                break
            beats_from, versus = o.size, (best.name, vs)
        where = f"at compute ratio {ratio:g}" if ratio else "with the given --gemm"
        if beats_from is None:
            text = (f"Answer {where}: pipelined chunks do not leave significantly less exposed communication than "
                    f"one all_reduce after the compute and one plain all_gather at the largest payload measured "
                    f"({format_size(outcomes[-1].size) if outcomes else 'none'}): do not chunk for overlap here.")
            fields = dict(winner=None)
        else:
            name, (vs_ring, vs_plain) = versus
            text = (f"Answer {where}: from {format_size(beats_from)} up, pipelined chunks ({name} at "
                    f"{format_size(beats_from)}) leave less exposed communication than one all_reduce after the "
                    f"compute (ratio {vs_ring.text()}) and than one plain all_gather (ratio {vs_plain.text()}).")
            fields = dict(winner=name, ratio=vs_ring.ratio, ratio_low=vs_ring.low, ratio_high=vs_ring.high,
                          beats_from_bytes=beats_from)
        out.append(schema.event("commbench", "verdict", text, run_id=run_id, check="chunked overlap",
                                method=stats.METHOD, compute_ratio=ratio, **fields))
    return out


def _single_chunk(label, size):
    """Whether a pipelined config's label names a chunk of at least the payload (one plain all_gather)."""
    parts = label.split()
    return parts[0] == "pipelined" and (parts[1] == WHOLE or
                                        parts[1].endswith("K") and int(parts[1][:-1]) << 10 >= size)


def run_chunked_overlap(kw, repeats):
    """`chunked --overlap`: pipelined chunk configs against one all_reduce (ddp B=1) and one plain all_gather
    (a chunk as large as the largest payload), every compute ratio, with the answer."""
    kw["buckets"] = "1"
    kw["chunk_sizes"] = f"{kw['chunk_sizes']},{kw['max_bytes']}"
    measure(["ddp", "pipelined"], parse(kw, repeats=repeats), print_overlap, "overlap patterns",
            lambda recs, path: plot(recs, path, "chunked --overlap"),
            lambda recs: judge(recs) + overlap_answer(recs))


@click.command()
@repeats_option(3)
@time_budget_option
@click.option("--overlap", is_flag=True,
              help="With compute beside the communication: pipelined chunks (the GEMM of chunk k while chunk k+1 is "
                   "on the wire) against one all_reduce after the compute and one plain all_gather, per compute "
                   "ratio; answers from which payload chunking hides more (see commbench overlap).")
@overlap_options()
@case_options()
@PLOT_OPTION
@measure_options("1M", "1G")
@launch_options
def chunked(repeats, overlap, **kw):
    """Does Megatron-style chunking beat ring and a plain all_gather, and with which settings?

    Sweeps the chunked all_gather's threshold, chunk size and in-flight depth against ring
    and plain (one all_gather of the whole payload), and ends with the answer: the
    recommended (threshold, chunk size, in-flight), the payload from which chunking is
    significantly faster, and the payloads where nothing is.

    \b
    Example:
      commbench chunked -b 4M -e 256M --chunk-size 1M,2M,4M --threshold 8M,16M --inflight 1,2,4 --nodes 2
      commbench chunked --overlap --compute-ratio 0.5,1,2 -b 4M -e 64M --chunk-size 1M,4M --nodes 2
    """
    if overlap:
        refuse_given(["buckets"], "chunked --overlap measures one all_reduce after the compute (ddp with 1 bucket); "
                                  "buckets go with commbench overlap --patterns ddp")
        refuse_given(["threshold"], "chunked --overlap cuts every payload into chunks, small ones too: no threshold "
                                    "sends one whole (its plain all_gather is one chunk as large as the payload)")
        run_chunked_overlap(kw, repeats)
        return
    for name, default in (("compute_ratio", "1"), ("gemm", None), ("compute_kernel", "gemm"), ("compute_threads", 1),
                          ("buckets", "4")):
        if kw.pop(name) != default:
            raise UserError(f"--{name.replace('_', '-')} sizes the compute of chunked --overlap: add --overlap")
    run_strategies(["ring", "plain", "chunked"], "ring", parse(kw, repeats=repeats), chunked_answer, "chunked")
