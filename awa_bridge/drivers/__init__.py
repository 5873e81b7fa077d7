"""Per-driver adapters: the only modules that touch a database driver.

They are internal (not for users to implement). Each adapter runs a named
``Query`` on the caller's own connection and returns rows as dicts, and can
COPY rows into a table. All semantics live in the SQL and in ``enqueue.py``.
"""

from .base import AsyncDriver, SyncDriver
from .detect import detect_async, detect_sync, is_async_connection

__all__ = ["AsyncDriver", "SyncDriver", "detect_async", "detect_sync", "is_async_connection"]
