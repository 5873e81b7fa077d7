"""Heartbeats and the worker registry, on their own thread and connection.

A handler that holds the GIL in a tight loop, or an async handler that blocks
the event loop with ``time.sleep``, must not let its job look dead: the
heartbeat thread writes one batched, lease-fenced statement per interval for
every attempt this process holds, independent of the event loop. The same
statement refreshes this process's row in ``awa.runtime_instances`` (queues,
running counts, jobs held, leadership), inserted at the first beat and
deleted at a clean shutdown.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from ..sql import QUERIES

log = logging.getLogger("awa_bridge.worker")


class HeartbeatThread(threading.Thread):
    def __init__(
        self,
        database_url: str,
        interval: float,
        snapshot: Callable[[], list[tuple[int, int]]],
        on_superseded: Callable[[set[int]], None],
        describe: Callable[[], dict[str, Any]],
        instance_id: uuid.UUID,
    ) -> None:
        super().__init__(name="awa-heartbeat", daemon=True)
        from importlib.metadata import version

        self.database_url = database_url
        self.interval = interval
        self.snapshot = snapshot
        self.on_superseded = on_superseded
        self.describe = describe  # {"queues": JSON text, "is_leader": bool}
        self.stopping = threading.Event()
        self.instance = {
            "instance_id": instance_id,
            "hostname": socket.gethostname(),
            "pid": os.getpid(),
            "version": version("awa-bridge"),
            "started_at": datetime.now(UTC),
        }

    def stop(self, timeout: float = 5.0) -> None:
        """Stop beating and leave the registry (waits up to ``timeout`` for the last statement)."""
        self.stopping.set()
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        conn = None
        while True:
            conn = self._beat(conn)
            if self.stopping.wait(self.interval):
                break
        if conn is not None:
            try:
                conn.execute(QUERIES["delete_runtime_instance"].pyformat, {"instance_id": self.instance["instance_id"]})
            except Exception as exc:
                log.warning("could not remove this worker from awa.runtime_instances (%s)", exc)
            conn.close()

    def _beat(self, conn: Any) -> Any:
        """One statement: the registry row and the heartbeat of every held attempt; the connection to reuse."""
        import psycopg

        held = self.snapshot()
        ids = [job_id for job_id, _ in held]
        params = {**self.instance, **self.describe(), "ids": ids, "leases": [lease for _, lease in held]}
        try:
            if conn is None or conn.closed:
                conn = psycopg.connect(self.database_url, autocommit=True, application_name="awa-heartbeat")
            rows = conn.execute(QUERIES["heartbeat_worker"].pyformat, params).fetchall()
        except Exception as exc:  # the connection or the server went away; try again next beat
            log.warning("heartbeat failed (%s); retrying in %.1f s", exc, self.interval)
            if conn is not None:
                conn.close()
            return None
        superseded = set(ids) - {row[0] for row in rows}
        if superseded:
            # Still held here but no longer ours in the database (rescued, cancelled...).
            self.on_superseded(superseded)
        return conn
