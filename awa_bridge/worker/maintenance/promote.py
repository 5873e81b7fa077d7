"""Promote due scheduled and retryable jobs to available (and NOTIFY their queues)."""

from __future__ import annotations

from typing import Any

from ...drivers.asyncpg import as_asyncpg
from ...sql import QUERIES
from ..config import MAINTENANCE_BATCH


async def promote_due(conn: Any, limit: int = MAINTENANCE_BATCH) -> int:
    """Up to ``limit`` due jobs moved on; returns how many.

    Moved means made available, or cancelled as superseded when another live
    job holds the unique key (R30): both count, so that the maintenance pass
    sees a batch of superseded jobs as the full batch it was and goes on.
    """
    rows = await as_asyncpg(conn).fetch(QUERIES["promote_due"], {"limit": limit})
    return int(rows[0]["moved"])
