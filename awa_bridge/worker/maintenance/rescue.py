"""Rescue attempts whose worker died (stale heartbeat) or overran the deadline.

Each rescue spends the attempt: the job goes to retryable (promoted at once)
or to failed when its attempts are exhausted, with an error record saying why.
"""

from __future__ import annotations

from typing import Any

from ...drivers.asyncpg import as_asyncpg
from ...sql import QUERIES
from ..config import MAINTENANCE_BATCH


async def rescue_stale_heartbeats(conn: Any, staleness: float, limit: int = MAINTENANCE_BATCH) -> list[Any]:
    params = {"staleness_seconds": float(staleness), "limit": limit}
    return list(await as_asyncpg(conn).fetch(QUERIES["rescue_stale_heartbeats"], params))


async def rescue_expired_deadlines(conn: Any, limit: int = MAINTENANCE_BATCH) -> list[Any]:
    return list(await as_asyncpg(conn).fetch(QUERIES["rescue_expired_deadlines"], {"limit": limit}))


async def rescue_callback_timeouts(conn: Any, limit: int = MAINTENANCE_BATCH) -> list[Any]:
    """Jobs whose external callback did not arrive in time."""
    return list(await as_asyncpg(conn).fetch(QUERIES["rescue_callback_timeouts"], {"limit": limit}))
