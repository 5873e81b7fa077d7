"""Per-queue, per-minute outcome counters for dashboards (``awa.queue_rollups``).

The worker counts each outcome it has written (completed, failed, retried,
cancelled) in memory, keyed by queue and minute, and writes them all in ONE
upsert every ``interval`` seconds on its own pool, so the admin's charts read
a few hundred small rows instead of scanning ``awa.jobs``, and the hot path
pays a dict increment, not a round trip. Counts of a worker that dies before
its next flush are lost (a few seconds' worth): the charts are an operator's
gauge, not a ledger. ``prune_rollups`` deletes the rows older than the
longest chart window; the maintenance leader calls it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..drivers.asyncpg import as_asyncpg
from ..sql import QUERIES

if TYPE_CHECKING:
    from ..drivers.asyncpg import AsyncpgPool

log = logging.getLogger("awa_bridge.worker")

#: Outcome label (``Outcome.label``) → rollup column. Snoozes and waits are not outcomes.
COLUMNS = {"completed": "completed", "exhausted": "failed", "retried": "retried", "cancelled": "cancelled"}
#: Rollups older than this are deleted by ``prune_rollups`` (the charts show at most a day).
RETENTION = "2 days"


class Rollup:
    """Counts written outcomes per (queue, minute); ``run`` flushes them every ``interval`` seconds."""

    def __init__(self, pool: AsyncpgPool, interval: float = 5.0) -> None:
        self.pool = pool
        self.interval = interval
        self.counts: defaultdict[tuple[str, datetime], dict[str, int]] = defaultdict(
            lambda: dict.fromkeys(COLUMNS.values(), 0)
        )
        self._minute = datetime.fromtimestamp(0, UTC)
        self._minute_ends = 0.0  # time.time() at which _minute is over

    def count(self, tally: dict[tuple[str, str], int]) -> None:
        """Outcomes written, as ``{(queue, outcome label): how many}`` (on the event loop, no I/O).

        Called once per completed batch, not once per job: the minute's key is
        made (and hashed into the counts) once per batch."""
        now = time.time()
        if now >= self._minute_ends:  # the current minute's key, made once a minute
            start = now - now % 60
            self._minute = datetime.fromtimestamp(start, UTC)
            self._minute_ends = start + 60
        for (queue, label), n in tally.items():
            column = COLUMNS.get(label)
            if column is not None:
                self.counts[(queue, self._minute)][column] += n

    async def flush(self) -> None:
        """Write what was counted since the last flush in one upsert (kept for the next try on failure)."""
        if not self.counts:
            return
        taken, self.counts = self.counts, defaultdict(lambda: dict.fromkeys(COLUMNS.values(), 0))
        keys = list(taken)
        params = {
            "queues": [queue for queue, _ in keys],
            "minutes": [minute for _, minute in keys],
            **{column: [taken[key][column] for key in keys] for column in COLUMNS.values()},
        }
        try:
            async with self.pool.acquire() as db:
                await db.execute(QUERIES["upsert_queue_rollups"], params)
        except Exception as exc:
            log.warning("could not write %d queue rollup(s) (%s); they are kept for the next flush", len(keys), exc)
            for key, columns in taken.items():
                for column, value in columns.items():
                    self.counts[key][column] += value

    async def run(self, stopping: asyncio.Event) -> None:
        """Flush every ``interval`` seconds, and once more when the worker stops."""
        while not stopping.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), timeout=self.interval)
            await self.flush()


async def prune_rollups(conn: Any) -> int:
    """Delete rollups older than ``RETENTION`` on an asyncpg connection; returns how many."""
    row = await as_asyncpg(conn).fetch_one(QUERIES["prune_queue_rollups"])
    return int(row["deleted"]) if row is not None else 0
