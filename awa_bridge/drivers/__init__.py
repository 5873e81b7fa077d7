"""The driver boundary: the only modules that import a database driver or run a statement.

Internal (not for users to implement). ``base.py`` is the interface: each
adapter runs a named ``Query`` from ``queries.sql`` on a connection
(``fetch_all`` -> rows as dicts, ``execute``, ``copy_rows``, sync
``execute_script``), on the caller's own connection (``detect.py`` picks the
adapter: asyncpg, psycopg, SQLAlchemy, Django) or on one the bridge opened
(``connect.py``: the worker's asyncpg pools and LISTEN / maintenance
connections, psycopg for the heartbeat, migrations, CLI and Celery), whose
adapters add ``fetch`` / ``fetch_one`` (driver rows, no copy), ``transaction``,
``listen`` and closing. ``errors.py`` says which errors mean a lost
connection; ``transactions.py`` runs the bridge's own committed transactions
on a caller's connection. ``tests/test_driver_boundary.py`` keeps every other
module off the drivers. All semantics live in the SQL and in ``enqueue.py``.
"""

from .base import AsyncDriver, SyncDriver
from .detect import detect_async, detect_sync, is_async_connection

__all__ = ["AsyncDriver", "SyncDriver", "detect_async", "detect_sync", "is_async_connection"]
