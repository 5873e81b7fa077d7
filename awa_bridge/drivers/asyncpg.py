"""asyncpg adapter, for a ``Connection`` or one acquired from a pool.

Caller connections use ``fetch_all`` / ``execute`` / ``copy_rows``. The
worker's own connections (``connect.py``) also use ``fetch`` and
``fetch_one``, which hand back asyncpg's ``Record`` objects as they are (read
by column name, no copy into dicts: the claim and completion hot path),
``transaction``, ``listen`` and the close / terminate calls.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from ..sql import Query
from .base import Row

if TYPE_CHECKING:
    from asyncpg import Record
    from asyncpg.transaction import Transaction


class Asyncpg:
    name = "asyncpg"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def fetch_all(self, query: Query, params: dict[str, Any] | None = None) -> list[Row]:
        records = await self.conn.fetch(query.numeric, *query.positional(params or {}))
        return [dict(record) for record in records]

    async def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        schema, _, name = table.rpartition(".")
        await self.conn.copy_records_to_table(name, schema_name=schema or None, columns=list(columns), records=rows)

    async def execute(self, query: Query, params: dict[str, Any] | None = None) -> None:
        await self.conn.execute(query.numeric, *query.positional(params or {}))  # status text dropped

    # fetch, fetch_one and execute hand back asyncpg's own awaitable (plain ``def``): no
    # coroutine of ours per statement on the claim and completion path.

    def fetch(self, query: Query, params: dict[str, Any] | None = None) -> Awaitable[list[Record]]:
        """The rows as asyncpg's ``Record`` objects (``row["id"]``), not copied into dicts."""
        rows: Awaitable[list[Record]] = self.conn.fetch(query.numeric, *query.positional(params or {}))
        return rows

    def fetch_one(self, query: Query, params: dict[str, Any] | None = None) -> Awaitable[Record | None]:
        """The first row, or None (asyncpg's ``fetchrow``: the same single round trip)."""
        row: Awaitable[Record | None] = self.conn.fetchrow(query.numeric, *query.positional(params or {}))
        return row

    async def execute_script(self, sql: str) -> None:
        """Several statements, no parameters (asyncpg sends them with the simple protocol)."""
        await self.conn.execute(sql)

    def transaction(self) -> Transaction:
        """``async with db.transaction():`` (a savepoint when one is already open)."""
        transaction: Transaction = self.conn.transaction()
        return transaction

    async def listen(self, channel: str, on_payload: Callable[[str], None]) -> None:
        """LISTEN on ``channel``; ``on_payload(payload)`` runs on the loop for every NOTIFY."""

        def notified(_conn: object, _pid: int, _channel: str, payload: object) -> None:
            on_payload(str(payload))

        await self.conn.add_listener(channel, notified)

    def on_lost(self, callback: Callable[[], None]) -> None:
        """``callback()`` when the connection is closed or lost (asyncpg's termination listener)."""
        self.conn.add_termination_listener(lambda _conn: callback())

    def is_closed(self) -> bool:
        return bool(self.conn.is_closed())

    async def close(self, timeout: float = 2.0) -> None:
        """Close politely, or terminate when the server does not answer within ``timeout``."""
        try:
            await self.conn.close(timeout=timeout)
        except Exception:
            self.conn.terminate()

    def terminate(self) -> None:
        self.conn.terminate()


class AsyncpgPool:
    """An asyncpg pool whose ``acquire()`` yields ``Asyncpg`` adapters."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    def acquire(self) -> _Acquired:
        return _Acquired(self.pool.acquire())

    async def close(self, timeout: float | None = None) -> None:
        """Close every connection once it is released; after ``timeout`` seconds, those still held
        are closed under their holders (asyncpg's own close waits for them however long)."""
        if timeout is None:
            await self.pool.close()
            return
        try:
            await asyncio.wait_for(self.pool.close(), timeout)
        except TimeoutError:
            self.pool.terminate()


class _Acquired:
    """``async with pool.acquire() as db``: a plain class, no generator frame on the hot path."""

    __slots__ = ("context",)

    def __init__(self, context: Any) -> None:
        self.context = context

    async def __aenter__(self) -> Asyncpg:
        return Asyncpg(await self.context.__aenter__())

    def __aexit__(self, *exc: object) -> Awaitable[None]:
        done: Awaitable[None] = self.context.__aexit__(*exc)  # asyncpg's own awaitable, not wrapped
        return done


def as_asyncpg(conn: Any) -> Asyncpg:
    """The adapter of an asyncpg connection, or ``conn`` itself when it is one already.

    For the worker's statements that are also called on a caller's asyncpg
    connection (``fire_due_schedules`` in docs/howto/cron.md, the fencing tests).
    """
    return conn if type(conn) is Asyncpg else Asyncpg(conn)
