"""commbench: collective-communication benchmarks (torchrun; NCCL on GPUs, Gloo on CPUs)."""
