"""Rescue attempts whose worker died (stale heartbeat) or overran the deadline.

Each rescue spends the attempt: the job goes to retryable (promoted at once)
or to failed when its attempts are exhausted, with an error record saying why.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...drivers.asyncpg import as_asyncpg
from ...sql import QUERIES
from ..config import MAINTENANCE_BATCH

#: No leader's view: a direct call (an operator's script, a test) judges heartbeats as they are.
NO_VIEW: Mapping[str, Any] = {"viewed_at": None, "max_gap_seconds": None}


async def rescue_stale_heartbeats(
    conn: Any,
    staleness: float,
    limit: int = MAINTENANCE_BATCH,
    held: Sequence[tuple[int, int]] = (),
    guard: Mapping[str, Any] = NO_VIEW,
) -> list[Any]:
    """Attempts whose heartbeat is older than ``staleness``, except ``held`` (the caller's own (id, run_lease)).

    ``guard``: the leader's view (``View.guard``); the statement rescues nothing if it starts too
    long after the view was checked (the leader was frozen in between).
    """
    params = {
        "staleness_seconds": float(staleness),
        "limit": limit,
        "held_ids": [job_id for job_id, _ in held],
        "held_leases": [lease for _, lease in held],
        **guard,
    }
    return list(await as_asyncpg(conn).fetch(QUERIES["rescue_stale_heartbeats"], params))


async def rescue_expired_deadlines(conn: Any, limit: int = MAINTENANCE_BATCH) -> list[Any]:
    return list(await as_asyncpg(conn).fetch(QUERIES["rescue_expired_deadlines"], {"limit": limit}))


async def rescue_callback_timeouts(conn: Any, limit: int = MAINTENANCE_BATCH) -> list[Any]:
    """Jobs whose external callback did not arrive in time."""
    return list(await as_asyncpg(conn).fetch(QUERIES["rescue_callback_timeouts"], {"limit": limit}))
