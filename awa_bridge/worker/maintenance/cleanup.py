"""Delete finished jobs past their retention, in bounded batches."""

from __future__ import annotations

from typing import Any

from ...drivers.asyncpg import as_asyncpg
from ...sql import QUERIES
from ..config import MAINTENANCE_BATCH


async def delete_finished(
    conn: Any, completed_retention: float, failed_retention: float, limit: int = MAINTENANCE_BATCH
) -> int:
    params = {
        "completed_seconds": float(completed_retention),
        "failed_seconds": float(failed_retention),
        "limit": limit,
    }
    return len(await as_asyncpg(conn).fetch(QUERIES["delete_finished"], params))
