"""Django adapter: runs on ``django.db.connection`` / ``connections[alias]``.

Statements go through Django's own cursor so they take part in
``transaction.atomic()`` (savepoints included) and show up in Django's query
log like any ORM query. The single enqueue keeps its cursor (Django's wrapper
around psycopg's) on the connection rather than making one per call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections
from django.utils.connection import ConnectionProxy

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
        """The single enqueue's one row, on a cursor kept for it on the connection (see
        ``_may_keep``), its timestamps read by psycopg's own loader (``_read_times_natively``)."""
        conn = _thread_connection(self.conn)
        if not _may_keep(conn):
            with conn.cursor() as cursor:
                _read_times_natively(cursor.cursor)
                return _first_row(query, cursor, params)
        return _first_row(query, _kept_cursor(conn), params)

    def execute(self, query: Query, params: dict[str, Any] | None = None) -> None:
        with self.conn.cursor() as cursor:
            cursor.execute(query.pyformat, params)

    def execute_script(self, sql: str) -> None:
        with self.conn.cursor() as cursor:
            cursor.cursor.execute(sql)  # the driver's cursor: no parameters, many statements

    def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
        with self.conn.cursor() as cursor:
            raw = cursor.cursor  # psycopg 3's cursor inside Django's wrapper
            with raw.copy(copy_statement(table, columns)) as copy:
                for row in rows:
                    copy.write_row(row)


# The attribute of Django's connection object (one per alias and thread) that holds the cursor
# ``DjangoSync.fetch_one`` keeps, with the driver connection it belongs to.
_KEPT = "_awa_insert_cursor"


def _thread_connection(conn: Any) -> Any:
    """This thread's connection object behind ``django.db.connection``, a proxy that every thread
    shares (it forwards each attribute it is asked for: the kept cursor must not live on it)."""
    return connections[conn.alias] if isinstance(conn, ConnectionProxy) else conn


def _may_keep(conn: Any) -> bool:
    """Whether a single enqueue may run on the kept cursor rather than a new one from
    ``conn.cursor()``, which costs a Django connection about 25 us a call (a psycopg cursor, Django's
    wrapper and their closing).

    Not when Django logs queries (``DEBUG``, ``assertNumQueries``: a debug cursor is made per call),
    when something replaced ``conn.cursor`` on the connection object (a query recorder such as the
    debug toolbar's, a test case's refusal of a database it does not declare; Django's test cases
    put the method itself back, which counts as not replaced), or when the connection is shared
    between threads (a cursor's result is not). Django's execute wrappers and anything patched onto
    its ``CursorWrapper`` class run either way: the kept cursor is Django's own wrapper.
    """
    if conn.queries_logged or conn.allow_thread_sharing:
        return False
    cursor = conn.__dict__.get("cursor")
    return cursor is None or getattr(cursor, "__func__", None) is type(conn).cursor


def _kept_cursor(conn: Any) -> Any:
    """The cursor kept on ``conn``, after the checks ``conn.cursor()`` makes before it makes one: the
    health check (``CONN_HEALTH_CHECKS``, once per request, which may close the connection), a
    connection (opened if need be; refused inside an event loop, ``SynchronousOnlyOperation``, and
    where a test may not use the database), and this thread's own."""
    conn.close_if_health_check_failed()
    conn.ensure_connection()
    kept = conn.__dict__.get(_KEPT)
    if kept is not None and kept[0] is conn.connection:
        conn.validate_thread_sharing()
        return kept[1]
    cursor = conn.cursor()  # the first insert on this connection, or Django has closed (or reopened) it
    _read_times_natively(cursor.cursor)
    conn.__dict__[_KEPT] = (conn.connection, cursor)
    return cursor


def _read_times_natively(raw: Any) -> None:
    """Make ``raw`` (psycopg 3's cursor) read timestamps with psycopg's own loader, not the one
    Django registers: that one is Python (about 45,000 instructions a value) and gives naive
    datetimes under ``USE_TZ = False`` (exact in UTC but for the hour a DST change repeats).
    psycopg's is C when psycopg's binary or C part is there.

    Django's backend is always psycopg 3 here: it takes psycopg 3 whenever it can import it, and
    awa-bridge depends on it (psycopg2, if installed too, goes unused)."""
    from psycopg import postgres
    from psycopg.pq import Format

    oid = postgres.types["timestamptz"].oid
    raw.adapters.register_loader(oid, postgres.adapters.get_loader(oid, Format.TEXT))


def _first_row(query: Query, cursor: Any, params: dict[str, Any] | None) -> Row | None:
    cursor.execute(query.pyformat, params)  # Django's wrapper: atomic(), execute wrappers
    raw = cursor.cursor
    with cursor.db.wrap_database_errors:
        row = raw.fetchone()
    return None if row is None else dict(zip(column_names(query, raw), row, strict=True))


def planner_rows(conn: Any, sql: str, params: Sequence[Any]) -> int:
    """The planner's row estimate for a queryset's SQL (``EXPLAIN``, nothing runs), for the admin."""
    import json

    with conn.cursor() as cursor:
        cursor.execute("EXPLAIN (FORMAT JSON) " + sql, params)
        plan = cursor.fetchone()[0]
    if isinstance(plan, str):
        plan = json.loads(plan)
    return int(plan[0]["Plan"]["Plan Rows"])
