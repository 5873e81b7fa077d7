"""Delete finished jobs past their retention, in bounded batches."""

from __future__ import annotations

from typing import Any

from ...sql import QUERIES
from ..config import MAINTENANCE_BATCH


async def delete_finished(
    conn: Any, completed_retention: float, failed_retention: float, limit: int = MAINTENANCE_BATCH
) -> int:
    query = QUERIES["delete_finished"]
    params = {
        "completed_seconds": float(completed_retention),
        "failed_seconds": float(failed_retention),
        "limit": limit,
    }
    return len(await conn.fetch(query.numeric, *query.positional(params)))
