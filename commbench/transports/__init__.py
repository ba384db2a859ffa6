"""How ranks move data: the primitives each transport supplies (torch.distributed, mpi4py), and the
catalogue of the environment variables those transports read."""
