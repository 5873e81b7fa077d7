"""The worker's side of ``JobContext``: the writes an attempt makes while it runs.

This is the ``AttemptHandle`` a claimed job carries. It knows the worker's
event loop and its connection pool, nothing else of the runtime: every write
is one lease-fenced statement, and one that matches no row means the attempt
was superseded (``StaleAttempt``).
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

from ..sql import QUERIES
from .completer import complete_params
from .context import JobContext


class AttemptWrites:
    """Progress flushes, callback registration and attempt top-ups, on the runtime's pool."""

    def __init__(self, loop: asyncio.AbstractEventLoop, pool: Any, database_url: str) -> None:
        self.loop = loop
        self.pool = pool
        self.database_url = database_url  # for code that runs an attempt elsewhere (Celery's prefork children)

    async def _fetchrow(self, name: str, params: dict[str, Any]) -> Any:
        async with self.pool.acquire() as db:
            return await db.fetch_one(QUERIES[name], params)

    async def flush_progress(self, ctx: JobContext) -> None:
        row = await self._fetchrow("flush_progress", complete_params(ctx))
        ctx._raise_if_stale(row is not None)
        ctx.mark_flushed()

    async def register_callback(self, ctx: JobContext, timeout: float) -> str:
        callback_id = str(uuid.uuid4())
        params = {"callback_id": callback_id, "timeout_seconds": timeout, "id": ctx.id, "lease": ctx.run_lease}
        row = await self._fetchrow("register_callback", params)
        ctx._raise_if_stale(row is not None)
        ctx.callback_id = callback_id
        return callback_id

    async def raise_max_attempts(self, ctx: JobContext, at_least: int) -> int:
        params = {"id": ctx.id, "lease": ctx.run_lease, "max_attempts": at_least}
        row = await self._fetchrow("raise_max_attempts", params)
        if row is not None:
            ctx.max_attempts = int(row["max_attempts"])
        return ctx.max_attempts
