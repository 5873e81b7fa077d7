"""Heartbeats on their own thread and connection.

A handler that holds the GIL in a tight loop, or an async handler that blocks
the event loop with ``time.sleep``, must not let its job look dead: the
heartbeat thread writes one batched, lease-fenced UPDATE per interval for
every attempt this process holds, independent of the event loop.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from ..sql import QUERIES

log = logging.getLogger("awa_bridge.worker")


class HeartbeatThread(threading.Thread):
    def __init__(
        self,
        database_url: str,
        interval: float,
        snapshot: Callable[[], list[tuple[int, int]]],
        on_superseded: Callable[[set[int]], None],
    ) -> None:
        super().__init__(name="awa-heartbeat", daemon=True)
        self.database_url = database_url
        self.interval = interval
        self.snapshot = snapshot
        self.on_superseded = on_superseded
        self.stopping = threading.Event()
        self.beats = 0

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        import psycopg

        conn = None
        query = QUERIES["heartbeat_jobs"].pyformat
        while not self.stopping.wait(self.interval):
            held = self.snapshot()
            if not held:
                continue
            ids = [job_id for job_id, _ in held]
            try:
                if conn is None or conn.closed:
                    conn = psycopg.connect(self.database_url, autocommit=True, application_name="awa-heartbeat")
                rows = conn.execute(query, {"ids": ids, "leases": [lease for _, lease in held]}).fetchall()
                self.beats += 1
            except Exception as exc:  # the connection or the server went away; try again next beat
                log.warning("heartbeat failed (%s); retrying in %.1f s", exc, self.interval)
                if conn is not None:
                    conn.close()
                conn = None
                continue
            superseded = set(ids) - {row[0] for row in rows}
            if superseded:
                # Still held here but no longer ours in the database (rescued, cancelled...).
                self.on_superseded(superseded)
        if conn is not None:
            conn.close()
