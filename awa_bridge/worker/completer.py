"""Lease-fenced finalization, batched.

Plain completions are collected for a couple of milliseconds and written with
one UPDATE per batch; other outcomes (retry, fail, snooze, cancel) and
completions carrying progress are written one by one.

A handler's slot is free as soon as it returns, before its outcome is written,
so claiming never waits for the completer, except when the completer falls
behind: with ``limit`` outcomes unwritten (two batches, or the worker's slots
if more) it is ``congested``, the producers claim nothing until it catches up,
and ``on_room`` wakes them. Without that, a
database slowed by something else (a retention burst, a vacuum) let unwritten
outcomes pile up by the hundred thousand; their jobs stay ``running`` and held,
so every heartbeat rewrote all of them, slowing the database further. A write that matches no
row means the attempt was superseded (rescued, cancelled, released): it is
logged and never retried. A database error keeps the batch and tries again;
the jobs stay held and heartbeated meanwhile.

A write cut off by a lost connection may have committed or not. Such an
outcome is resolved by reading the row back on a new connection (its state
and run_lease): found as written, it is reported as applied (the log says so
and its hook fires); still running under our lease, it is written again.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from ..drivers.asyncpg import as_asyncpg
from ..drivers.errors import is_transient as is_transient  # the executor judges errors alike
from ..sql import QUERIES
from .context import JobContext
from .outcomes import Outcome

if TYPE_CHECKING:
    from ..drivers.asyncpg import Asyncpg, AsyncpgPool

log = logging.getLogger("awa_bridge.worker")

# Outcomes written (applied) or found superseded, reported in batches: (attempt, outcome, applied).
Finished = Callable[[list[tuple[JobContext, Outcome, bool]]], None]


def int_array(values: list[int]) -> str:
    """A PostgreSQL array literal of integers (``'{1,2,3}'``), for a parameter cast from text.

    asyncpg checks every element of a list parameter against
    ``collections.abc.Iterable`` (a Python-level ABC call each): for the ids
    and leases of a batched completion that was about 2,400 instructions per
    job, against 1,200 for this text.
    """
    return "{" + ",".join(map(str, values)) + "}"


def finish_params(ctx: JobContext, outcome: Outcome) -> dict[str, Any]:
    """Parameters of ``finish_attempt`` for one outcome."""
    progress, metadata = ctx.pending_progress()
    run_at = None
    if outcome.state in ("retryable", "scheduled", "available"):
        run_at = datetime.now(UTC) + timedelta(seconds=outcome.delay)
    return {
        "id": ctx.id,
        "lease": ctx.run_lease,
        "state": outcome.state,
        "run_at": run_at,
        "refund": 1 if outcome.refund else 0,
        "error": json.dumps(outcome.error) if outcome.error else None,
        "progress": progress,
        "metadata": metadata,
    }


def complete_params(ctx: JobContext) -> dict[str, Any]:
    progress, metadata = ctx.pending_progress()
    return {"id": ctx.id, "lease": ctx.run_lease, "progress": progress, "metadata": metadata}


def completion(ctx: JobContext) -> tuple[Any, dict[str, Any]]:
    """The guarded completion of one job: its query and parameters (with its result, if it set one)."""
    params = complete_params(ctx)
    if ctx._result_json is None:
        return QUERIES["complete_job_with_progress"], params
    return QUERIES["complete_job_with_result"], {**params, "result": ctx._result_json}


class Completer:
    def __init__(
        self,
        pool: AsyncpgPool,
        batch: int,
        flush_interval: float,
        on_finished: Finished,
        on_abandoned: Callable[[JobContext], None],
        on_room: Callable[[], None] = lambda: None,
        limit: int = 0,
    ) -> None:
        self.pool = pool
        self.batch = batch
        self.flush_interval = flush_interval
        self.on_finished = on_finished
        self.on_abandoned = on_abandoned
        self.on_room = on_room
        self.limit = max(limit, 2 * batch)  # unwritten outcomes beyond which producers stop claiming
        self.pending: list[tuple[JobContext, Outcome]] = []
        self.resolving: set[asyncio.Task[None]] = set()
        self.wake = asyncio.Event()
        self.idle = asyncio.Event()
        self.idle.set()
        self.closed = False  # the worker stopped (close): outcomes that arrive now are not written

    def submit(self, ctx: JobContext, outcome: Outcome) -> None:
        if self.closed:
            self._late(ctx, outcome)
            return
        pending = self.pending
        pending.append((ctx, outcome))
        if len(pending) == 1:
            # The first since ``run`` took the last batch; with more pending the writer is already
            # awake (it waits only with none pending) and the completer already not idle.
            self.idle.clear()
            self.wake.set()

    def close(self) -> None:
        """The worker stopped: nothing submitted from now on is written (see ``_late``)."""
        self.closed = True

    @staticmethod
    def _late(ctx: JobContext, outcome: Outcome) -> None:
        """An outcome that arrives after the worker stopped: a handler left running at the drain
        timeout returned at last. Its attempt was released then (run_lease fences it), so there is
        nothing to write, and no pool to write it with."""
        log.info(
            "job %s: attempt %s ended (%s) after its worker stopped; it was released at shutdown, so its"
            " outcome is not recorded",
            ctx.id,
            ctx.attempt,
            outcome.label,
        )

    def congested(self) -> bool:
        """Too many outcomes wait to be written: claim nothing more until they are."""
        return len(self.pending) >= self.limit

    def report(self, ctx: JobContext, outcome: Outcome, applied: bool) -> None:
        """An outcome written elsewhere (a transactional handler's own transaction): report it like ours."""
        self.on_finished([(ctx, outcome, applied)])

    def abandon(self, ctx: JobContext) -> None:
        """An attempt with no outcome to write (superseded before its handler started)."""
        self.on_abandoned(ctx)

    async def run(self, stopping: asyncio.Event) -> None:
        while True:
            if not self.pending:
                if not self.resolving:
                    self.idle.set()
                    if stopping.is_set():
                        return
                self.wake.clear()
                waits = {asyncio.ensure_future(self.wake.wait())}
                if not self.resolving:  # a resolution in flight wakes us when it ends
                    waits.add(asyncio.ensure_future(stopping.wait()))
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
                for waiter in waits:
                    waiter.cancel()
                continue
            if len(self.pending) < self.batch and not stopping.is_set():
                await asyncio.sleep(self.flush_interval)  # let a batch gather
            was_congested = self.congested()
            items, self.pending = self.pending[: self.batch], self.pending[self.batch :]
            try:
                await self.flush(items)
            except Exception as exc:
                if is_transient(exc):
                    log.warning("finalizing %d job(s) failed (%s); retrying", len(items), exc)
                    for ctx, _ in items:
                        ctx._write_uncertain = True
                    self.pending[:0] = items
                    await asyncio.sleep(0.5)
                else:
                    await self.flush_one_by_one(items, exc)
            if was_congested and not self.congested():
                self.on_room()

    async def flush_one_by_one(self, items: list[tuple[JobContext, Outcome]], cause: Exception) -> None:
        """A statement failed for a reason retrying will not fix: isolate the job(s) it concerns.

        A job whose outcome cannot be written at all is let go: its heartbeats
        stop, the leader rescues it, and its attempts bound how often that
        repeats. The rest of the batch is finalized as usual.
        """
        log.warning("a batch of %d outcome(s) failed (%s); writing them one by one", len(items), cause)
        for item in items:
            try:
                await self.flush([item])
            except Exception as exc:
                if is_transient(exc):
                    self.pending.append(item)
                    continue
                ctx, outcome = item
                log.error(
                    "job %s: cannot record its %s outcome (%s); letting it go for the leader to rescue",
                    ctx.id,
                    outcome.label,
                    exc,
                )
                self.on_abandoned(ctx)

    async def flush(self, items: list[tuple[JobContext, Outcome]]) -> None:
        simple: list[tuple[JobContext, Outcome]] = []
        single: list[tuple[JobContext, Outcome]] = []
        for item in items:
            ctx, outcome = item
            # A plain completion goes in the batched statement; other states, and an attempt
            # that recorded progress, metadata or a result, get a statement of their own.
            if outcome.state == "completed" and not (
                ctx._progress_dirty or ctx._metadata_patch or ctx._result_json is not None
            ):
                simple.append(item)
            else:
                single.append(item)
        async with self.pool.acquire() as db:
            done: set[int] = set()
            if simple:
                params = {
                    "ids": int_array([c.id for c, _ in simple]),
                    "leases": int_array([c.run_lease for c, _ in simple]),
                }
                row = await db.fetch_one(QUERIES["complete_jobs"], params)
                done = set(row["ids"] or ()) if row is not None else set()
            results = [(c, o, c.id in done) for c, o in simple]
            for ctx, outcome in single:
                applied = await finalize_one(db, ctx, outcome)
                if applied:  # no transaction around it: written is committed
                    ctx.mark_flushed()
                results.append((ctx, outcome, applied))
            unsure = [(c, o) for c, o, applied in results if not applied and c._write_uncertain]
            confirmed = await confirm_written(db, unsure) if unsure else set()
        if confirmed:
            results = [(c, o, applied or c.id in confirmed) for c, o, applied in results]
        self.on_finished(results)

    def resolve(self, ctx: JobContext, intended: Outcome, failure: Outcome) -> None:
        """The commit of ``intended`` is unknown (the connection died at commit): read the row back.

        Written: reported as applied. Still running under our lease (the
        transaction rolled back): ``failure`` is written instead. Anything
        else: superseded.
        """
        if self.closed:
            self._late(ctx, intended)
            return
        self.idle.clear()
        task = asyncio.create_task(self._resolve(ctx, intended, failure))
        self.resolving.add(task)
        task.add_done_callback(self._resolved)

    def _resolved(self, task: asyncio.Task[None]) -> None:
        self.resolving.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("resolving an outcome failed", exc_info=task.exception())
        self.wake.set()

    async def _resolve(self, ctx: JobContext, intended: Outcome, failure: Outcome) -> None:
        delay = 0.1
        while True:
            try:
                async with self.pool.acquire() as db:
                    rows = await read_attempts(db, [ctx.id])
                break
            except Exception as exc:
                if not is_transient(exc):
                    raise
                await asyncio.sleep(delay)
                delay = min(delay * 2, 2.0)
        state, lease = rows.get(ctx.id, (None, None))
        if lease == ctx.run_lease and state == intended.state:
            log.warning(
                "job %s: the connection was lost while committing its %s outcome; read back: %s",
                ctx.id,
                intended.label,
                intended.label,
            )
            ctx.mark_flushed()
            self.on_finished([(ctx, intended, True)])
        elif lease == ctx.run_lease and state == "running":
            log.warning("job %s: the connection was lost before its outcome committed; read back: not written", ctx.id)
            self.submit(ctx, failure)
        else:
            self.on_finished([(ctx, intended, False)])

    async def drain(self) -> None:
        """Wait until everything submitted so far has been written."""
        self.wake.set()
        await self.idle.wait()


async def read_attempts(db: Asyncpg, ids: list[int]) -> dict[int, tuple[str, int]]:
    """id -> (state, run_lease) as the database has them now."""
    rows = await db.fetch(QUERIES["read_attempts"], {"ids": ids})
    return {row["id"]: (row["state"], row["run_lease"]) for row in rows}


async def confirm_written(db: Asyncpg, items: list[tuple[JobContext, Outcome]]) -> set[int]:
    """Of outcomes retried after a lost connection, the ids whose first write had committed."""
    found = await read_attempts(db, [c.id for c, _ in items])
    confirmed = set()
    for ctx, outcome in items:
        if found.get(ctx.id) == (outcome.state, ctx.run_lease):
            log.warning(
                "job %s: the connection was lost while writing its %s outcome; read back: %s",
                ctx.id,
                outcome.label,
                outcome.label,
            )
            ctx.mark_flushed()
            confirmed.add(ctx.id)
    return confirmed


async def finalize_one(conn: Any, ctx: JobContext, outcome: Outcome) -> bool:
    """One guarded write for one outcome on an asyncpg connection or its adapter (maybe inside a
    transaction). The caller marks the attempt's progress and metadata written once it is committed:
    a commit lost unwritten retries the job with them."""
    if outcome.state == "completed":
        query, params = completion(ctx)
    else:
        query, params = QUERIES["finish_attempt"], finish_params(ctx, outcome)
    row = await as_asyncpg(conn).fetch_one(query, params)
    return row is not None
