"""The worker's lifecycle: it assembles the parts, dispatches claimed rows, drains.

The parts, each a small class with one loop, and what they are told:

- ``producer.Producer`` (one per queue) claims up to its free slots and hands
  each row to ``_dispatch``;
- ``executor`` runs an attempt (``Executor``: loop, handler threads, handler
  pools, hooks, completer) and returns its outcome;
- ``completer.Completer`` writes outcomes in batches and reports each one
  (``finished``) or gives it up (``abandon``);
- ``heartbeat.HeartbeatThread`` keeps held attempts alive and this process's
  row in the worker registry fresh, asking ``held.HeldAttempts`` for a
  snapshot and telling it which were superseded;
- ``listener.Listener`` turns NOTIFY into ``_notified(queue)``;
- ``maintenance.Maintenance`` (leading in whichever process holds the lease)
  promotes, rescues and cleans up, telling only ``_rescued_elsewhere``.

A running handler sees its ``JobContext``, whose writes go through an
``AttemptHandle`` (``attempt.AttemptWrites``), never through the runtime.

A slot is held from the claim until the attempt's handler has really
returned: a sync handler still blocked past its deadline keeps counting
against its queue, so the worker never claims work it has no thread for.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import socket
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from ..drivers.connect import create_pool
from ..enqueue import decode_json_texts
from ..foreign import WORKER_REFUSAL, check_async
from ..migrations import require_schema_async
from ..sql import QUERIES
from .aio import sleep_unless, task_starter
from .attempt import AttemptWrites
from .completer import Completer
from .config import QueueConfig, WorkerConfig, check_setup
from .context import JobContext
from .executor import ClaimDeadline, Executor, run_attempt
from .heartbeat import HeartbeatThread
from .held import HeldAttempts
from .hooks import Hooks
from .listener import Listener
from .maintenance import Maintenance
from .outcomes import COMPLETED, Outcome, error_record, log_outcome
from .pools import HandlerPools
from .producer import CLAIM_COLUMNS, Producer, QueueState, Slots
from .registry import Registry
from .rollup import Rollup
from .threads import DaemonThreadPool

log = logging.getLogger("awa_bridge.worker")

_ARGS, _METADATA, _DEADLINE = map(CLAIM_COLUMNS.index, ("args", "metadata", "deadline_epoch"))

#: Seconds an attempt cancelled at the end of the drain has to end. An async handler that catches
#: CancelledError and goes on (stuck code, not dead) is left running after that: its attempt is
#: already released, so run_lease fences whatever it writes late, and the worker stops without it.
CANCEL_GRACE = 5.0
#: Seconds the worker's pools have to close once the drain is over; a connection still held then (by
#: a handler left running) is closed under it.
POOL_CLOSE_TIMEOUT = 2.0


class Runtime:
    def __init__(
        self,
        database_url: str,
        registry: Registry,
        queues: Sequence[QueueConfig],
        config: WorkerConfig,
        hooks: Hooks,
    ) -> None:
        check_setup(registry.handlers.values(), queues, config)
        self.database_url = database_url
        self.registry = registry
        self.config = config
        self.hooks = hooks
        self.queues = {q.name: QueueState(q) for q in queues}
        self.held = HeldAttempts()
        self.stopping = asyncio.Event()
        self.instance_id = uuid.uuid4()
        self.services: list[asyncio.Task[Any]] = []
        self.attempts: set[asyncio.Task[Any]] = set()
        self.slots = Slots(self.queues.values(), config.claim_batch, config.global_max_workers)
        self.pools = HandlerPools(database_url, {name: state.config for name, state in self.queues.items()})
        self.maintenance: Maintenance | None = None
        self.started = False
        self.cut_short = asyncio.Event()  # set by stop_now: the drain ends at once

    # -- lifecycle ---------------------------------------------------------

    async def open(self) -> None:
        """Open the runtime's pool and check the database on it, before anything else runs.

        A database the real Awa migrated (``ForeignSchema``) or one that lacks
        a migration (``SchemaNotMigrated``) stops the worker here with one
        line, on the connection the claims will use (no separate connection
        for the checks: a worker's start-up is part of every short drain).
        """
        if hasattr(self, "pool"):
            return
        self.loop = asyncio.get_running_loop()
        # Two claims in flight per queue, the completer, a progress flush or two; what one busy
        # queue needs is opened at start (concurrently), not one by one in the middle of its first
        # backlog, and more only as other queues get busy.
        size = max(4, 2 * len(self.queues) + 3)
        # keep_session: this pool runs only the runtime's own statements
        # (claims, completions, progress, callbacks, counters): none leaves session
        # state behind, so asyncpg's reset round trip on every release (RESET ALL,
        # UNLISTEN *, ...) would only cost a round trip per claim and per
        # completion batch. An open transaction is still rolled back on release.
        self.pool = await create_pool(
            self.database_url,
            min_size=min(size, 5),
            max_size=size,
            application_name="awa-worker",
            keep_session=True,
            own_statements=True,  # every statement it runs is ours: planned once, no sorts (see create_pool)
        )
        try:
            async with self.pool.acquire() as db:
                await check_async(db, WORKER_REFUSAL)
                await require_schema_async(db)
                await self._warn_of_unknown_queues(db)
        except BaseException:
            await self.pool.close()
            del self.pool
            raise

    async def _warn_of_unknown_queues(self, db: Any) -> None:
        """Warn of a queue to run that no handler is registered on and nothing has used yet.

        Most likely a typo (``--queue emial``): such a worker would wait for ever without a word.
        Only a warning, since a queue fed by jobs whose queue is chosen at enqueue time is
        legitimately unknown until its first job arrives.
        """
        registered = {h.queue for h in self.registry.handlers.values()}
        for name in sorted(self.queues.keys() - registered):
            [row] = await db.fetch(QUERIES["queue_known"], {"queue": name})
            if not row["known"]:
                log.warning(
                    "queue %r: no handler is registered on it, and no job, pause or worker has used it; "
                    "a typo? (the handlers' queues: %s)",
                    name,
                    ", ".join(sorted(registered)) or "none",
                )

    async def start(self) -> None:
        await self.open()
        all_slots = sum(q.config.max_workers for q in self.queues.values())
        self.threads = DaemonThreadPool(min(all_slots, 256))
        self.completer = Completer(
            self.pool,
            self.config.completion_batch,
            self.config.completion_flush,
            self.finished,
            self.abandon,
            on_room=self.slots.room,
            limit=all_slots,  # every slot's handler returning at once is not a backlog
        )
        self.slots.congested = self.completer.congested
        self.handle = AttemptWrites(self.loop, self.pool, self.database_url)
        self.start_task = task_starter(self.loop)
        configs = {name: state.config for name, state in self.queues.items()}
        self.executor = Executor(self.loop, self.threads, self.pools, self.completer, self.hooks, configs)
        self._start_threads()
        self.listener = Listener(self.database_url, self._notified)
        self.rollup = Rollup(self.pool)
        self.services = [
            asyncio.create_task(self.rollup.run(self.stopping), name="awa-rollup"),
            asyncio.create_task(self.completer.run(self.stopping), name="awa-completer"),
            asyncio.create_task(self.listener.run(self.stopping), name="awa-listener"),
        ]
        for state in self.queues.values():
            if state.config.executor == "process":
                self.pools.process_pool(state.name).warm(state.config.max_workers)
        claimant = (self.instance_id, f"{socket.gethostname()}/{os.getpid()}")
        self.producers = [
            Producer(state, self.pool, self.slots, self._dispatch, claimant) for state in self.queues.values()
        ]
        self.producer_tasks = [
            asyncio.create_task(producer.run(), name=f"awa-producer-{producer.state.name}")
            for producer in self.producers
        ]
        self.started = True
        queues = ", ".join(f"{q.config.name} ({q.config.max_workers} workers)" for q in self.queues.values())
        log.info("worker started: queues %s; kinds %s", queues, ", ".join(sorted(self.registry.handlers)) or "-")

    def _start_threads(self) -> None:
        """Maintenance and the heartbeat run on threads of their own (a blocked loop stalls neither)."""
        if self.config.maintenance:
            self.maintenance = Maintenance(
                self.database_url, self.config, self.instance_id, self._rescued_elsewhere, self.held.snapshot
            )
            self.maintenance.start()
        self.heartbeat = HeartbeatThread(
            self.database_url,
            self.config.heartbeat_interval,
            self.held.snapshot,
            self.held.supersede,
            self._describe,
            self.instance_id,
        )
        self.heartbeat.start()

    async def shutdown(self, timeout: float | None = None) -> None:
        """Stop claiming, let running attempts finish for up to ``timeout``, release the rest."""
        if not self.started:
            if hasattr(self, "pool"):  # opened, never started
                await self.pool.close()
                del self.pool
            return
        timeout = self.config.drain_timeout if timeout is None else timeout
        for producer in self.producers:
            producer.stop()
        await asyncio.gather(*self.producer_tasks, return_exceptions=True)
        if self.maintenance is not None:
            # Leadership goes first: a draining worker fires no more cron schedules, and another
            # worker takes over maintenance without waiting for this one's drain.
            await asyncio.to_thread(self.maintenance.stop)
        running = list(self.attempts)
        log.info(
            "shutting down: no more claims; draining %d running job(s) for up to %.1f s",
            len(running),
            timeout,
        )
        if running:
            pending = await self._drain(running, timeout)
            if pending:
                await self._release(pending)
        await self.completer.drain()
        self.stopping.set()
        await asyncio.gather(*self.services, return_exceptions=True)
        self.completer.close()  # what a handler left running returns later is not written
        await asyncio.to_thread(self.heartbeat.stop)
        self.threads.shutdown()
        await self.pool.close(POOL_CLOSE_TIMEOUT)
        await self.pools.close(POOL_CLOSE_TIMEOUT)
        self.started = False
        log.info("worker stopped")

    def stop_now(self) -> None:
        """Cut the drain short (a second SIGINT / SIGTERM): the running attempts are released now."""
        self.cut_short.set()

    async def _drain(self, running: list[asyncio.Task[Any]], timeout: float) -> set[asyncio.Task[Any]]:
        """Wait for ``running`` to end, ``timeout`` seconds at most, or until ``stop_now``; what still runs."""
        everything = asyncio.ensure_future(asyncio.wait(running))
        cut = asyncio.ensure_future(self.cut_short.wait())
        try:
            await asyncio.wait((everything, cut), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            everything.cancel()  # only the waiting: asyncio.wait leaves the attempts alone
            cut.cancel()
        return {task for task in running if not task.done()}

    async def _release(self, pending: set[asyncio.Task[Any]]) -> None:
        """Give up the attempts still running at the drain timeout: cancel them, release their jobs
        (attempt given back), and wait ``CANCEL_GRACE`` at most for their handlers to end."""
        given_up = self.held.give_up(pending)
        held = [(ctx.id, ctx.run_lease) for ctx in given_up]
        for task in pending:
            task.cancel()
        if held:
            query = QUERIES["release_jobs"]
            params = {"ids": [i for i, _ in held], "leases": [lease for _, lease in held]}
            try:
                async with self.pool.acquire() as db:
                    rows = await db.fetch(query, params)
                log.warning("drain timeout: released %d unfinished job(s) for prompt retry", len(rows))
            except Exception as exc:
                log.warning("could not release %d job(s) (%s); rescue will recover them", len(held), exc)
            self.held.forget([job_id for job_id, _ in held])
        grace_end = self.loop.time() + CANCEL_GRACE
        _, deaf = await asyncio.wait(pending, timeout=CANCEL_GRACE)
        # A sync handler's task ends at once; its thread runs on until the handler sees job.cancelled
        # and returns: it gets what is left of the grace too, so its clean-up is not cut off.
        threads = [ctx._lingering for ctx in given_up if ctx._lingering is not None and not ctx._lingering.done()]
        if threads:
            await asyncio.wait(threads, timeout=max(0.0, grace_end - self.loop.time()))
        still = [ctx for ctx in given_up if ctx._task in deaf]
        for ctx in still:  # named for the loop's teardown, which may still find it running
            ctx._task.set_name(f"awa job {ctx.id}")
        still += [ctx for ctx in given_up if ctx._lingering is not None and not ctx._lingering.done()]
        if still:
            log.warning(
                "job(s) %s: the handler still runs %.0f s after it was told to stop (an async one caught"
                " CancelledError and went on, a sync one did not look at job.cancelled); the worker stops"
                " without it. Its attempt was released: run_lease fences what it writes, and its outcome is"
                " not recorded",
                ", ".join(str(ctx.id) for ctx in still),
                CANCEL_GRACE,
            )

    # -- attempts ------------------------------------------------------------

    def _dispatch(self, state: QueueState, rows: list[Any]) -> None:
        """Start an attempt for each row of one claim (its columns: producer.CLAIM_COLUMNS, by position)."""
        handle = self.handle
        queue = state.name
        deadline = rows[0][_DEADLINE]  # the same for every row of a claim
        deadline_at = datetime.fromtimestamp(deadline, UTC)
        # Each JobContext is its field values set as its instance dict (one dict display), not
        # the dataclass __init__ called with fourteen keywords: a sixth fewer instructions per job.
        # The args and the metadata of the whole claim are each decoded in one parser call.
        contexts: list[JobContext] = []
        append, new = contexts.append, object.__new__
        decoded_args = decode_json_texts([row[_ARGS] for row in rows])
        decoded_metadata = decode_json_texts([row[_METADATA] for row in rows])
        for row, raw_args, metadata in zip(rows, decoded_args, decoded_metadata, strict=True):
            job_id, kind, _, priority, attempt, max_attempts, run_lease, _, tags, progress, _, _ = row
            ctx = new(JobContext)
            ctx.__dict__ = {
                "id": job_id,
                "kind": kind,
                "queue": queue,
                "args": None,
                "raw_args": raw_args,
                "attempt": attempt,
                "max_attempts": max_attempts,
                "priority": priority,
                "metadata": metadata,
                "tags": tags,  # asyncpg decodes an array into a new list
                "run_lease": run_lease,
                "progress": json.loads(progress) if progress else None,
                "deadline_at": deadline_at,
                "conn": None,
                "_handle": handle,
                "callback_id": None,
            }
            append(ctx)
        ClaimDeadline(self.loop, contexts, deadline)
        self.held.add_many(contexts)
        state.running += len(contexts)
        start, attempts = self.start_task, self.attempts
        for ctx in contexts:
            ctx._task = task = start(self._execute(state, ctx))
            if not task.done():  # started eagerly (3.12+), a fast job may have finished already
                attempts.add(task)

    async def _execute(self, state: QueueState, ctx: JobContext) -> None:
        try:
            outcome = await run_attempt(self.executor, self.registry.get(ctx.kind), ctx)
        except asyncio.CancelledError:
            return  # released at shutdown
        except Exception as exc:  # the runtime itself failed (e.g. the database went away)
            log.exception("job %s: attempt failed inside the worker", ctx.id)
            error = error_record(exc, ctx.attempt)
            if ctx.attempt >= ctx.max_attempts:
                # A retry would be claimed past max_attempts: the CHECK on attempt
                # would then fail every claim on this queue.
                outcome = Outcome("failed", error=error, label="exhausted")
            else:
                outcome = Outcome("retryable", delay=1.0, error=error, label="retried")
        finally:
            self.attempts.discard(ctx._task)
            ctx._claim.ended()
            lingering = ctx._lingering
            if lingering is not None and not lingering.done():
                lingering.add_done_callback(lambda _: self.slots.free(state))
            else:
                self.slots.free(state)
        if outcome is not None:
            self.completer.submit(ctx, outcome)

    # -- callbacks from the services -------------------------------------------

    def finished(self, results: list[tuple[JobContext, Outcome, bool]]) -> None:
        """Outcomes written (``applied``) or found superseded: stop holding them, count, log, fire hooks."""
        self.held.drop_many([ctx for ctx, _, _ in results])
        tally: dict[tuple[str, str], int] = {}
        listeners = self.hooks.listeners
        for ctx, outcome, applied in results:
            if not applied:
                log.warning(
                    "job %s: the %s write for attempt %s (run_lease %s) changed nothing: "
                    "the attempt was superseded (rescued, cancelled or released)",
                    ctx.id,
                    outcome.label,
                    ctx.attempt,
                    ctx.run_lease,
                )
                continue
            key = (ctx.queue, outcome.label)
            tally[key] = tally.get(key, 0) + 1
            if outcome is not COMPLETED:  # a plain completion is not logged
                log_outcome(log, ctx, outcome)
            if listeners.get(outcome.label):
                self.hooks.fire(outcome.label, ctx)
        self.rollup.count(tally)

    def abandon(self, ctx: JobContext) -> None:
        """Stop holding an attempt whose outcome cannot be written (the leader will rescue it)."""
        self.held.drop(ctx)

    def _describe(self) -> dict[str, Any]:
        """From the heartbeat thread: what this process's registry row says besides its jobs."""
        queues = [
            {"name": q.name, "max_workers": q.config.max_workers, "running": q.running} for q in self.queues.values()
        ]
        leader = self.maintenance is not None and self.maintenance.is_leader
        return {"queues": json.dumps(queues), "is_leader": leader}

    def _notified(self, queue: str) -> None:
        state = self.queues.get(queue)
        if state is not None:
            state.poke()

    def _rescued_elsewhere(self, rows: list[Any]) -> None:
        """From the maintenance thread: fire the ``rescued`` hooks on the worker's loop."""
        self.loop.call_soon_threadsafe(self._rescued, rows)

    def _rescued(self, rows: list[Any]) -> None:
        for row in rows:
            self.hooks.fire("rescued", dict(row))

    # -- tests ---------------------------------------------------------------------

    @property
    def inflight(self) -> dict[int, JobContext]:
        """The held attempts by job id (tests poll it; read-only)."""
        return self.held.by_id

    async def wait_idle(self, poll: float = 0.05) -> None:
        """Test helper: wait until nothing is running or pending."""
        while self.attempts or self.completer.pending:
            await sleep_unless(self.stopping, poll)
