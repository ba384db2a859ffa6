"""iobench: fio checkpoint workloads on real mounts, side by side, plus real PyTorch checkpoints."""
