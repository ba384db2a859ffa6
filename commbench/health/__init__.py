"""A node's health under the numbers: GPUs through NVML, InfiniBand ports through sysfs, XIDs through the kernel
log (one module per source), judged by one table of checks with DCGM's and gpud's thresholds (checks.py);
`commbench node` (commbench/commands/node.py) prints it."""
