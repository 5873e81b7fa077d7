"""The tiny internal driver protocol (sync and async)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ..sql import Query

Row = dict[str, Any]


class SyncDriver(Protocol):
    """A synchronous connection the bridge can run queries on."""

    name: str

    def fetch_all(self, query: Query, params: dict[str, Any] | None = None) -> list[Row]: ...

    def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None: ...


class AsyncDriver(Protocol):
    """An asynchronous connection the bridge can run queries on."""

    name: str

    async def fetch_all(self, query: Query, params: dict[str, Any] | None = None) -> list[Row]: ...

    async def copy_rows(self, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None: ...


def copy_statement(table: str, columns: Sequence[str]) -> str:
    """``COPY table (cols) FROM STDIN``; table and columns are ours, never user input."""
    return f"COPY {table} ({', '.join(columns)}) FROM STDIN"
