"""Small asyncio helpers shared by the worker's loops."""

from __future__ import annotations

import asyncio
import contextlib


async def sleep_unless(stopping: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` or until ``stopping`` is set, whichever comes first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), timeout=seconds)


async def keep_session(conn: object) -> None:
    """An asyncpg pool ``reset`` that keeps the session as it is.

    For pools whose connections only ever run this package's own statements
    (no LISTEN, advisory locks, cursors or settings): asyncpg still rolls back a
    transaction left open, and skipping its default reset saves a round trip on
    every release.
    """
