"""The fixture scripts' code (scripts/loop-fs, scripts/cephfs-local run it), importable by tests."""
