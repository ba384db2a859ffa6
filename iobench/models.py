"""Checkpoints shaped like a training job's: a model's parameters, its parallel layout (TP x PP x DP) and
ZeRO stage -> the files each rank writes, with their sizes.

The models and layouts are MLPerf Storage v2's checkpointing workloads (mlcommons/storage,
configs/dlio/workload/llama3_{8b,70b,405b,1t}.yaml: the transformer's shape, TP, PP, ZeRO stage; the DP degree and
the checkpoint sizes from that repository's README table of processes and sizes). What a checkpoint holds
(Megatron/DeepSpeed with a mixed-precision Adam):
  model states     the weights in 16-bit (2 bytes a parameter), one copy per model-parallel (TP x PP) shard, written
                   by the DP rank 0 of each shard; split over DP too under ZeRO-3
  optimizer states fp32 master weights + Adam's two moments (12 bytes a parameter), split over DP ranks (ZeRO >= 1)
A pipeline stage holds an equal share of the layers; the first also the embedding, the last the output head and
the final norm. A tensor-parallel rank holds 1/TP of its stage.
"""
from dataclasses import dataclass

from benchcore.errors import UserError

MAX_TENSOR_BYTES = 64 << 20   # the largest tensor of a file's state dict: what torch writes or reads in one call
WEIGHT_BYTES = 2       # fp16/bf16 weights
OPTIMIZER_BYTES = 12   # fp32 master weights + Adam's exp_avg and exp_avg_sq
# The most layout ranks (TP x PP x DP) a layout may have: 4 x the largest published training run's 16,384 GPUs (Llama
# 3 405B, "The Llama 3 Herd of Models", arXiv:2407.21783, section 3.3.1). Its dry run builds 131,072 files' entries
# (about 0.5 s and 60 MB here); an unbounded --tp or --dp would grow memory and time without end.
MAX_RANKS = 65536


@dataclass(frozen=True)
class Model:
    layers: int
    hidden: int
    ffn: int
    heads: int
    kv_heads: int
    vocab: int
    tp: int            # MLPerf Storage v2's layout
    pp: int
    dp: int
    zero: int
    published_bytes: float   # the checkpoint's size in MLPerf Storage's README, whose "GB" are GiB and "TB"
    #                          thousands of GiB (105 GB = 8.03e9 parameters x 14 B; 5.29 TB = 5,290 GiB for 405B)

    def layer_params(self):
        """Attention (q and o: hidden^2 each; k and v: hidden x kv_heads x head dim), the SwiGLU MLP (three
        hidden x ffn), two RMSNorms."""
        kv = self.kv_heads * self.hidden // self.heads
        return 2 * self.hidden * self.hidden + 2 * self.hidden * kv + 3 * self.hidden * self.ffn + 2 * self.hidden

    def params(self):
        """Every parameter: the layers, the embedding and the (untied) output head, the final norm."""
        return self.layers * self.layer_params() + 2 * self.vocab * self.hidden + self.hidden


GIB = 1 << 30
# name: the shape (mlcommons/storage configs/dlio/workload/llama3_*.yaml) and MLPerf Storage v2's layout and size
MODELS = {
    "llama3-8b": Model(32, 4096, 14336, 32, 8, 128256, tp=1, pp=1, dp=8, zero=3, published_bytes=105 * GIB),
    "llama3-70b": Model(80, 8192, 28672, 128, 8, 128256, tp=8, pp=1, dp=8, zero=3, published_bytes=912 * GIB),
    "llama3-405b": Model(126, 16384, 53248, 128, 8, 128256, tp=8, pp=32, dp=2, zero=1,
                         published_bytes=5290 * GIB),
    # the 1T shape's parameters (1.18e12) x 14 B give 15,430 GiB (0.86), not the README's 18 TB: its layout is kept, the
    # size is the shape's (`iobench model-ckpt --dry-run` shows both)
    "llama3-1t": Model(128, 25872, 98304, 192, 32, 128256, tp=8, pp=64, dp=2, zero=1, published_bytes=18000 * GIB),
}
KINDS = ("model", "optim")


