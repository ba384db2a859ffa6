"""Published checkpoint figures shown beside model-ckpt's save-mode comparison, each with its source.

They are not scaled to this run: each was measured at full size on its own GPUs, network and storage, and blocked time
follows the per-GPU state and the staging path, not the model's size alone. What carries over is the ratio of the
sync save to the async one's blocked time (`ratio`), which the table puts beside this run's own."""

# (what, sync save s or None, async blocked s or None, async background s or None, source)
ANCHORS = (
    ("7B, DCP async_save (IBM)", 148.8, 6.3, None,
     "PyTorch blog, 'Reducing Model Checkpointing Times by Over 10x with PyTorch Distributed Asynchronous "
     "Checkpointing'"),
    ("Llama3-70B on 1,856 H200s, process mode + plan caching", None, 0.78, 67.0,
     "PyTorch blog 2025-04-30, '6x faster async checkpointing' (background ~436 s -> ~67 s)"),
    ("Llama-8B on 8 x H100, NeMo Automodel", 27.34, 0.54, None, "NVIDIA-NeMo/Automodel pull 635 (2025-10)"),
    ("8B save on slow storage, torchtitan user", 360.0, None, None, "pytorch/torchtitan issue 1301 (~6 min)"),
)


def rows():
    """The anchors as table rows: the sync-over-async ratio where both are given."""
    return [{"anchor": what, "sync_s": sync, "blocked_s": blocked, "background_s": background,
             "ratio": sync / blocked if sync and blocked else None, "source": source}
            for what, sync, blocked, background, source in ANCHORS]
