"""Rescue attempts whose worker died (stale heartbeat) or overran the deadline.

Each rescue spends the attempt: the job goes to retryable (promoted at once)
or to failed when its attempts are exhausted, with an error record saying why.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ...drivers.asyncpg import as_asyncpg
from ...sql import QUERIES
from ..config import MAINTENANCE_BATCH


async def rescue_stale_heartbeats(
    conn: Any, staleness: float, limit: int = MAINTENANCE_BATCH, held: Sequence[tuple[int, int]] = ()
) -> list[Any]:
    """Attempts whose heartbeat is older than ``staleness``, except ``held`` (the caller's own (id, run_lease))."""
    params = {
        "staleness_seconds": float(staleness),
        "limit": limit,
        "held_ids": [job_id for job_id, _ in held],
        "held_leases": [lease for _, lease in held],
    }
    return list(await as_asyncpg(conn).fetch(QUERIES["rescue_stale_heartbeats"], params))


async def rescue_expired_deadlines(conn: Any, limit: int = MAINTENANCE_BATCH) -> list[Any]:
    return list(await as_asyncpg(conn).fetch(QUERIES["rescue_expired_deadlines"], {"limit": limit}))


async def rescue_callback_timeouts(conn: Any, limit: int = MAINTENANCE_BATCH) -> list[Any]:
    """Jobs whose external callback did not arrive in time."""
    return list(await as_asyncpg(conn).fetch(QUERIES["rescue_callback_timeouts"], {"limit": limit}))
