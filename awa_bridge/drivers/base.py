"""The small internal driver interface (sync and async).

Two layers:

* ``SyncDriver`` / ``AsyncDriver``: what every supported caller connection
  offers (asyncpg, psycopg, SQLAlchemy, Django): ``fetch_all`` (a named
  ``Query`` -> rows as dicts), ``execute`` (rows not read), ``copy_rows``
  (COPY into a table), for async connections ``fetch_one`` (the first row
  read by column name: the single enqueue's one row, with no copy on
  asyncpg), and for sync connections ``execute_script`` (a whole SQL file,
  several statements, no parameters: the migrations).
* The connections the bridge opens itself (``connect.py``) are asyncpg for the
  worker and psycopg for the CLI, the heartbeat and migrations. Their adapters
  (``Asyncpg``, ``PsycopgSync``) add what the worker needs: ``fetch`` (rows
  as the driver returns them, read by column name, with no copy into dicts:
  the claim and completion hot path), ``fetch_one``, ``transaction()``,
  ``listen`` (asyncpg) and closing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Sequence
from typing import Any, Protocol

from ..sql import Query

Row = dict[str, Any]


class RowLike(Protocol):
    """A row read by column name: a ``Row``, or asyncpg's ``Record`` as it comes."""

    def __getitem__(self, key: str, /) -> Any: ...


class SyncDriver(Protocol):
    """A synchronous connection the bridge can run queries on."""

    name: str

    def fetch_all(self, query: Query, params: dict[str, Any] | None = None) -> list[Row]: ...

    def fetch_one(self, query: Query, params: dict[str, Any] | None = None) -> Row | None:
        """The first row, or None."""
        ...

    def execute(self, query: Query, params: dict[str, Any] | None = None) -> None: ...

    def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None: ...

    def execute_script(self, sql: str) -> None: ...


class AsyncDriver(Protocol):
    """An asynchronous connection the bridge can run queries on."""

    name: str

    async def fetch_all(self, query: Query, params: dict[str, Any] | None = None) -> list[Row]: ...

    def fetch_one(self, query: Query, params: dict[str, Any] | None = None) -> Awaitable[RowLike | None]:
        """The first row (read by column name), or None: asyncpg's own awaitable, with no copy."""
        ...

    async def execute(self, query: Query, params: dict[str, Any] | None = None) -> None: ...

    async def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None: ...


def copy_statement(table: str, columns: Sequence[str]) -> str:
    """``COPY table (cols) FROM STDIN``; table and columns are ours, never user input."""
    return f"COPY {table} ({', '.join(columns)}) FROM STDIN"


# A named query's result columns never change; read once (from a run that had a result set),
# then reused.
_COLUMNS: dict[str, tuple[str, ...]] = {}


def column_names(query: Query, cursor: Any) -> tuple[str, ...]:
    """The result columns of ``query`` just executed on DB-API ``cursor`` (its ``description`` is
    read on the query's first run only).

    psycopg builds a ``Column`` object per column at every access of
    ``description``; a single enqueue through Django read it twice, about a
    tenth of its client time.
    """
    names = _COLUMNS.get(query.name)
    if names is None:
        description = cursor.description
        if description is None:  # no result set (cheap to ask again): nothing cached from this run
            return ()
        names = _COLUMNS[query.name] = tuple(column[0] for column in description)
    return names
