"""What commbench times: the Case contract, the one registry, and every case in it (collectives,
strategies, point-to-point, node pairs, overlap patterns); the test-only faults around a case's run."""
