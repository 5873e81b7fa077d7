"""Maintenance leader election and the maintenance loop.

One process per database holds a session-level advisory lock on its own
connection and runs the maintenance services; the others retry every
election interval. If the leader dies its connection closes, the lock is
released, and another process takes over at its next election attempt.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import Any

from ...sql import QUERIES
from ..aio import sleep_unless
from ..config import WorkerConfig
from .cleanup import delete_finished
from .cron import fire_due_schedules
from .promote import promote_due
from .rescue import rescue_callback_timeouts, rescue_expired_deadlines, rescue_stale_heartbeats

log = logging.getLogger("awa_bridge.worker")


class Maintenance:
    def __init__(
        self,
        database_url: str,
        config: WorkerConfig,
        on_rescued: Callable[[list[Any]], None],
    ) -> None:
        self.database_url = database_url
        self.config = config
        self.on_rescued = on_rescued
        self.is_leader = False
        self.ticks = 0

    async def run(self, stopping: asyncio.Event) -> None:
        import asyncpg

        while not stopping.is_set():
            conn = None
            try:
                conn = await asyncpg.connect(self.database_url, server_settings={"application_name": "awa-maintenance"})
                while not stopping.is_set():
                    if await conn.fetchval(QUERIES["try_leader_lock"].numeric):
                        log.info("became the maintenance leader")
                        self.is_leader = True
                        await self._lead(conn, stopping)
                        return
                    await sleep_unless(stopping, self.config.leader_election_interval)
            except Exception as exc:
                if self.is_leader:
                    log.warning("lost maintenance leadership (%s)", exc)
                else:
                    log.warning("maintenance connection failed (%s)", exc)
                self.is_leader = False
                await sleep_unless(stopping, min(self.config.leader_election_interval, 1.0))
            finally:
                self.is_leader = False
                if conn is not None and not conn.is_closed():
                    conn.terminate()  # closing the session releases the advisory lock

    async def _lead(self, conn: Any, stopping: asyncio.Event) -> None:
        cfg = self.config
        next_rescue = next_cleanup = 0.0
        while not stopping.is_set():
            now = time.monotonic()
            await promote_due(conn)
            await fire_due_schedules(conn)
            if now >= next_rescue:
                rescued = await rescue_stale_heartbeats(conn, cfg.heartbeat_staleness)
                rescued += await rescue_expired_deadlines(conn)
                rescued += await rescue_callback_timeouts(conn)
                if rescued:
                    for row in rescued:
                        log.warning(
                            "rescued job %s (%s on %s, attempt %s) -> %s",
                            row["id"],
                            row["kind"],
                            row["queue"],
                            row["attempt"],
                            row["state"],
                        )
                    self.on_rescued(rescued)
                    await promote_due(conn)
                next_rescue = now + cfg.rescue_interval
            if now >= next_cleanup:
                deleted = await delete_finished(conn, cfg.completed_retention, cfg.failed_retention)
                if deleted:
                    log.info("deleted %d finished jobs past retention", deleted)
                next_cleanup = now + cfg.cleanup_interval
            self.ticks += 1
            await sleep_unless(stopping, cfg.promote_interval)
