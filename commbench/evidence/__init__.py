"""What a transport reports it actually ran, read from its own output: NCCL's INFO lines (nccl: the version-keyed
reader), Gloo's sockets (gloo), Open MPI's component selection (mpi); and whether each requested setting took
effect (applied: the one table, a row per variable, and judge_settings)."""
