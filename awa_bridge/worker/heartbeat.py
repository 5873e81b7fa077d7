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

import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from ..drivers.connect import connect_sync
from ..sql import QUERIES

if TYPE_CHECKING:
    from ..drivers.psycopg import PsycopgSync

log = logging.getLogger("awa_bridge.worker")


class HeartbeatThread(threading.Thread):
    def __init__(
        self,
        database_url: str,
        interval: float,
        snapshot: Callable[[], list[tuple[int, int]]],
        on_superseded: Callable[[set[tuple[int, int]]], None],
        describe: Callable[[], dict[str, Any]],
        instance_id: uuid.UUID,
    ) -> None:
        super().__init__(name="awa-heartbeat", daemon=True)
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
            "version": None,  # read on this thread (importlib.metadata is slow to load: off the event loop)
            "started_at": datetime.now(UTC),
        }

    def stop(self, timeout: float = 5.0) -> None:
        """Stop beating and leave the registry (waits up to ``timeout`` for the last statement)."""
        self.stopping.set()
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        from importlib.metadata import PackageNotFoundError, version

        with contextlib.suppress(PackageNotFoundError):  # run from a source tree never installed: None
            self.instance["version"] = version("awa-bridge")
        db = None
        while True:
            db = self._beat(db)
            if self.stopping.wait(self.interval):
                break
        if db is not None:
            try:
                db.execute(QUERIES["delete_runtime_instance"], {"instance_id": self.instance["instance_id"]})
            except Exception as exc:
                log.warning("could not remove this worker from awa.runtime_instances (%s)", exc)
            db.close()

    def _beat(self, db: PsycopgSync | None) -> PsycopgSync | None:
        """One statement: the registry row and the heartbeat of every held attempt; the connection to reuse."""
        try:
            held = self.snapshot()
            ids = [job_id for job_id, _ in held]
            params = {**self.instance, **self.describe(), "ids": ids, "leases": [lease for _, lease in held]}
            if db is None or db.closed:
                db = connect_sync(self.database_url, application_name="awa-heartbeat")
            rows = db.fetch_all(QUERIES["heartbeat_worker"], params)
        except Exception as exc:  # the connection or the server went away (or a bug): try again next beat
            log.warning("heartbeat failed (%s); retrying in %.1f s", exc, self.interval)
            if db is not None:
                db.close()
            return None
        alive = {row["id"] for row in rows}
        # Still held here but no longer ours in the database (rescued, cancelled...). By (id,
        # run_lease): a later attempt of the same job claimed since the snapshot is not touched.
        superseded = {(job_id, lease) for job_id, lease in held if job_id not in alive}
        if superseded:
            self.on_superseded(superseded)
        return db
