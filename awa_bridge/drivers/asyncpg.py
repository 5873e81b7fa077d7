"""asyncpg adapter, for a ``Connection`` or one acquired from a pool."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..sql import Query
from .base import Row


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
