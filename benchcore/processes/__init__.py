"""Process machinery both tools' launchers share: supervision, process groups, timeouts and /proc readers (procs),
torchrun command lines and the rank helpers (torchrun), a rendezvous endpoint and the route to it (route)."""
