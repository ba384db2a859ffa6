"""How ranks are started and watched: the launch options, one module per launcher (local, torchrun,
Slurm, mpirun), the record channel, liveness, and the supervision of a launch (execute)."""
