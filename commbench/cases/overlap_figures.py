"""The overlap figures a pattern's total record carries: the overlapped time against its parts alone (exposed
communication, overlap efficiency, the floor's noise rule), the slowdowns of each part beside the other, and
the model's prediction of the overlapped run over the measured compute."""
from commbench.cases import compute
from commbench.cases.case import TOTAL
from commbench.cases.overlap_model import simulate
from commbench.cases.overlap_schedule import PHASES

FLOOR_NOISE = 0.05     # an overlapped time at most this far under its longer part alone is noise (see hidden)
RATIO_BAND = 1.5       # compute alone / communication alone off the asked ratio by more than this factor: marked


def ratio_note(asked, measured):
    """Why a measurement's compute is not what was asked ('compute 11.0x its communication where 1x was asked'), or
    None within RATIO_BAND (and with --gemm, which asks no ratio)."""
    if not asked or not measured or 1 / RATIO_BAND <= measured / asked <= RATIO_BAND:
        return None
    return (f"compute {measured:.3g}x its communication where {asked:g}x was asked (outside {1 / RATIO_BAND:.2g}-"
            f"{RATIO_BAND:g}x of it): the figures are for the ratio measured")


def hidden(comm, comp, over):
    """{exposed_comm_us, overlap_efficiency[, overlap_note]} of an overlapped time against its parts alone. It
    cannot beat its longer part alone (its floor): measured under it, that part ran slower alone (noise between
    phases); within FLOOR_NOISE the figures are taken at the floor and the note says so, beyond it they are n/a."""
    floor, under = max(comm, comp), 1 - over / max(comm, comp)
    if under <= 0:
        return {"exposed_comm_us": over - comp, "overlap_efficiency": (comm + comp - over) / min(comm, comp)}
    note = f"overlapped {100 * under:.1f} % under its {'communication' if comm >= comp else 'compute'} alone"
    if under > FLOOR_NOISE:
        return {"exposed_comm_us": None, "overlap_efficiency": None,
                "overlap_note": f"{note}: a phase was disturbed, beyond {100 * FLOOR_NOISE:.0f} % noise; not figured"}
    return {"exposed_comm_us": floor - comp, "overlap_efficiency": 1.0,
            "overlap_note": f"{note} (noise between phases): taken at that floor, fully hidden"}


def figures(ctx, cfg, kernel, records, per_call, per_span, ahead, depth, steps):
    """The overlap figures of one measured set (records by phase), rank-averaged where measured per rank."""
    comm, comp, seq, over = (records[p]["time_us"] for p in PHASES)
    mean = lambda v: None if v is None else sum(x for x, in ctx.comm.gather_floats([v])) / ctx.world_size  # noqa
    alone, inside = mean(per_call.get("compute")), mean(per_call.get(TOTAL))
    span_alone, span_inside = mean(per_span.get("comm")), mean(per_span.get(TOTAL))
    out = {"comm_us": comm, "compute_us": comp, "sequential_us": seq, "overlapped_us": over, **hidden(comm, comp, over),
           "sequential_efficiency": (comm + comp - seq) / min(comm, comp),
           "compute_slowdown": inside / alone if alone and inside else None,
           "comm_slowdown": span_inside / span_alone if span_alone and span_inside else None,
           "compute_tflops": compute.flops(kernel.kind, kernel.m, kernel.n, kernel.k) / alone / 1e12 if alone else None,
           "compute_ratio_measured": comp / comm}
    note = ratio_note(cfg.get("compute_ratio"), comp / comm)
    if note:
        out["compute_ratio_note"] = note
    predicted_comm = records["comm"].get("predicted_time_us")
    if predicted_comm and comp:   # the link's predicted time per step; the kernel's measured time alone per step
        pred = simulate(ahead, [predicted_comm / steps] * steps, [comp / steps] * steps, depth)
        out.update(predicted_overlapped_us=pred, predicted_exposed_comm_us=pred - comp,
                   predicted_overlap_efficiency=(predicted_comm + comp - pred) / min(predicted_comm, comp))
    return out
