"""SQLAlchemy adapters for ``Connection``/``Session`` and their async forms.

Statements go through SQLAlchemy itself (``text()`` with ``:name`` binds), so
they join the transaction SQLAlchemy manages, savepoints included. COPY has
no SQLAlchemy API: after SQLAlchemy has begun its transaction we hand the
underlying psycopg or asyncpg connection to that driver's adapter.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from datetime import datetime
from functools import cache
from typing import Any

from ..sql import Query
from .base import Row, copy_statement


@cache
def _text(query: Query) -> Any:
    from sqlalchemy import text

    return text(query.named)


def _dicts(result: Any) -> list[Row]:
    """The rows of a SQLAlchemy ``Result`` as dicts by column name ([] for a statement without rows).

    Zipped with the result's keys: cheaper than ``result.mappings()``, which
    builds a ``RowMapping`` per row to copy from.
    """
    if not result.returns_rows:
        return []
    names = tuple(result.keys())
    return [dict(zip(names, row, strict=True)) for row in result.all()]


_COPY_ESCAPES = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r"})
_ARRAY_ESCAPES = str.maketrans({"\\": "\\\\", '"': '\\"'})


def _copy_value(value: Any) -> str:
    """One value in COPY's text format: what psycopg 3's ``write_row`` sends for the types a bulk
    insert's rows hold (text, integers, timestamps, text arrays, bytea, NULL)."""
    if value is None:
        return "\\N"
    if isinstance(value, bytes):
        text = "\\x" + value.hex()
    elif isinstance(value, datetime):
        text = value.isoformat()
    elif isinstance(value, list):
        text = "{" + ",".join('"' + str(item).translate(_ARRAY_ESCAPES) + '"' for item in value) + "}"
    else:
        text = str(value)
    return text.translate(_COPY_ESCAPES)


def copy_text(rows: Sequence[Sequence[Any]]) -> str:
    """Rows as a ``COPY ... FROM STDIN`` text stream, for a driver with no row writer (psycopg2)."""
    return "".join("\t".join(map(_copy_value, row)) + "\n" for row in rows)


_PING = Query(name="ping", pyformat="SELECT 1", numeric="SELECT 1", named="SELECT 1", order=())


class SQLAlchemySync:
    name = "sqlalchemy"

    def __init__(self, conn: Any) -> None:
        self.conn = conn  # Session or Connection: both have execute()

    def fetch_all(self, query: Query, params: dict[str, Any] | None = None) -> list[Row]:
        result = self.conn.execute(_text(query), params or {})
        return _dicts(result)

    def fetch_one(self, query: Query, params: dict[str, Any] | None = None) -> Row | None:
        rows = self.fetch_all(query, params)
        return rows[0] if rows else None

    def execute(self, query: Query, params: dict[str, Any] | None = None) -> None:
        self.conn.execute(_text(query), params or {})

    def _driver_connection(self) -> Any:
        """The psycopg / asyncpg connection under SQLAlchemy, inside the transaction SQLAlchemy began."""
        self.fetch_all(_PING)  # SQLAlchemy begins the driver transaction lazily, on its own first statement
        sa_conn = self.conn.connection() if hasattr(self.conn, "get_bind") else self.conn
        return sa_conn.connection.driver_connection

    def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        from .psycopg import PsycopgSync

        raw = self._driver_connection()
        module = type(raw).__module__.split(".")[0]
        if module == "psycopg":
            PsycopgSync(raw).copy_rows(table, columns, rows)
        elif module == "psycopg2":  # postgresql+psycopg2:// (and plain postgresql:// on SQLAlchemy 2.0)
            cursor = raw.cursor()
            try:
                cursor.copy_expert(copy_statement(table, columns), io.StringIO(copy_text(rows)))
            finally:
                cursor.close()
        else:
            raise NotImplementedError(f"insert_many has no COPY path for SQLAlchemy on {module}")

    def execute_script(self, sql: str) -> None:
        """A whole file on the driver's own connection: SQLAlchemy would parse its binds and % signs.

        asyncpg under a sync ``Connection`` (``AsyncConnection.run_sync``, Alembic's
        async env) runs in SQLAlchemy's greenlet, where ``await_only`` may wait on it.
        """
        raw = self._driver_connection()
        if type(raw).__module__.split(".")[0] == "asyncpg":
            from sqlalchemy.util import await_only

            from .asyncpg import Asyncpg

            await_only(Asyncpg(raw).execute_script(sql))
            return
        if type(raw).__name__ == "AsyncConnection":
            # psycopg's async connection (under run_sync): SQLAlchemy's adapter is its sync DB-API face.
            sa_conn = self.conn.connection() if hasattr(self.conn, "get_bind") else self.conn
            raw = sa_conn.connection.dbapi_connection
        cursor = raw.cursor()  # psycopg 3 or psycopg2
        try:
            cursor.execute(sql)
        finally:
            cursor.close()


class SQLAlchemyAsync:
    name = "sqlalchemy-async"

    def __init__(self, conn: Any) -> None:
        self.conn = conn  # AsyncSession or AsyncConnection

    async def fetch_all(self, query: Query, params: dict[str, Any] | None = None) -> list[Row]:
        result = await self.conn.execute(_text(query), params or {})
        return _dicts(result)

    async def fetch_one(self, query: Query, params: dict[str, Any] | None = None) -> Row | None:
        rows = await self.fetch_all(query, params)
        return rows[0] if rows else None

    async def execute(self, query: Query, params: dict[str, Any] | None = None) -> None:
        await self.conn.execute(_text(query), params or {})

    async def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        from .asyncpg import Asyncpg
        from .psycopg import PsycopgAsync

        await self.fetch_all(_PING)  # SQLAlchemy begins the driver transaction lazily
        sa_conn = await self.conn.connection() if hasattr(self.conn, "get_bind") else self.conn
        raw = (await sa_conn.get_raw_connection()).driver_connection
        module = type(raw).__module__.split(".")[0]
        if module == "asyncpg":
            await Asyncpg(raw).copy_rows(table, columns, rows)
        elif module == "psycopg":
            await PsycopgAsync(raw).copy_rows(table, columns, rows)
        else:
            raise NotImplementedError(f"insert_many has no COPY path for SQLAlchemy on {module}")
