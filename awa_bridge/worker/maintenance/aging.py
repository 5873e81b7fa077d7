"""Priority aging for one queue (run by the queue's producers, with the queue's interval)."""

from __future__ import annotations

from typing import Any

from ...drivers.asyncpg import as_asyncpg
from ...sql import QUERIES
from ..config import MAINTENANCE_BATCH


async def age_priorities(conn: Any, queue: str, aging_seconds: float, limit: int = MAINTENANCE_BATCH) -> int:
    """Raise the priority of jobs waiting longer than ``aging_seconds``; return how many changed."""
    params = {"queue": queue, "aging_seconds": float(aging_seconds), "limit": limit}
    return len(await as_asyncpg(conn).fetch(QUERIES["age_priorities"], params))
