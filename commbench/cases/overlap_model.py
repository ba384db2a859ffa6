"""The model's side of the overlap patterns: a pattern's schedule replayed on one link and one compute stream
(simulate), its step count, and its predicted figures from the communication's alpha-beta terms."""
from commbench.cases.chunked import chunks_of
from commbench.cases.collectives import DTYPES
from commbench.cases.overlap_schedule import AHEAD
from commbench.model.alphabeta import predict


def simulate(ahead, comm_s, compute_s, depth):
    """Seconds the overlapped schedule takes when operation i takes comm_s[i] on the one link (operations run in
    launch order, one at a time) and kernel i takes compute_s[i] on the one compute stream: the schedule of
    run_ahead (ahead) or run_behind, replayed on those two resources."""
    k, link, clock, done = len(comm_s), 0.0, 0.0, []

    def launch(j, at):
        nonlocal link
        link = max(link, at) + comm_s[j]
        done.append(link)
    if ahead:
        for j in range(min(depth, k)):
            launch(j, 0.0)
        for i in range(k):
            clock = max(clock, done[i])
            if i + depth < k:
                launch(i + depth, clock)
            clock += compute_s[i]
        return clock
    for i in range(k):
        clock += compute_s[i]
        if i >= depth:
            clock = max(clock, done[i - depth])
        launch(i, clock)
    return max(clock, done[-1])


def steps_of(cfg, size, n):
    """Communication operations (and kernel calls) of a pattern config at size bytes on n ranks."""
    if cfg.get("buckets"):
        return cfg["buckets"]
    elt = DTYPES[cfg["dtype"]].bytes
    return chunks_of(size // elt, n, elt, cfg["chunk_bytes"], 0)


def predicted(case, cfg, size, topo, world_size, nodes, backend, ratio):
    """{comm_us, compute_us, overlapped_us, exposed_comm_us, overlap_efficiency} the model gives pattern config
    cfg at size: the communication from its alpha-beta terms on the topology, compute = ratio x that, and the
    pattern's schedule replayed over equal steps."""
    pred = predict(case, cfg, size, topo, world_size, nodes, backend)["comm"]
    if pred.reason or pred.time_us is None:   # no ceiling on a tier it crosses, no own cost per call: no time
        return {"comm_us": None, "link_peak_reason": pred.reason or pred.time_reason}
    comm = pred.time_us
    steps, comp = steps_of(cfg, size, world_size), ratio * comm
    over = simulate(AHEAD[case.name], [comm / steps] * steps, [comp / steps] * steps, cfg.get("inflight") or steps)
    return {"comm_us": comm, "compute_us": comp, "overlapped_us": over, "exposed_comm_us": over - comp,
            "overlap_efficiency": (comm + comp - over) / min(comm, comp) if comm and comp else None}
