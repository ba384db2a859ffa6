"""The hierarchical strategy: reduce_scatter inside each node, all_reduce across nodes, all_gather inside."""
from commbench.cases.case import TOTAL, Case
from commbench.cases.payload import Payload, factor, padded, payload_size
from commbench.model import alphabeta as model
from commbench.model.alphabeta import Phase


def node_groups(ctx, cfgs):
    """(group of this rank's node, group of the ranks with its local rank on every node, L, M)."""
    nodes = sorted(set(ctx.node_of))
    members = [[r for r in range(ctx.world_size) if ctx.node_of[r] == node] for node in nodes]
    local = len(members[0])
    if any(len(m) != local for m in members):
        raise RuntimeError("hierarchical needs the same number of ranks on every node")
    intra = ctx.comm.subgroup(members)
    inter = ctx.comm.subgroup([[m[j] for m in members] for j in range(local)])
    return intra, inter, local, len(nodes)


def _hierarchical_factors(n, local, nodes):
    """busbw of each step on its own group, counted against the payload N (the inter-node step moves N/L)."""
    return {"reduce_scatter": factor("reduce_scatter", local), "all_reduce": factor("all_reduce", nodes) / local,
            "all_gather": factor("all_gather", local), TOTAL: factor("all_reduce", n)}


def _hierarchical(ctx, cfg, count, dtype, groups):
    intra, inter, local, nodes = groups
    p = Payload(ctx, cfg, count, dtype)
    buf = p.empty(p.piece * p.n)
    shard = p.empty(p.piece * p.n // local)
    own = [(p.rank * p.piece, (p.rank + 1) * p.piece)]

    def rs(a):
        return ctx.comm.reduce_scatter(shard, buf, "sum", group=intra, async_op=a)

    def ar(a):
        return ctx.comm.all_reduce(shard, "sum", group=inter, async_op=a)

    def ag(a):
        return ctx.comm.all_gather(buf, shard, group=intra, async_op=a)

    def total(a):
        rs(False)
        ar(False)
        return ag(a)
    return p.timed({"reduce_scatter": rs, "all_reduce": ar, "all_gather": ag, TOTAL: total},
                   _hierarchical_factors(p.n, local, nodes),
                   lambda: p.fill_owned(buf, own), lambda: buf)


def _hierarchical_model(cfg, size, shape, backend):
    """reduce_scatter of N inside each node (L ranks), all_reduce of the N/L shards across the M nodes (L such
    groups at once, sharing the node's NICs), all_gather of N inside each node; each phase bounded by its own
    tier: 2(L-1) alpha_intra + 2 (L-1)/L N beta_intra + 2(M-1) alpha_inter + 2(M-1)/M N beta_node."""
    local, nodes = shape.local, shape.nodes
    f = _hierarchical_factors(shape.n, local, nodes)
    intra, inter = model.Shape(local, local, 1), model.Shape(nodes, 1, nodes, groups=local)
    return {"reduce_scatter": Phase(f["reduce_scatter"], model.reduce_scatter(size, intra, backend), intra,
                                    "reduce_scatter"),
            "all_reduce": Phase(f["all_reduce"], model.all_reduce(size / local, inter, backend), inter, "all_reduce"),
            "all_gather": Phase(f["all_gather"], model.all_gather(size, intra, backend), intra, "all_gather"),
            TOTAL: Phase(f[TOTAL])}


CASE = Case("hierarchical", "strategy", "all_reduce", ("reduce_scatter", "all_reduce", "all_gather", TOTAL),
            _hierarchical, lambda opts, dtype: [{"case": "hierarchical", "in_place": True}], check_size=payload_size,
            setup=node_groups, footprint=lambda cfg, count, n, elt: 2 * padded(count, n) * elt, sums=True,
            model=_hierarchical_model)
