"""Django adapter: runs on ``django.db.connection`` / ``connections[alias]``.

Statements go through Django's own cursor so they take part in
``transaction.atomic()`` (savepoints included) and show up in Django's query
log like any ORM query.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..sql import Query
from .base import Row, column_names, copy_statement


class DjangoSync:
    name = "django"

    def __init__(self, conn: Any) -> None:
        self.conn = conn

    def fetch_all(self, query: Query, params: dict[str, Any] | None = None) -> list[Row]:
        with self.conn.cursor() as cursor:
            cursor.execute(query.pyformat, params)  # Django's wrapper: atomic(), the query log, debug
            raw = cursor.cursor  # the result is read on the driver's cursor: no wrapper per attribute
            names = column_names(query, raw)
            if not names:
                return []
            # Values are converted as they are fetched, and a conversion can fail (a time past year
            # 9999): Django's own fetch turns that into django.db.DataError, and so does this.
            with self.conn.wrap_database_errors:
                values = raw.fetchall()
            return [dict(zip(names, row, strict=True)) for row in values]

    def fetch_one(self, query: Query, params: dict[str, Any] | None = None) -> Row | None:
        rows = self.fetch_all(query, params)
        return rows[0] if rows else None

    def execute(self, query: Query, params: dict[str, Any] | None = None) -> None:
        with self.conn.cursor() as cursor:
            cursor.execute(query.pyformat, params)

    def execute_script(self, sql: str) -> None:
        with self.conn.cursor() as cursor:
            cursor.cursor.execute(sql)  # the driver's cursor: no parameters, many statements

    def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        with self.conn.cursor() as cursor:
            raw = cursor.cursor  # the driver's cursor inside Django's wrapper
            if not hasattr(raw, "copy"):
                raise NotImplementedError("insert_many on Django needs the psycopg 3 backend for COPY")
            with raw.copy(copy_statement(table, columns)) as copy:
                for row in rows:
                    copy.write_row(row)


def planner_rows(conn: Any, sql: str, params: Sequence[Any]) -> int:
    """The planner's row estimate for a queryset's SQL (``EXPLAIN``, nothing runs), for the admin."""
    import json

    with conn.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])
