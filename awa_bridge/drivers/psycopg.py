"""psycopg 3 adapters (sync and async); also the target SQLAlchemy and Django unwrap to for COPY."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.pq import ExecStatus
from psycopg.rows import dict_row

from ..sql import Query
from .base import Row, copy_statement

TUPLES_OK = ExecStatus.TUPLES_OK


def _has_rows(cursor: Any) -> bool:
    # Cheaper than ``cursor.description``, which builds a Column per column on each access.
    result = cursor.pgresult
    return result is not None and result.status == TUPLES_OK


class PsycopgSync:
    name = "psycopg"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def fetch_all(self, query: Query, params: dict[str, Any] | None = None) -> list[Row]:
        # dict_row: psycopg builds the dicts (and ignores the connection's own row_factory).
        with self.conn.cursor(row_factory=dict_row) as cursor:
            cursor.execute(query.pyformat, params)
            return cursor.fetchall() if _has_rows(cursor) else []

    def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        with self.conn.cursor() as cursor, cursor.copy(copy_statement(table, columns)) as copy:
            for row in rows:
                copy.write_row(row)


class PsycopgAsync:
    name = "psycopg-async"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    async def fetch_all(self, query: Query, params: dict[str, Any] | None = None) -> list[Row]:
        async with self.conn.cursor(row_factory=dict_row) as cursor:
            await cursor.execute(query.pyformat, params)
            return await cursor.fetchall() if _has_rows(cursor) else []

    async def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        async with self.conn.cursor() as cursor, cursor.copy(copy_statement(table, columns)) as copy:
            for row in rows:
                await copy.write_row(row)
