"""Promote due scheduled and retryable jobs to available (and NOTIFY their queues)."""

from __future__ import annotations

from typing import Any

from ...sql import QUERIES
from ..config import MAINTENANCE_BATCH


async def promote_due(conn: Any, limit: int = MAINTENANCE_BATCH) -> dict[str, int]:
    """Returns promoted counts per queue."""
    query = QUERIES["promote_due"]
    rows = await conn.fetch(query.numeric, *query.positional({"limit": limit}))
    return {row["queue"]: row["promoted"] for row in rows}