@dataclass(frozen=True)
class Shard:
    """One file of a checkpoint: the layout rank that writes it, model or optimizer states, its bytes."""
    rank: int
    kind: str
    nbytes: int

    @property
    def name(self):
        return f"rank{self.rank:05d}_{self.kind}_states.pt"


@dataclass(frozen=True)
class Layout:
    model: str
    tp: int
    pp: int
    dp: int
    zero: int
    scale: float
    shards: tuple
    full_bytes: int      # the files' bytes at full scale, before any was scaled or kept at one byte

    @property
    def ranks(self):
        return self.tp * self.pp * self.dp

    @property
    def total_bytes(self):
        return sum(s.nbytes for s in self.shards)

    def describe(self):
        scale = "" if self.scale == 1 else f" at 1/{1 / self.scale:g} scale"
        return (f"{self.model}{scale}: TP={self.tp} PP={self.pp} DP={self.dp} ZeRO-{self.zero}, {self.ranks} ranks, "
                f"{len(self.shards)} files, {self.total_bytes / 1e6:,.0f} MB")


def model_named(name):
    if name not in MODELS:
        raise UserError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return MODELS[name]


def stage_params(model, stage, pp):
    """Parameters of pipeline stage `stage` of `pp`: its share of the layers (the first stages take one more
    when they do not divide evenly), the embedding on the first, the head and final norm on the last."""
    layers = model.layers // pp + (1 if stage < model.layers % pp else 0)
    params = layers * model.layer_params()
    if stage == 0:
        params += model.vocab * model.hidden
    if stage == pp - 1:
        params += model.vocab * model.hidden + model.hidden
    return params


def check_size(tp, pp, dp):
    """Refuse a layout of more than MAX_RANKS ranks before anything is built (one line, the limit and why)."""
    if tp * pp * dp > MAX_RANKS:
        raise UserError(f"--tp {tp} x --pp {pp} x --dp {dp} is {tp * pp * dp:,} layout ranks; model-ckpt builds at "
                        f"most {MAX_RANKS:,} (4 x the largest published training run's 16,384 GPUs), so that its "
                        f"layout's time and memory stay bounded")


def layout(name, tp=None, pp=None, dp=None, zero=None, scale=1.0):
    """The files a checkpoint of model `name` consists of (MLPerf's layout unless overridden), every one
    scaled by `scale` (at least one byte kept per file; a scale that would leave every file below a byte is
    refused, naming the smallest useful one)."""
    model = model_named(name)
    tp, pp, dp = tp or model.tp, pp or model.pp, dp or model.dp
    zero = model.zero if zero is None else zero
    if model.layers < pp:
        raise UserError(f"{name} has {model.layers} layers: --pp {pp} leaves a stage without one")
    if not 0 < scale <= 1:
        raise UserError(f"--scale must be above 0 and at most 1, got {scale:g}")
    if zero not in (0, 1, 2, 3):
        raise UserError(f"--zero must be 0, 1, 2 or 3, got {zero}")
    check_size(tp, pp, dp)
    shards, full, largest = [], 0, 0
    for stage in range(pp):
        per_tp = stage_params(model, stage, pp) / tp
        for t in range(tp):
            for d in range(dp):
                rank = (stage * tp + t) * dp + d
                weights = per_tp / dp if zero == 3 else (per_tp if d == 0 else 0)
                optim = per_tp / dp if zero >= 1 else (per_tp if d == 0 else 0)
                for kind, params, width in (("model", weights, WEIGHT_BYTES), ("optim", optim, OPTIMIZER_BYTES)):
                    if params:
                        full += round(params * width)
                        largest = max(largest, params * width)
                        shards.append(Shard(rank, kind, max(1, round(params * width * scale))))
    if largest * scale < 1:
        raise UserError(f"--scale {scale:g} leaves every file of {name}'s layout below one byte (its largest, "
                        f"{largest:,.0f} bytes, at that scale is {largest * scale:.3g}); the smallest useful scale "
                        f"is {1 / largest:.3g}")
    return Layout(name, tp, pp, dp, zero, scale, tuple(shards), full)
