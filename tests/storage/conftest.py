"""Real storage fixtures (loop-device XFS, single-node CephFS); defined in tests/storage_fixtures.py."""
from tests.storage_fixtures import cephfs_mount, loop_xfs_mount  # noqa: F401
