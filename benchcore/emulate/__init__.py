"""Real stand-ins for what a test or demo machine lacks, each a script with up/status/down (skeleton): network
namespaces as nodes (netns), a Slurm cluster on them (slurm_cluster), a loop-device file system (loop_fs) and a
single-node CephFS (cephfs_local). Standard library only: scripts/ runs them under the system python3."""
