"""The worker's lifecycle: claim, dispatch, finalize, drain.

One producer per queue claims up to its free slots in one statement (woken by
NOTIFY, by freed slots while a backlog remains, or by its poll interval);
each claimed attempt runs as a task; the completer writes outcomes in
batches; the heartbeat thread keeps held attempts alive and this process's
row in the worker registry fresh; the maintenance thread (leading in
whichever process holds the lease) promotes, rescues and cleans up.

A slot is held from the claim until the attempt's handler has really
returned: a sync handler still blocked past its deadline keeps counting
against its queue, so the worker never claims work it has no thread for.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..enqueue import decode_json
from ..errors import ValidationError
from ..sql import QUERIES
from .aio import keep_session, sleep_unless
from .completer import Completer
from .config import QueueConfig, WorkerConfig
from .context import JobContext
from .executor import run_attempt
from .heartbeat import HeartbeatThread
from .hooks import Hooks
from .listener import Listener
from .maintenance import Maintenance
from .maintenance.aging import age_priorities
from .outcomes import Outcome, error_record, log_outcome
from .registry import Registry
from .rollup import Rollup
from .scheduling import TokenBucket, weighted_allowance
from .threads import DaemonThreadPool

log = logging.getLogger("awa_bridge.worker")


@dataclass
class QueueState:
    config: QueueConfig
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    running: int = 0
    backlog: bool = False  # the last claim filled its batch: more may be waiting
    pending: int = 0  # slots held for a claim in flight (the global limit counts them)
    bucket: TokenBucket | None = None
    next_aging: float = 0.0

    def __post_init__(self) -> None:
        if self.config.max_rate is not None:
            self.bucket = TokenBucket(self.config.max_rate, self.config.bucket_size)

    @property
    def free(self) -> int:
        return self.config.max_workers - self.running

    @property
    def occupied(self) -> int:
        return self.running + self.pending

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def min_workers(self) -> int:
        return self.config.min_workers

    @property
    def weight(self) -> int:
        return self.config.weight


class Runtime:
    def __init__(
        self,
        database_url: str,
        registry: Registry,
        queues: Sequence[QueueConfig],
        config: WorkerConfig,
        hooks: Hooks,
    ) -> None:
        if not queues:
            raise ValueError("a worker needs at least one queue")
        self.database_url = database_url
        self.registry = registry
        self.config = config
        self.hooks = hooks
        self.queues = {q.name: QueueState(q) for q in queues}
        floors = sum(q.min_workers for q in queues)
        if config.global_max_workers is not None and floors > config.global_max_workers:
            raise ValidationError(
                "global_max_workers",
                f"is {config.global_max_workers}, less than the queues' min_workers together ({floors})",
            )
        self.inflight: dict[int, JobContext] = {}
        self.inflight_lock = threading.Lock()
        self.stopping = asyncio.Event()
        self.claiming = True
        self.instance_id = uuid.uuid4()
        self.services: list[asyncio.Task[Any]] = []
        self.attempts: set[asyncio.Task[Any]] = set()
        self._sync_pool: Any = None
        self._tx_pool: Any = None
        self._tx_pool_lock = asyncio.Lock()
        self._process_pools: dict[str, Any] = {}
        self._process_pools_lock = threading.Lock()
        self.maintenance: Maintenance | None = None
        self.started = False

    # -- lifecycle ---------------------------------------------------------

    def _check_process_handlers(self) -> None:
        """A handler the process executor runs must be importable by name in a child: say so at start."""
        import pickle

        for handler in self.registry.handlers.values():
            state = self.queues.get(handler.queue)
            on_queue = state is not None and state.config.executor == "process" and handler.executor is None
            if handler.is_async or handler.transactional or not (on_queue or handler.executor == "process"):
                continue
            try:
                pickle.dumps(handler.fn)
            except Exception:
                field_name = "executor" if handler.executor == "process" else f"queues[{handler.queue}].executor"
                raise ValidationError(
                    field_name,
                    f"'process' runs handlers in child processes, which import them by name: the handler of "
                    f"{handler.kind!r} is not a module-level function",
                ) from None

    async def start(self) -> None:
        import asyncpg

        self._check_process_handlers()
        self.loop = asyncio.get_running_loop()
        size = max(4, len(self.queues) + 3)
        # reset=keep_session: this pool runs only the runtime's own statements
        # (claims, completions, progress, callbacks, counters): none leaves session
        # state behind, so asyncpg's reset round trip on every release (RESET ALL,
        # UNLISTEN *, ...) would only cost a round trip per claim and per
        # completion batch. An open transaction is still rolled back on release.
        self.pool = await asyncpg.create_pool(
            self.database_url,
            min_size=2,
            max_size=size,
            server_settings={"application_name": "awa-worker"},
            reset=keep_session,
        )
        sync_slots = sum(q.config.max_workers for q in self.queues.values())
        self.threads = DaemonThreadPool(min(sync_slots, 256))
        self.completer = Completer(
            self.pool, self.config.completion_batch, self.config.completion_flush, self.finished, self.abandon
        )
        if self.config.maintenance:
            self.maintenance = Maintenance(self.database_url, self.config, self.instance_id, self._rescued_elsewhere)
            self.maintenance.start()
        self.heartbeat = HeartbeatThread(
            self.database_url,
            self.config.heartbeat_interval,
            self.held,
            self._superseded,
            self._describe,
            self.instance_id,
        )
        self.heartbeat.start()
        self.listener = Listener(self.database_url, self._notified)
        self.rollup = Rollup(self.pool)
        self.services = [
            asyncio.create_task(self.rollup.run(self.stopping), name="awa-rollup"),
            asyncio.create_task(self.completer.run(self.stopping), name="awa-completer"),
            asyncio.create_task(self.listener.run(self.stopping), name="awa-listener"),
        ]
        for state in self.queues.values():
            if state.config.executor == "process":
                self.process_pool(state.name).warm(state.config.max_workers)
        self.producers = [
            asyncio.create_task(self._produce(state), name=f"awa-producer-{name}")
            for name, state in self.queues.items()
        ]
        self.started = True
        queues = ", ".join(f"{q.config.name} ({q.config.max_workers} workers)" for q in self.queues.values())
        log.info("worker started: queues %s; kinds %s", queues, ", ".join(sorted(self.registry.handlers)) or "-")

    async def shutdown(self, timeout: float | None = None) -> None:
        """Stop claiming, let running attempts finish for up to ``timeout``, release the rest."""
        if not self.started:
            return
        timeout = self.config.drain_timeout if timeout is None else timeout
        self.claiming = False
        for state in self.queues.values():
            state.wake.set()
        await asyncio.gather(*self.producers, return_exceptions=True)
        running = list(self.attempts)
        log.info(
            "shutting down: no more claims; draining %d running job(s) for up to %.1f s",
            len(running),
            timeout,
        )
        if running:
            _, pending = await asyncio.wait(running, timeout=timeout)
            if pending:
                await self._release(pending)
        await self.completer.drain()
        self.stopping.set()
        await asyncio.gather(*self.services, return_exceptions=True)
        if self.maintenance is not None:
            await asyncio.to_thread(self.maintenance.stop)
        await asyncio.to_thread(self.heartbeat.stop)
        self.threads.shutdown()
        for pool in self._process_pools.values():
            pool.shutdown()
        await self.pool.close()
        if self._tx_pool is not None:
            await self._tx_pool.close()
        if self._sync_pool is not None:
            self._sync_pool.close()
        self.started = False
        log.info("worker stopped")

    async def _release(self, pending: set[asyncio.Task[Any]]) -> None:
        with self.inflight_lock:
            held = [(c.id, c.run_lease) for c in self.inflight.values() if c._task in pending]
            for ctx in self.inflight.values():
                if ctx._task in pending:
                    ctx._cancelled.set()
        for task in pending:
            task.cancel()
        if held:
            query = QUERIES["release_jobs"]
            params = {"ids": [i for i, _ in held], "leases": [lease for _, lease in held]}
            try:
                async with self.pool.acquire() as conn:
                    rows = await conn.fetch(query.numeric, *query.positional(params))
                log.warning("drain timeout: released %d unfinished job(s) for prompt retry", len(rows))
            except Exception as exc:
                log.warning("could not release %d job(s) (%s); rescue will recover them", len(held), exc)
            with self.inflight_lock:
                for job_id, _ in held:
                    self.inflight.pop(job_id, None)
        await asyncio.gather(*pending, return_exceptions=True)

    # -- producing -----------------------------------------------------------

    def _allowance(self, state: QueueState) -> int:
        """Slots this queue may fill now: its own limit, the global one, the claim batch."""
        allowed = min(state.free, self.config.claim_batch)
        if self.config.global_max_workers is not None:
            allowed = min(allowed, weighted_allowance(state, self.queues.values(), self.config.global_max_workers))
        return allowed

    async def _produce(self, state: QueueState) -> None:
        q = state.config
        query = QUERIES["claim_jobs"]
        failures = 0
        while self.claiming:
            state.wake.clear()
            wait = q.poll_interval * random.uniform(0.9, 1.1)  # jitter spreads the polls of many workers
            want = self._allowance(state)
            if want > 0 and state.bucket is not None:
                tokens = state.bucket.available()
                if tokens < 1:
                    wait = min(wait, state.bucket.seconds_until_token())
                want = min(want, tokens)
            if want > 0:
                params = {"queue": q.name, "limit": want, "deadline_seconds": float(q.deadline)}
                state.pending = want
                try:
                    async with self.pool.acquire() as conn:
                        if q.priority_aging and time.monotonic() >= state.next_aging:
                            await age_priorities(conn, q.name, q.priority_aging)
                            state.next_aging = time.monotonic() + max(q.priority_aging / 4, 0.05)
                        rows = await conn.fetch(query.numeric, *query.positional(params))
                    failures = 0
                except Exception as exc:
                    state.pending = 0
                    failures += 1
                    delay = min(0.1 * 2**failures, 5.0)
                    log.warning("claim on queue %s failed (%s); retrying in %.1f s", q.name, exc, delay)
                    await asyncio.sleep(delay)
                    continue
                finally:
                    state.pending = 0
                if state.bucket is not None:
                    state.bucket.take(len(rows))
                state.backlog = len(rows) == want
                for row in rows:
                    self._dispatch(state, row)
                if state.backlog and self._allowance(state) > 0 and (state.bucket is None or state.bucket.available()):
                    continue
            if not self.claiming:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.wake.wait(), wait)

    def _dispatch(self, state: QueueState, row: Any) -> None:
        ctx = JobContext(
            id=row["id"],
            kind=row["kind"],
            queue=row["queue"],
            args=None,
            raw_args=decode_json(row["args"]),
            attempt=row["attempt"],
            max_attempts=row["max_attempts"],
            priority=row["priority"],
            metadata=decode_json(row["metadata"]),
            tags=list(row["tags"]),
            run_lease=row["run_lease"],
            progress=json.loads(row["progress"]) if row["progress"] else None,
            deadline_at=row["deadline_at"],
            _runtime=self,
        )
        with self.inflight_lock:
            self.inflight[ctx.id] = ctx
        state.running += 1
        task = asyncio.create_task(self._execute(state, ctx))
        ctx._task = task
        self.attempts.add(task)
        task.add_done_callback(self.attempts.discard)

    async def _execute(self, state: QueueState, ctx: JobContext) -> None:
        try:
            outcome = await run_attempt(self, self.registry.get(ctx.kind), ctx)
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
            lingering = ctx._lingering
            if lingering is not None and not lingering.done():
                lingering.add_done_callback(lambda _: self._free_slot(state))
            else:
                self._free_slot(state)
        if outcome is not None:
            self.completer.submit(ctx, outcome)

    def _free_slot(self, state: QueueState) -> None:
        state.running -= 1
        if state.backlog and state.free >= max(1, min(self.config.claim_batch, state.config.max_workers) // 4):
            state.wake.set()
        if self.config.global_max_workers is not None:
            # A slot freed under the global limit may be another queue's to take.
            for other in self.queues.values():
                if other.backlog:
                    other.wake.set()

    # -- callbacks from the services -------------------------------------------

    def finished(self, ctx: JobContext, outcome: Outcome, applied: bool) -> None:
        """An outcome was written (``applied``) or found superseded."""
        with self.inflight_lock:
            if self.inflight.get(ctx.id) is ctx:
                del self.inflight[ctx.id]
        if not applied:
            log.warning(
                "job %s: the %s write for attempt %s (run_lease %s) changed nothing: "
                "the attempt was superseded (rescued, cancelled or released)",
                ctx.id,
                outcome.label,
                ctx.attempt,
                ctx.run_lease,
            )
            return
        self.rollup.count(ctx.queue, outcome.label)
        log_outcome(log, ctx, outcome)
        self.hooks.fire(outcome.label, ctx)

    def abandon(self, ctx: JobContext) -> None:
        """Stop holding an attempt whose outcome cannot be written (the leader will rescue it)."""
        with self.inflight_lock:
            if self.inflight.get(ctx.id) is ctx:
                del self.inflight[ctx.id]

    def held(self) -> list[tuple[int, int]]:
        with self.inflight_lock:
            return [(c.id, c.run_lease) for c in self.inflight.values()]

    def _superseded(self, ids: set[int]) -> None:
        """From the heartbeat thread: these attempts are no longer ours (their handlers must not start)."""
        with self.inflight_lock:
            for job_id in ids:
                ctx = self.inflight.get(job_id)
                if ctx is not None:
                    ctx._lost = True
                    ctx._cancelled.set()

    def _describe(self) -> dict[str, Any]:
        """From the heartbeat thread: what this process's registry row says besides its jobs."""
        queues = [
            {"name": q.name, "max_workers": q.config.max_workers, "running": q.running} for q in self.queues.values()
        ]
        leader = self.maintenance is not None and self.maintenance.is_leader
        return {"queues": json.dumps(queues), "is_leader": leader}

    def executor_of(self, handler: Any, queue: str) -> str:
        """Where a sync handler runs: its registration's executor, else its queue's."""
        if handler.executor is not None:
            return str(handler.executor)
        state = self.queues.get(queue)
        return state.config.executor if state is not None else "thread"

    def process_pool(self, queue: str) -> Any:
        """The child processes of ``queue`` (created on first use; see ``processes``)."""
        from .processes import ProcessPool

        with self._process_pools_lock:
            pool = self._process_pools.get(queue)
            if pool is None:
                state = self.queues.get(queue)
                per_child = state.config.max_tasks_per_child if state is not None else None
                pool = self._process_pools[queue] = ProcessPool(queue, per_child)
        return pool

    def _notified(self, queue: str) -> None:
        state = self.queues.get(queue)
        if state is not None:
            state.wake.set()

    def _rescued_elsewhere(self, rows: list[Any]) -> None:
        """From the maintenance thread: fire the ``rescued`` hooks on the worker's loop."""
        self.loop.call_soon_threadsafe(self._rescued, rows)

    def _rescued(self, rows: list[Any]) -> None:
        for row in rows:
            self.hooks.fire("rescued", dict(row))

    # -- helpers for handlers ------------------------------------------------------

    async def flush_progress(self, ctx: JobContext) -> None:
        from .completer import complete_params

        query = QUERIES["flush_progress"]
        params = complete_params(ctx)
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(query.numeric, *query.positional(params))
        ctx._raise_if_stale(row is not None)
        ctx.mark_flushed()

    def _handler_pool_size(self) -> int:
        return max(2, min(sum(q.config.max_workers for q in self.queues.values()), 20))

    async def transaction_pool(self) -> Any:
        """Connections for async transactional handlers, apart from the runtime's own.

        A handler holds its connection for its whole run; sharing the pool
        used for claims and completions would let slow handlers starve them.
        """
        import asyncpg

        async with self._tx_pool_lock:
            if self._tx_pool is None:
                self._tx_pool = await asyncpg.create_pool(
                    self.database_url,
                    min_size=1,
                    max_size=self._handler_pool_size(),
                    server_settings={"application_name": "awa-handler"},
                )
        return self._tx_pool

    async def register_callback(self, ctx: JobContext, timeout: float) -> str:
        import uuid

        callback_id = str(uuid.uuid4())
        query = QUERIES["register_callback"]
        params = {"callback_id": callback_id, "timeout_seconds": timeout, "id": ctx.id, "lease": ctx.run_lease}
        async with self.pool.acquire() as conn:
            row = await conn.fetchrow(query.numeric, *query.positional(params))
        ctx._raise_if_stale(row is not None)
        ctx.callback_id = callback_id
        return callback_id

    @contextlib.contextmanager
    def sync_connection(self) -> Iterator[Any]:
        """A psycopg connection for sync transactional handlers (pooled)."""
        from psycopg_pool import ConnectionPool

        with self.inflight_lock:
            if self._sync_pool is None:
                self._sync_pool = ConnectionPool(
                    self.database_url,
                    min_size=1,
                    max_size=self._handler_pool_size(),
                    open=True,
                    # A connection the server dropped while idle would cost a handler its attempt.
                    check=ConnectionPool.check_connection,
                    kwargs={"application_name": "awa-handler"},
                )
        with self._sync_pool.connection() as conn:
            yield conn

    @contextlib.contextmanager
    def sync_transaction(self) -> Iterator[Any]:
        """The default transaction of sync transactional handlers: psycopg, from the pool."""
        with self.sync_connection() as conn, conn.transaction():
            yield conn

    async def wait_idle(self, poll: float = 0.05) -> None:
        """Test helper: wait until nothing is running or pending."""
        while self.attempts or self.completer.pending:
            await sleep_unless(self.stopping, poll)
