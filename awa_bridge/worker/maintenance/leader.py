"""Maintenance leadership: a lease renewed in the database, on a thread of its own.

Maintenance never depends on handler code being well behaved: it runs on its
own thread, with its own event loop and connections, so an async handler
that blocks the worker's loop (``time.sleep``) or a loop starved of CPU
stalls nothing but its own jobs.

Leadership is the row of ``awa.maintenance_lease``: the leader renews it
every ``leader_election_interval``; it lasts ``leader_lease`` seconds. A
leader that stops renewing (SIGSTOP-frozen, blocked, starved, cut off) loses
it when it expires, and the next candidate to try takes it over: within
``leader_lease + leader_election_interval`` of the last renewal. The lease
connection also holds a session advisory lock, recorded with the lease; when
the holder held it, a candidate that gets it knows the holder's session is
gone (killed process, terminated backend) and takes the lease at once, at its
next election. A holder that could not take it (a frozen former leader still
holds it) is replaced only at expiry, and takes it at a renewal once free.

Stale-heartbeat rescue (and pruning the worker registry) waits until the
leader has had one staleness window of continuous view of the database: after
it becomes leader, after its connection comes back from an outage, and after
it was itself not running for long enough that workers paused with it may
look stale (the window less an interval and a half of heartbeats,
``services.View``). Live workers cut off only by an outage or a pause beat
again meanwhile and keep their jobs; the jobs of a worker that really died are
still rescued once the window has passed. A freeze after the leader's last
check, before its statement reaches the server, is refused by the statement
itself, on the server's clock. Deadline and callback-timeout rescue need no
such wait. Stale-heartbeat rescue never takes the attempts the leader's own
process holds: they went stale with it, and its heartbeat thread may resume
later than its maintenance thread (their deadlines still apply).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...drivers.connect import LEADER_SETTINGS, connect_async
from ...sql import QUERIES
from ..aio import sleep_unless
from ..config import WorkerConfig
from .services import Held, Service, View, build_services

if TYPE_CHECKING:
    from ...drivers.asyncpg import Asyncpg

log = logging.getLogger("awa_bridge.worker")


@dataclass
class Term:
    """One run of leadership: its epoch and until when this process may act on it."""

    epoch: int
    valid_until: float  # monotonic: last renewal sent + leader_lease


class Maintenance(threading.Thread):
    """The election and, while this process leads, the maintenance services."""

    def __init__(
        self,
        database_url: str,
        config: WorkerConfig,
        instance_id: uuid.UUID,
        on_rescued: Callable[[list[Any]], None],
        held: Held,
    ) -> None:
        super().__init__(name="awa-maintenance", daemon=True)
        self.database_url = database_url
        self.config = config
        self.instance_id = instance_id
        self.on_rescued = on_rescued  # called on this thread
        self.held = held  # this process's own attempts, never rescued by it
        self.is_leader = False
        self._stop_requested = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stopping: asyncio.Event | None = None

    def stop(self, timeout: float = 5.0) -> None:
        """Give the lease up (a clean handover) and end the thread."""
        self._stop_requested.set()
        loop, stopping = self._loop, self._stopping
        if loop is not None and stopping is not None:
            with contextlib.suppress(RuntimeError):  # the loop already closed
                loop.call_soon_threadsafe(stopping.set)
        if self.is_alive():
            self.join(timeout)

    def run(self) -> None:
        asyncio.run(self._main())

    async def _main(self) -> None:
        self._stopping = stopping = asyncio.Event()
        self._loop = asyncio.get_running_loop()
        if self._stop_requested.is_set():
            return
        while not stopping.is_set():
            db = None
            try:
                db = await self._connect()
                await self._elect(db, stopping)
            except Exception as exc:
                if self.is_leader:
                    log.warning("lost maintenance leadership (%s)", exc)
                else:
                    log.warning("maintenance connection failed (%s)", exc)
                self.is_leader = False
                await sleep_unless(stopping, min(self.config.leader_election_interval, 1.0))
            finally:
                self.is_leader = False
                if db is not None and not db.is_closed():
                    db.terminate()  # closing the session releases the advisory lock

    async def _connect(self) -> Asyncpg:
        return await connect_async(self.database_url, application_name="awa-maintenance", settings=LEADER_SETTINGS)

    async def _connect_uncancelled(self) -> Asyncpg:
        """Connect; cancelled meanwhile (the worker stops), let the handshake finish and close it.

        Cancelling asyncpg in the middle of its handshake leaves a future failed
        with ``unexpected connection_lost()`` that nothing awaits (logged at exit).
        """
        attempt = asyncio.ensure_future(self._connect())
        try:
            return await asyncio.shield(attempt)
        except asyncio.CancelledError:
            with contextlib.suppress(Exception):
                (await attempt).terminate()
            raise

    async def _acquire(self, db: Asyncpg, locked: bool) -> Any:
        """Take or renew the lease; ``locked``: this session holds the leader's advisory lock now."""
        params = {"holder": self.instance_id, "ttl_seconds": float(self.config.leader_lease), "locked": locked}
        return await db.fetch_one(QUERIES["acquire_maintenance_lease"], params)

    @staticmethod
    async def _try_lock(db: Asyncpg) -> bool:
        row = await db.fetch_one(QUERIES["try_leader_lock"])
        return row is not None and bool(row["acquired"])

    async def _holder_locked(self, db: Asyncpg) -> bool:
        row = await db.fetch_one(QUERIES["lease_holder_locked"])
        return row is not None and bool(row["holder_locked"])

    async def _elect(self, db: Asyncpg, stopping: asyncio.Event) -> None:
        """Try for the lease every election interval; lead while it is held.

        The advisory lock is taken only where it tells something: by a new leader (and held
        while it leads), and by a candidate only when the holder is recorded as holding it,
        so that getting it means the holder's session is gone. Candidates that took it at
        every election held it at the instants a live leader without it tried for it, and,
        elections and renewals running at the same interval, could do so at every renewal.
        """
        while not stopping.is_set():
            sent = time.monotonic()
            row = await self._acquire(db, False)  # a free or expired lease, or our own
            locked = False
            if row is not None or await self._holder_locked(db):
                locked = await self._try_lock(db)
                if locked:  # recorded with the lease: a failover need not wait for it to expire
                    sent = time.monotonic()
                    row = await self._acquire(db, True)
            if row is not None:
                term = Term(row["epoch"], sent + self.config.leader_lease)
                await self._lead(db, term, locked, stopping)
                if stopping.is_set():
                    return
            elif locked:
                await db.execute(QUERIES["leader_unlock"])
            await sleep_unless(stopping, self.config.leader_election_interval)

    async def _lead(self, db: Asyncpg, term: Term, locked: bool, stopping: asyncio.Event) -> None:
        """Renew the lease while the services run; return when it is lost or the worker stops."""
        self.is_leader = True
        log.info("became the maintenance leader (lease epoch %s)", term.epoch)
        services = asyncio.create_task(self._serve(term), name="awa-maintenance-services")
        try:
            while not stopping.is_set():
                await sleep_unless(stopping, self.config.leader_election_interval)
                if stopping.is_set():
                    break
                if not locked:  # took the lease by expiry: the old holder may still hold the lock
                    locked = await self._try_lock(db)
                sent = time.monotonic()
                row = await self._acquire(db, locked)
                if row is None or row["epoch"] != term.epoch:
                    log.warning(
                        "lost maintenance leadership: the lease (epoch %s) expired and passed to another worker",
                        term.epoch,
                    )
                    break
                term.valid_until = sent + self.config.leader_lease
            if stopping.is_set():
                await db.execute(QUERIES["release_maintenance_lease"], {"holder": self.instance_id})
        finally:
            services.cancel()
            await asyncio.gather(services, return_exceptions=True)
            self.is_leader = False
        if locked and not stopping.is_set():
            await db.execute(QUERIES["leader_unlock"])

    async def _serve(self, term: Term) -> None:
        """The services, on a connection of their own, while ``term`` is valid."""
        services = build_services(self.config, self.on_rescued, self.held)
        view = View(self.config.heartbeat_staleness, self.config.heartbeat_interval)
        db = None
        try:
            while True:
                try:
                    if db is None or db.is_closed():
                        db = await self._connect_uncancelled()
                        view.restart()
                    await self._tick(db, services, term, view)
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    log.warning("maintenance pass failed (%s); retrying", exc)
                    if db is not None and not db.is_closed():
                        db.terminate()
                    db = None
                    await asyncio.sleep(min(self.config.leader_election_interval, 1.0))
                    continue
                now = time.monotonic()
                wait = min(s.due for s in services) - now if now < term.valid_until else self.config.promote_interval
                wait = max(0.0, min(wait, self.config.promote_interval, view.longest_sleep))
                view.step()
                await asyncio.sleep(wait)
                view.step(away=wait)  # overslept by more than the window: frozen (SIGSTOP) or starved
        finally:
            if db is not None and not db.is_closed():
                db.terminate()

    @staticmethod
    async def _tick(db: Asyncpg, services: list[Service], term: Term, view: View) -> None:
        """Run the services that are due, while ``term`` is valid."""
        for service in services:
            now = time.monotonic()
            if now >= term.valid_until:
                return  # the lease may have passed on: act again only after a renewal
            if service.due <= now:
                await service.run_pass(db, view)
