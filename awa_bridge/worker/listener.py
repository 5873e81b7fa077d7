"""LISTEN for new work, with reconnection; polling covers any gap."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..drivers.connect import connect_async
from .aio import sleep_unless

if TYPE_CHECKING:
    from ..drivers.asyncpg import Asyncpg

log = logging.getLogger("awa_bridge.worker")

CHANNEL = "awa_jobs"


class Listener:
    def __init__(self, database_url: str, on_queue: Callable[[str], None]) -> None:
        self.database_url = database_url
        self.on_queue = on_queue
        self.connection: Asyncpg | None = None
        self.connected = asyncio.Event()

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            lost = asyncio.Event()
            try:
                conn = await connect_async(self.database_url, application_name="awa-listen")
            except Exception as exc:
                log.warning("LISTEN connection failed (%s); polling until it is back", exc)
                await sleep_unless(stopping, 1.0)
                continue
            self.connection = conn
            conn.on_lost(lost.set)
            try:
                await conn.listen(CHANNEL, self.on_queue)
                self.connected.set()
                waiters = {asyncio.ensure_future(stopping.wait()), asyncio.ensure_future(lost.wait())}
                try:
                    await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    for waiter in waiters:
                        waiter.cancel()
            except Exception as exc:
                log.warning("LISTEN connection lost (%s); reconnecting", exc)
            finally:
                self.connected.clear()
                self.connection = None
                if not conn.is_closed():
                    conn.terminate() if lost.is_set() else await conn.close(timeout=2)
            if lost.is_set() and not stopping.is_set():
                log.warning("LISTEN connection lost; polling until it is back")
                await sleep_unless(stopping, 0.5)
