"""Promote due scheduled and retryable jobs to available (and NOTIFY their queues)."""

from __future__ import annotations

from typing import Any

from ...drivers.asyncpg import as_asyncpg
from ...sql import QUERIES
from ..config import MAINTENANCE_BATCH


async def promote_due(conn: Any, limit: int = MAINTENANCE_BATCH) -> dict[str, int]:
    """Returns promoted counts per queue."""
    rows = await as_asyncpg(conn).fetch(QUERIES["promote_due"], {"limit": limit})
    return {row["queue"]: row["promoted"] for row in rows}
