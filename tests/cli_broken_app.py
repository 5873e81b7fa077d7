"""A worker module whose own import fails (tests/test_user_paths.py: the CLI names the missing dependency)."""

import awa_bridge_no_such_dependency  # noqa: F401
