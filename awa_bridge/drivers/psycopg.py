"""psycopg 3 adapters (sync and async); also the target SQLAlchemy and Django unwrap to for COPY."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..sql import Query
from .base import Row, copy_statement


def _rows(cursor: Any) -> list[Row]:
    if cursor.description is None:
        return []
    names = [column.name for column in cursor.description]
    return [dict(zip(names, values, strict=True)) for values in cursor.fetchall()]


class PsycopgSync:
    name = "psycopg"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def fetch_all(self, query: Query, params: dict[str, Any] | None = None) -> list[Row]:
        with self.conn.cursor() as cursor:
            cursor.execute(query.pyformat, params)
            return _rows(cursor)

    def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        with self.conn.cursor() as cursor, cursor.copy(copy_statement(table, columns)) as copy:
            for row in rows:
                copy.write_row(row)


class PsycopgAsync:
    name = "psycopg-async"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def fetch_all(self, query: Query, params: dict[str, Any] | None = None) -> list[Row]:
        async with self.conn.cursor() as cursor:
            await cursor.execute(query.pyformat, params)
            if cursor.description is None:
                return []
            names = [column.name for column in cursor.description]
            return [dict(zip(names, values, strict=True)) for values in await cursor.fetchall()]

    async def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        async with self.conn.cursor() as cursor, cursor.copy(copy_statement(table, columns)) as copy:
            for row in rows:
                await copy.write_row(row)
