"""The public worker API: register handlers, run queues, insert from a producer.

client = Client(database_url)

@client.task(SendEmail, queue="email")
async def send_email(job):
    await mailer.send(job.args.to, job.args.subject)

client.run(queues=["email:20"])       # blocking, until SIGTERM / SIGINT
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar

from .. import enqueue
from ..cron import DEFAULT_OWNER, PeriodicJob, prune_schedules, upsert_schedules
from ..drivers.connect import connect_async, connect_sync, plain_url
from ..drivers.insert_pool import InsertConnections
from ..errors import ValidationError
from ..migrations import migrate
from ..types import InsertManyResult, Job
from .aio import loop_factory, run_to_the_end
from .config import QueueConfig, WorkerConfig, check_setup
from .hooks import Hooks
from .registry import Registry
from .runtime import Runtime

log = logging.getLogger("awa_bridge.worker")

F = TypeVar("F", bound=Callable[..., Any])
QueueSpec = str | tuple[str, int] | QueueConfig

#: Seconds ``run`` gives the tasks still there once the worker stopped (a handler left running at
#: the drain timeout was already given ``runtime.CANCEL_GRACE``) before the process exits without them.
EXIT_GRACE = 1.0


class Client:
    """Handlers, queues and the worker runtime for one database."""

    def __init__(
        self,
        database_url: str | None = None,
        *,
        config: WorkerConfig | None = None,
        schedule_owner: str = DEFAULT_OWNER,
        **timings: Any,
    ):
        url = database_url or os.environ.get("DATABASE_URL")
        if not url:
            raise ValueError("Client needs a database URL (argument or DATABASE_URL)")
        self.database_url = plain_url(url)  # a SQLAlchemy URL is refused here, not at the first connection
        self.config = config or WorkerConfig(**timings)
        self.registry = Registry()
        self.hooks = Hooks()
        self.schedules: dict[str, PeriodicJob] = {}
        #: Whose declared schedules this client's are: at start it deletes the ones this owner
        #: declared before and no longer declares. Give clients that share a database but
        #: declare different schedules different owners.
        self.schedule_owner = schedule_owner
        #: Prune at start even with no schedule declared (the Django worker: settings are the truth).
        self.prune_when_empty = False
        self.runtime: Runtime | None = None
        self._insert_pool: InsertConnections | None = None

    # -- registration ------------------------------------------------------

    def task(
        self,
        args_type: type | str,
        *,
        kind: str | None = None,
        queue: str = "default",
        transactional: bool = False,
        transaction: Callable[[], Any] | None = None,
        executor: str | None = None,
    ) -> Callable[[F], F]:
        """Register the decorated function as the handler of a job kind.

        ``args_type`` is a dataclass or pydantic model (the kind is its snake
        case name and ``job.args`` an instance of it), or a kind name (then
        ``job.args`` is the dict). ``async def`` handlers run on the event
        loop, plain ``def`` handlers in threads. With ``transactional=True``
        the handler gets ``job.conn`` (asyncpg for async handlers, psycopg for
        sync ones) inside the transaction that also records the job's outcome.
        ``transaction`` replaces that psycopg transaction for a sync handler: a
        context manager factory that opens a transaction and yields a
        connection the bridge supports (awa_django passes Django's
        ``atomic()``), committing on a clean exit and rolling back on an error.
        ``executor="process"`` runs a plain sync handler in a child process that
        is killed at the queue's deadline (default: the queue's ``executor``;
        see ``awa_bridge.worker.processes``).
        """

        def decorate(fn: F) -> F:
            self.registry.register(
                args_type,
                fn,
                kind=kind,
                queue=queue,
                transactional=transactional,
                transaction=transaction,
                executor=executor,
            )
            return fn

        return decorate

    def periodic(self, name: str, cron_expr: str, args: Any = None, **options: Any) -> PeriodicJob:
        """Declare a periodic job; stored in ``awa.cron_jobs`` when this client's worker starts.

        ``options``: ``kind``, ``timezone`` (IANA, default UTC), ``queue``,
        ``priority``, ``max_attempts``, ``tags``, ``metadata`` and
        ``missed_fire_policy`` (``"coalesce"``, the default, or ``"catch_up"``).
        Validated now (``ValidationError`` naming the field). See
        ``awa_bridge.cron`` and docs/howto/cron.md.
        """
        schedule = PeriodicJob(name, cron_expr, {} if args is None else args, **options)
        if name in self.schedules:
            raise ValidationError("name", f"schedule {name!r} is already declared on this client")
        self.schedules[name] = schedule
        return schedule

    def on(self, event: str) -> Callable[[F], F]:
        """Register a lifecycle hook: started, completed, retried, exhausted, cancelled, rescued, snoozed
        (subject: the job), ready, shutdown (subject: this client)."""

        def decorate(fn: F) -> F:
            self.hooks.add(event, fn)
            return fn

        return decorate

    # -- running -------------------------------------------------------------

    def queue_configs(self, queues: Iterable[QueueSpec] | None) -> list[QueueConfig]:
        if queues is None:
            names = sorted({h.queue for h in self.registry.handlers.values()}) or ["default"]
            return [QueueConfig(name) for name in names]
        configs = [QueueConfig.parse(spec) for spec in queues]
        if not configs:
            raise ValueError("give at least one queue")
        return configs

    def check(self, queues: Iterable[QueueSpec] | None = None) -> list[QueueConfig]:
        """The queues ``start`` would run, after refusing (``ValidationError``) a setup it would refuse:
        min_workers above global_max_workers, a process executor for a handler a child cannot import.
        It opens nothing, so a command can check before it prints a banner."""
        configs = self.queue_configs(queues)
        check_setup(self.registry.handlers.values(), configs, self.config)
        return configs

    async def start(self, queues: Iterable[QueueSpec] | None = None) -> None:
        """Start claiming on ``queues`` (default: the queues of the registered handlers)."""
        if self.runtime is not None and self.runtime.started:
            raise RuntimeError("this client's worker is already running")
        runtime = Runtime(self.database_url, self.registry, self.queue_configs(queues), self.config, self.hooks)
        # Refuses a database the real Awa migrated (ForeignSchema) or an unmigrated one
        # (SchemaNotMigrated) at once, with one line, before any loop starts.
        await runtime.open()
        try:
            if self.schedules or self.prune_when_empty:
                await self._declare_schedules()
            await runtime.start()
        except BaseException:
            await runtime.shutdown()
            raise
        self.runtime = runtime
        self.hooks.fire("ready", self)

    async def _declare_schedules(self) -> None:
        owner = self.schedule_owner
        db = await connect_async(self.database_url)
        try:
            async with db.transaction():
                changed = await upsert_schedules(db.conn, self.schedules.values(), owner=owner)
                removed = await prune_schedules(db.conn, self.schedules, owner=owner)
        finally:
            await db.close()
        if self.schedules:
            names = ", ".join(sorted(self.schedules))
            log.info("periodic jobs declared: %s (%d new or changed)", names, len(changed))
        else:
            log.info("no periodic jobs declared")
        if removed:
            log.info("periodic jobs no longer declared, deleted: %s", ", ".join(removed))

    async def shutdown(self, timeout: float | None = None) -> None:
        """Stop claiming, drain for up to ``timeout`` seconds, release what is left."""
        if self.runtime is not None:
            if self.runtime.started:
                self.hooks.fire("shutdown", self)
            await self.runtime.shutdown(timeout)
        if self._insert_pool is not None:
            await self._insert_pool.close()
            self._insert_pool = None

    def run(self, queues: Iterable[QueueSpec] | None = None, *, tune_gc: bool = True) -> None:
        """Run until SIGTERM or SIGINT, then shut down gracefully.

        This process is a worker: ``tune_gc`` (default on) tunes its garbage collector for
        that first (``awa_bridge.worker.tune_gc``), and the loop is the one
        ``event_loop`` names (asyncio's own by default). Where no logging is set up (no handler
        on the root or the ``awa_bridge`` logger), awa_bridge's log goes to stderr at INFO.
        A second SIGTERM / SIGINT releases the jobs still running at once.
        """
        if tune_gc:
            from .gctuning import tune_gc as tune

            tune()
        if not logging.getLogger().handlers and not logging.getLogger("awa_bridge").handlers:
            # A script that set up no logging would run silent (schedules deleted at start
            # included): awa_bridge's lines go to stderr at INFO, as the CLI worker prints them.
            from ..cli_support import configure_logging

            configure_logging("info")
        # Not asyncio.run: its teardown waits for ever for a handler deaf to its cancellation.
        run_to_the_end(self._run_until_signal(queues), loop_factory(self.config.event_loop), EXIT_GRACE)

    async def _run_until_signal(self, queues: Iterable[QueueSpec] | None) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self._signalled, sig, stop)
        await self.start(queues)
        log.info("event loop: %s.%s", type(loop).__module__, type(loop).__name__)
        try:
            await stop.wait()
        finally:
            await self.shutdown()

    def _signalled(self, sig: signal.Signals, stop: asyncio.Event) -> None:
        """The first SIGTERM / SIGINT drains; the next one releases what still runs at once."""
        if not stop.is_set():
            log.info(
                "received %s: shutting down gracefully; running jobs have up to %.0f s to finish"
                " (send %s again to release them now)",
                sig.name,
                self.config.drain_timeout,
                sig.name,
            )
            stop.set()
        elif self.runtime is not None:
            log.warning("received %s again: releasing the running jobs now", sig.name)
            self.runtime.stop_now()

    # -- producing -------------------------------------------------------------

    def migrate(self) -> list[str]:
        """Apply the schema migrations (see ``awa_bridge.migrate``)."""
        return migrate(self.database_url)

    def _pool(self) -> InsertConnections:
        if self._insert_pool is None:
            self._insert_pool = InsertConnections(self.database_url)
        return self._insert_pool

    async def insert(self, args: Any, **opts: Any) -> Job:
        """Insert one job in its own transaction (for producers without a transaction of their own)."""
        async with self._pool().acquire() as conn:
            return await enqueue.insert_job(conn, args, **opts)

    async def insert_many(self, jobs: Sequence[Any], **opts: Any) -> InsertManyResult:
        async with self._pool().acquire() as conn, conn.transaction():
            return await enqueue.insert_many(conn, jobs, **opts)

    def insert_sync(self, args: Any, **opts: Any) -> Job:
        """Blocking form of ``insert`` (one short-lived psycopg connection)."""
        with connect_sync(self.database_url) as db:
            return enqueue.insert_job_sync(db.conn, args, **opts)
