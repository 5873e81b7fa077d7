"""psycopg 3 adapters (sync and async); also the target SQLAlchemy and Django unwrap to for COPY.

``PsycopgSync`` also serves the connections the bridge opens itself (the
CLI, the heartbeat, migrations: see ``connect.py``): there it adds
``transaction()``, ``commit()`` and closing, and ``with db:`` behaves like
psycopg's ``with conn:`` (commit on a clean exit, then close).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from psycopg import ProgrammingError
from psycopg.pq import ExecStatus, TransactionStatus
from psycopg.rows import tuple_row

from ..sql import Query
from .base import Row, column_names, copy_statement

TUPLES_OK = ExecStatus.TUPLES_OK
COMMAND_OK = ExecStatus.COMMAND_OK


def _has_rows(cursor: Any) -> bool:
    # Cheaper than ``cursor.description``, which builds a Column per column on each access.
    result = cursor.pgresult
    return result is not None and result.status == TUPLES_OK


def _pipelined(cursor: Any) -> bool:
    """True when the statement just executed has no result yet: the connection is in pipeline mode,
    where the result arrives at the first fetch (outside a pipeline ``execute`` waits for it)."""
    return cursor.pgresult is None


def _rowless(cursor: Any) -> bool:
    """After a fetch raised ``ProgrammingError`` in a pipeline: True when it only said that the
    statement (an UPDATE without RETURNING, say) returns no rows, not that it failed."""
    result = cursor.pgresult
    return result is not None and result.status == COMMAND_OK


def _dicts(query: Query, cursor: Any, rows: list[tuple[Any, ...]]) -> list[Row]:
    names = column_names(query, cursor)
    return [dict(zip(names, row, strict=True)) for row in rows]


def _row(query: Query, cursor: Any, row: tuple[Any, ...] | None) -> Row | None:
    """One fetched tuple as a dict by column name (None stays None)."""
    return None if row is None else _dicts(query, cursor, [row])[0]


class _Lender:
    """One cursor kept on a connection for the statements that return a row, and a lock to lend it.

    A new cursor sets up its adapters again for every statement (the dumper of
    each parameter, the loader of each column, a timestamp's time zone): on a
    single enqueue, about 15 us of a 230 us round trip. The kept cursor has
    them from its first statement. It is lent to one caller at a time (thread
    or task, in or out of a pipeline); a caller that finds it lent takes a new
    cursor. It holds one row's result until its next statement, and it
    references its connection, so a connection dropped without ``close()`` (a
    misuse psycopg warns about) is freed by the cycle collector, not at once.
    """

    __slots__ = ("cursor", "lock")

    def __init__(self, conn: Any) -> None:
        self.cursor = conn.cursor(row_factory=tuple_row)
        self.lock = threading.Lock()


_LENDER = "_awa_bridge_lender"


def _lender(conn: Any) -> _Lender:
    lender: _Lender | None = conn.__dict__.get(_LENDER)
    if lender is None:
        lender = _Lender(conn)
        setattr(conn, _LENDER, lender)
    return lender


def idle_in_autocommit(conn: Any) -> bool:
    """A psycopg connection in autocommit mode with no transaction open."""
    return bool(getattr(conn, "autocommit", False)) and conn.info.transaction_status == TransactionStatus.IDLE


class PsycopgSync:
    name = "psycopg"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def fetch_all(self, query: Query, params: dict[str, Any] | None = None) -> list[Row]:
        # tuple_row, whatever the connection's own row_factory; dicts built with the query's names.
        with self.conn.cursor(row_factory=tuple_row) as cursor:
            cursor.execute(query.pyformat, params)
            if _pipelined(cursor):
                try:
                    return _dicts(query, cursor, cursor.fetchall())
                except ProgrammingError:
                    if _rowless(cursor):
                        return []
                    raise
            return _dicts(query, cursor, cursor.fetchall()) if _has_rows(cursor) else []

    def fetch_one(self, query: Query, params: dict[str, Any] | None = None) -> Row | None:
        """The first row of a statement that returns rows, on the connection's kept cursor when it is free."""
        lender = _lender(self.conn)
        if lender.lock.acquire(blocking=False):
            try:
                return self._first(lender.cursor, query, params)
            finally:
                lender.lock.release()
        with self.conn.cursor(row_factory=tuple_row) as cursor:
            return self._first(cursor, query, params)

    @staticmethod
    def _first(cursor: Any, query: Query, params: dict[str, Any] | None) -> Row | None:
        # Fetched before the columns are read: in pipeline mode the result arrives at the fetch.
        cursor.execute(query.pyformat, params)
        return _row(query, cursor, cursor.fetchone())

    def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        with self.conn.cursor() as cursor, cursor.copy(copy_statement(table, columns)) as copy:
            for row in rows:
                copy.write_row(row)

    def execute(self, query: Query, params: dict[str, Any] | None = None) -> None:
        self.conn.execute(query.pyformat, params)

    def execute_script(self, sql: str) -> None:
        # No parameters: psycopg sends the text as is, so a file may hold many
        # statements, dollar-quoted bodies and literal % signs.
        with self.conn.cursor() as cursor:
            cursor.execute(sql)

    @contextmanager
    def transaction(self) -> Iterator[PsycopgSync]:
        with self.conn.transaction():
            yield self

    def commit(self) -> None:
        self.conn.commit()

    @property
    def closed(self) -> bool:
        return bool(self.conn.closed)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> PsycopgSync:
        self.conn.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.conn.__exit__(*exc)


class PsycopgAsync:
    name = "psycopg-async"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def fetch_all(self, query: Query, params: dict[str, Any] | None = None) -> list[Row]:
        async with self.conn.cursor(row_factory=tuple_row) as cursor:
            await cursor.execute(query.pyformat, params)
            if _pipelined(cursor):  # as in ``PsycopgSync.fetch_all``
                try:
                    return _dicts(query, cursor, await cursor.fetchall())
                except ProgrammingError:
                    if _rowless(cursor):
                        return []
                    raise
            return _dicts(query, cursor, await cursor.fetchall()) if _has_rows(cursor) else []

    async def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        async with self.conn.cursor() as cursor, cursor.copy(copy_statement(table, columns)) as copy:
            for row in rows:
                await copy.write_row(row)

    async def fetch_one(self, query: Query, params: dict[str, Any] | None = None) -> Row | None:
        """``PsycopgSync.fetch_one``, awaited; a task that finds the kept cursor lent takes its own."""
        lender = _lender(self.conn)
        if lender.lock.acquire(blocking=False):
            try:
                return await self._first(lender.cursor, query, params)
            finally:
                lender.lock.release()
        async with self.conn.cursor(row_factory=tuple_row) as cursor:
            return await self._first(cursor, query, params)

    @staticmethod
    async def _first(cursor: Any, query: Query, params: dict[str, Any] | None) -> Row | None:
        await cursor.execute(query.pyformat, params)
        return _row(query, cursor, await cursor.fetchone())

    async def execute(self, query: Query, params: dict[str, Any] | None = None) -> None:
        await self.conn.execute(query.pyformat, params)

    async def __aenter__(self) -> PsycopgAsync:
        await self.conn.__aenter__()
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.conn.__aexit__(*exc)


class PsycopgPool:
    """A psycopg_pool ``ConnectionPool`` (the sync transactional handlers' connections)."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A pooled psycopg connection (autocommit off), returned to the pool on exit."""
        with self.pool.connection() as conn:
            yield conn

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        """A pooled psycopg connection (the raw one: handlers get it as ``job.conn``) inside a
        transaction, committed on a clean exit."""
        with self.pool.connection() as conn, conn.transaction():
            yield conn

    def close(self) -> None:
        self.pool.close()
