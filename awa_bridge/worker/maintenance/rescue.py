"""Rescue attempts whose worker died (stale heartbeat) or overran the deadline.

Each rescue spends the attempt: the job goes to retryable (promoted at once)
or to failed when its attempts are exhausted, with an error record saying why.
"""

from __future__ import annotations

from typing import Any

from ...sql import QUERIES
from ..config import MAINTENANCE_BATCH


async def rescue_stale_heartbeats(conn: Any, staleness: float, limit: int = MAINTENANCE_BATCH) -> list[Any]:
    query = QUERIES["rescue_stale_heartbeats"]
    params = {"staleness_seconds": float(staleness), "limit": limit}
    return list(await conn.fetch(query.numeric, *query.positional(params)))


async def rescue_expired_deadlines(conn: Any, limit: int = MAINTENANCE_BATCH) -> list[Any]:
    query = QUERIES["rescue_expired_deadlines"]
    return list(await conn.fetch(query.numeric, *query.positional({"limit": limit})))


async def rescue_callback_timeouts(conn: Any, limit: int = MAINTENANCE_BATCH) -> list[Any]:
    """Jobs whose external callback did not arrive in time."""
    query = QUERIES["rescue_callback_timeouts"]
    return list(await conn.fetch(query.numeric, *query.positional({"limit": limit})))
