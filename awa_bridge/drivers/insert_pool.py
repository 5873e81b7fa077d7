"""The connections behind ``Client.insert`` / ``insert_many``: a stack of idle asyncpg connections.

Why not an asyncpg ``Pool``: a single enqueue is one short statement, and
the pool's own acquire and release (a shielded release task, the reset
coroutine, its queue of holders) cost about as much as the statement's
round trip, a third of ``Client.insert``. These connections only ever run
the bridge's insert statements, so they need none of that: a free one is
popped, used and pushed back, with no await unless a new one must be opened.

A connection goes back on the stack only when it is idle (not closed, no
transaction open) after a call that ended normally or with an error the
server reported (a unique conflict, a bad value). After anything else (the
caller's task cancelled mid-statement, a broken socket) its state is not
known, so it is dropped and the next call opens a fresh one. Dropping it
also ends its server process: a statement still running there (an insert
waiting on a lock when its caller was cancelled) must not commit later, and
closing the socket alone would not stop it.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

from ..errors import UniqueConflict, ValidationError
from ..sql import QUERIES
from .connect import connect_asyncpg

if TYPE_CHECKING:
    import asyncpg

log = logging.getLogger("awa_bridge.worker")


class InsertConnections:
    """At most ``size`` asyncpg connections to ``url``, opened on first use."""

    def __init__(self, url: str, size: int = 4) -> None:
        self.url = url
        self._idle: list[asyncpg.Connection[Any]] = []
        self._slots = asyncio.Semaphore(size)
        self._closed = False

    @asynccontextmanager
    async def acquire(self) -> AsyncIterator[asyncpg.Connection[Any]]:
        """A connection of its own for the duration of the block."""
        async with self._slots:
            conn = await self._take()
            try:
                yield conn
            except BaseException as exc:
                if _server_answered(exc):
                    self._give_back(conn)
                else:
                    await asyncio.shield(self._drop(conn))
                raise
            self._give_back(conn)

    async def _take(self) -> asyncpg.Connection[Any]:
        if self._closed:
            raise RuntimeError("the client was shut down: its insert connections are closed")
        while self._idle:
            conn = self._idle.pop()
            if not conn.is_closed():  # the server may have ended it while it sat idle
                return conn
        return await connect_asyncpg(self.url, application_name="awa-insert")

    def _give_back(self, conn: asyncpg.Connection[Any]) -> None:
        if not self._closed and not conn.is_closed() and not conn.is_in_transaction():
            self._idle.append(conn)
        else:
            conn.terminate()

    async def _drop(self, conn: asyncpg.Connection[Any]) -> None:
        pid = conn.get_server_pid()
        conn.terminate()
        try:
            other = await connect_asyncpg(self.url, application_name="awa-insert")
            try:
                query = QUERIES["terminate_backend"]
                await other.execute(query.numeric, *query.positional({"pid": pid}))
            finally:
                await other.close()
        except Exception as exc:  # the server is gone too, or refuses: nothing left to stop
            log.warning("could not end the server process %s of a dropped insert connection: %s", pid, exc)

    async def close(self) -> None:
        """Close the idle connections; ones in use are closed when their call ends."""
        self._closed = True
        idle, self._idle = self._idle, []
        await asyncio.gather(*(conn.close() for conn in idle), return_exceptions=True)


def _server_answered(exc: BaseException) -> bool:
    """True when the call failed in a way that leaves the connection idle and sound."""
    import asyncpg

    return isinstance(exc, (ValidationError, UniqueConflict, asyncpg.PostgresError, TypeError))
