"""LISTEN for new work, with reconnection; polling covers any gap."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from .aio import sleep_unless

if TYPE_CHECKING:
    import asyncpg

log = logging.getLogger("awa_bridge.worker")

CHANNEL = "awa_jobs"


class Listener:
    def __init__(self, database_url: str, on_queue: Callable[[str], None]) -> None:
        self.database_url = database_url
        self.on_queue = on_queue
        self.connection: asyncpg.Connection[Any] | None = None
        self.connected = asyncio.Event()

    async def run(self, stopping: asyncio.Event) -> None:
        import asyncpg

        while not stopping.is_set():
            lost = asyncio.Event()
            try:
                conn = await asyncpg.connect(self.database_url, server_settings={"application_name": "awa-listen"})
            except Exception as exc:
                log.warning("LISTEN connection failed (%s); polling until it is back", exc)
                await sleep_unless(stopping, 1.0)
                continue
            self.connection = conn
            conn.add_termination_listener(lambda _conn, lost=lost: lost.set())
            try:
                await conn.add_listener(CHANNEL, self._notified)
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
                    conn.terminate() if lost.is_set() else await _close(conn)
            if lost.is_set() and not stopping.is_set():
                log.warning("LISTEN connection lost; polling until it is back")
                await sleep_unless(stopping, 0.5)

    def _notified(self, _conn: object, _pid: int, _channel: str, payload: object) -> None:
        # asyncpg's listener protocol types the payload as object; NOTIFY payloads are text.
        self.on_queue(cast(str, payload))


async def _close(conn: object) -> None:
    try:
        await asyncio.wait_for(conn.close(), timeout=2)  # type: ignore[attr-defined]
    except Exception:
        conn.terminate()  # type: ignore[attr-defined]
