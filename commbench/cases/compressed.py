"""The compressed strategy: all_gather of the owned slices cast to bf16, or fp8 e4m3 with a per-rank scale."""
from benchcore.errors import UserError
from benchcore.lazy import lazy
from commbench.cases.case import TOTAL, Case, Timed
from commbench.cases.collectives import DTYPES
from commbench.cases.payload import Payload, factor, padded, payload_size
from commbench.model import alphabeta as model
from commbench.model.alphabeta import Phase

torch = lazy("torch", globals())

COMPRESS = {"bf16": "bfloat16", "fp8": "float8_e4m3fn"}   # wire type -> torch type name
FP8_MAX = 448.0


def _compressed(ctx, cfg, count, dtype, shared):
    p = Payload(ctx, cfg, count, dtype)
    narrow = getattr(torch, COMPRESS[cfg["compress"]])
    ag = ctx.comm.all_gather
    whole = p.piece * p.n
    own_start = p.rank * p.piece
    exact = torch.randn(whole, generator=torch.Generator().manual_seed(1234), dtype=torch.float32).to(ctx.device)
    exact[p.count:] = 0
    shard = exact[own_start:own_start + p.piece].clone()
    wire = p.empty(whole, narrow)
    out = p.empty(whole, torch.float32)
    scales = p.empty(p.n, torch.float32)
    fp8 = cfg["compress"] == "fp8"

    def run(a):
        mine = wire[own_start:own_start + p.piece]
        if fp8:
            scale = shard.abs().max().clamp(min=1e-30) / FP8_MAX
            mine.copy_((shard / scale).to(narrow))
            ag(scales, scale.reshape(1))
            ag(wire.view(torch.uint8), mine.view(torch.uint8))
            out.copy_(wire.to(torch.float32).view(p.n, p.piece).mul_(scales.view(p.n, 1)).view(-1))
        else:
            mine.copy_(shard.to(narrow))
            ag(wire, mine)
            out.copy_(wire.to(torch.float32))

    def check():
        """Elements outside the wire type's rounding bound; max errors over every rank."""
        err = (out[:p.count] - exact[:p.count]).abs()
        ref = exact[:p.count].abs()
        if fp8:
            bound = ref * 2.0 ** -4 + scales.repeat_interleave(p.piece)[:p.count] * 2.0 ** -9
        else:
            bound = ref * 2.0 ** -8
        errs = torch.tensor([err.max().item() if p.count else 0.0,
                             err.max().item() / ref.max().item() if p.count else 0.0],  # normwise
                            dtype=torch.float64, device=ctx.device)
        ctx.comm.all_reduce(errs, "max")
        return int((err > bound).sum().item()), {"max_abs_error": errs[0].item(), "max_rel_error": errs[1].item()}
    wire_bytes = p.count * torch.empty((), dtype=narrow).element_size()
    return Timed({TOTAL: run}, {TOTAL: factor("all_gather", p.n)}, lambda: None, lambda: p.poison(out),
                 lambda: out, check, lambda phase: {"wire_bytes": wire_bytes}, blocking=True)


def _compressed_configs(opts, dtype):
    if dtype != "float32":
        raise UserError("the compressed strategy casts float32 down; use --dtype float32")
    if not hasattr(torch, COMPRESS[opts.compress]):  # imports torch: only for the compressed strategy
        raise UserError(f"this torch build has no {opts.compress} type")
    return [{"case": "compressed", "compress": opts.compress, "in_place": False}]


def _compressed_model(cfg, size, shape, backend):
    """all_gather of the wire bytes (N x wire element / 4 B), plus fp8's all_gather of the n scales."""
    n = shape.n
    wire = size * DTYPES[COMPRESS[cfg["compress"]]].bytes / DTYPES["float32"].bytes
    terms = model.all_gather(wire, shape, backend)
    if cfg["compress"] == "fp8":
        terms += model.all_gather(4 * n, shape, backend)
    calls = 2 if cfg["compress"] == "fp8" else 1
    return {TOTAL: Phase(factor("all_gather", n), terms, nccl="all_gather", calls=calls)}


CASE = Case("compressed", "strategy", "all_gather", (TOTAL,), _compressed, _compressed_configs,
            describe=lambda cfg: cfg["compress"], check_size=payload_size, model=_compressed_model,
            # exact, shard, wire, out, and the check's error terms
            footprint=lambda cfg, count, n, elt: 8 * padded(count, n) * elt,
            fields={"compress": "compressed: wire type", "wire_bytes": "compressed: bytes on the wire",
                    "wire_busbw_gbps": "compressed: busbw counted in wire bytes",
                    "max_abs_error": "compressed: largest absolute error",
                    "max_rel_error": "compressed: normwise relative error"})
