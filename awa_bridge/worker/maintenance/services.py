"""The leader's maintenance services, one small class each.

A service's pass repeats its batch until a batch comes back short (or the
pass has used its time budget), so each keeps up with any rate the workers
reach: retention cleanup deletes as fast as jobs finish, not 1,000 rows per
interval. A pass cut off by the budget leaves a backlog; the service is then
due again at the next tick instead of after its interval, interleaved with
the others on the leader's connection.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from ...sql import QUERIES
from ..config import MAINTENANCE_BATCH, MAINTENANCE_BUDGET_SECONDS, WorkerConfig
from ..rollup import prune_rollups
from .cleanup import delete_finished, prune_claims, prune_history
from .cron import fire_due_schedules
from .promote import promote_due
from .rescue import NO_VIEW, rescue_callback_timeouts, rescue_expired_deadlines, rescue_stale_heartbeats

if TYPE_CHECKING:
    from ...drivers.asyncpg import Asyncpg

log = logging.getLogger("awa_bridge.worker")

Rescued = Callable[[list[Any]], None]
# The attempts this process holds, (job id, run_lease): HeldAttempts.snapshot.
Held = Callable[[], list[tuple[int, int]]]


class View:
    """Whether the leader may judge heartbeats stale: after one staleness window of running without a gap.

    The leader's own process stops beating when it stops running (SIGSTOP, a
    starved process, a paused host), and so may the workers paused with it. A
    worker beats every ``heartbeat_interval``, so its heartbeat, up to an interval
    old when the pause began, looks stale at the thaw once the pause outlasted
    ``staleness`` less that interval. The view lets a gap pass up to half an
    interval short of that (``max_gap``): a quarter for the beat's own time, a
    quarter for the part of a pause a sleep hides (the leader sleeps at most a
    quarter interval at a time, ``SLEEP_SHARE``). After a longer gap between two
    of the leader's own steps, wherever it fell (in a sleep, between two
    services, between two batches), the leader waits one window for the
    heartbeats to catch up. A step comes right before each batch is sent: a gap
    inside an earlier statement shows at the next step, before anything is
    judged on it; a gap between the step and the statement reaching the server
    is refused by the statement itself (``guard``), counted with the gap that
    step saw, so that two pauses around the check cannot add up past ``max_gap``.
    A train of shorter pauses with no time between them for workers to beat is
    not seen.
    """

    #: The longest sleep of the leader's loop, as a share of the heartbeat interval.
    SLEEP_SHARE = 0.25

    def __init__(self, staleness: float, heartbeat_interval: float) -> None:
        self.staleness = staleness
        self.heartbeat_interval = heartbeat_interval
        self.max_gap = staleness - 1.5 * heartbeat_interval  # > 0: WorkerConfig keeps staleness >= 3 intervals
        self.viewed_at: Any = None  # the server's clock before the last check (``check``)
        self.allowed = self.max_gap  # what is left of max_gap after the gap the last check's step saw
        self.restart()

    @property
    def longest_sleep(self) -> float:
        return self.SLEEP_SHARE * self.heartbeat_interval

    def restart(self) -> None:
        """Fresh one window from now: on taking leadership and on every new connection."""
        self.seen = time.monotonic()
        self.fresh_at = self.seen + self.staleness

    def step(self, away: float = 0.0) -> bool:
        """A step of the leader, ``away`` seconds (a sleep) expected since the last; True once fresh."""
        now = time.monotonic()
        gap = now - self.seen - away
        if gap > self.max_gap:
            self.fresh_at = now + self.staleness
            log.info(
                "maintenance: %.1f s between two steps of the leader (frozen, starved, paused, or a slow"
                " statement); stale heartbeats are judged again after %.1f s",
                gap,
                self.staleness,
            )
        self.seen = now
        self.allowed = self.max_gap - max(gap, 0.0)
        return now >= self.fresh_at

    async def check(self, db: Asyncpg) -> bool:
        """``step`` before a batch that judges heartbeats, the server's clock read first: the batch's
        ``guard`` then covers a gap anywhere after that reading, the step any gap before it."""
        row = await db.fetch_one(QUERIES["server_clock"])
        self.viewed_at = row["at"] if row is not None else None
        return self.step()

    def guard(self) -> dict[str, Any]:
        """Parameters of ``view_still_fresh``: the statement does nothing unless it starts within what
        the last check left of ``max_gap``, on the server's clock."""
        return {"viewed_at": self.viewed_at, "max_gap_seconds": self.allowed}


class Service:
    """One maintenance concern: a batch statement, its interval, and the loop that repeats it."""

    name = "service"
    batch = MAINTENANCE_BATCH
    # Rescuing stale heartbeats needs a continuous view of the database (see View); such a service's
    # batch passes ``guard`` (the view's, set before each batch) to its statement.
    needs_fresh_view = False
    guard: Mapping[str, Any] = NO_VIEW

    def __init__(self, interval: float, budget: float = MAINTENANCE_BUDGET_SECONDS) -> None:
        self.interval = interval
        self.budget = budget
        self.due = 0.0  # monotonic time of the next pass

    async def run_batch(self, db: Asyncpg) -> int:
        """One batch; returns how many rows it handled."""
        raise NotImplementedError

    async def run_pass(self, db: Asyncpg, view: View) -> int:
        """Batches until one comes back short or the budget is spent; schedules the next pass.

        A service that needs a fresh view stops, before any batch, while the view is not
        fresh, and is due again when it will be.
        """
        started = time.monotonic()
        total = 0
        while True:
            if self.needs_fresh_view:
                if not await view.check(db):
                    self.due = view.fresh_at
                    return total
                self.guard = view.guard()
            else:
                view.step()
            handled = await self.run_batch(db)
            total += handled
            backlog = handled >= self.batch
            if not backlog or time.monotonic() - started >= self.budget:
                break
        self.due = time.monotonic() + (0.0 if backlog else self.interval)
        return total


class Promote(Service):
    name = "promote"

    async def run_batch(self, db: Asyncpg) -> int:
        return await promote_due(db, self.batch)


class _Rescue(Service):
    """A rescue: the rows it moved are logged and reported (the ``rescued`` hook), then promoted."""

    def __init__(self, interval: float, on_rescued: Rescued) -> None:
        super().__init__(interval)
        self.on_rescued = on_rescued

    async def rescue(self, db: Asyncpg) -> list[Any]:
        raise NotImplementedError

    async def run_batch(self, db: Asyncpg) -> int:
        rows = await self.rescue(db)
        for row in rows:
            log.warning(
                "rescued job %s (%s on %s, attempt %s): %s; now %s",
                row["id"],
                row["kind"],
                row["queue"],
                row["attempt"],
                row["reason"],
                row["state"],
                extra={"awa_job_id": row["id"], "awa_kind": row["kind"], "awa_queue": row["queue"]},
            )
        if rows:
            self.on_rescued(rows)
            await promote_due(db, self.batch)
        return len(rows)


class RescueStaleHeartbeats(_Rescue):
    """Attempts of processes that stopped beating, never this process's own (``held``).

    The view guards the other processes' attempts after a gap of the leader's;
    its own are left out outright: its heartbeat thread, paused with it, may
    resume later than its maintenance thread, however long the view waited.
    """

    name = "rescue_stale_heartbeats"
    needs_fresh_view = True

    def __init__(self, interval: float, on_rescued: Rescued, staleness: float, held: Held) -> None:
        super().__init__(interval, on_rescued)
        self.staleness = staleness
        self.held = held

    async def rescue(self, db: Asyncpg) -> list[Any]:
        return await rescue_stale_heartbeats(db, self.staleness, self.batch, self.held(), self.guard)


class RescueDeadlines(_Rescue):
    name = "rescue_deadlines"

    async def rescue(self, db: Asyncpg) -> list[Any]:
        return await rescue_expired_deadlines(db, self.batch)


class RescueCallbackTimeouts(_Rescue):
    name = "rescue_callback_timeouts"

    async def rescue(self, db: Asyncpg) -> list[Any]:
        return await rescue_callback_timeouts(db, self.batch)


class Cleanup(Service):
    name = "cleanup"
    batch = 10 * MAINTENANCE_BATCH  # deletes touch no live job: larger batches, fewer round trips

    def __init__(self, interval: float, completed_retention: float, failed_retention: float) -> None:
        super().__init__(interval)
        self.completed_retention = completed_retention
        self.failed_retention = failed_retention
        self.deleted = 0  # by the batches of the current pass

    async def run_batch(self, db: Asyncpg) -> int:
        """Returns the jobs the batch picked, deleted or not (see ``delete_finished``)."""
        deleted, picked = await delete_finished(db, self.completed_retention, self.failed_retention, self.batch)
        self.deleted += deleted
        return picked

    async def run_pass(self, db: Asyncpg, view: View) -> int:
        """Returns how many jobs the pass deleted."""
        self.deleted = 0
        await super().run_pass(db, view)
        if self.deleted:
            log.info("deleted %d finished jobs past retention", self.deleted)
        return self.deleted


class PruneClaims(Service):
    """Claim records (``awa.job_claims``, one per claim statement) once no retained job needs them
    to name the worker of its latest attempt: they go as retention deletes the jobs they claimed."""

    name = "prune_claims"

    def __init__(self, interval: float, completed_retention: float) -> None:
        super().__init__(interval)
        self.completed_retention = completed_retention

    async def run_batch(self, db: Asyncpg) -> int:
        return await prune_claims(db, self.completed_retention, self.batch)


class PruneHistory(Service):
    """Job history past ``retention``: operator actions (``awa.job_actions``) and attempt records
    (``awa.job_attempts``), so neither grows forever."""

    name = "prune_history"
    batch = 10 * MAINTENANCE_BATCH

    def __init__(self, interval: float, retention: float) -> None:
        super().__init__(interval)
        self.retention = retention
        self.pruned = [0, 0]  # actions, attempts, in the current pass

    async def run_batch(self, conn: Any) -> int:
        actions, attempts = await prune_history(conn, self.retention, self.batch)
        self.pruned = [self.pruned[0] + actions, self.pruned[1] + attempts]
        return max(actions, attempts)  # a backlog in either table calls for another batch

    async def run_pass(self, conn: Any, view: View) -> int:
        self.pruned = [0, 0]
        handled = await super().run_pass(conn, view)
        if any(self.pruned):
            log.info("pruned %d operator actions and %d attempt records past the history retention", *self.pruned)
        return handled


class PruneInstances(Service):
    """Registry rows of workers that died without a clean shutdown."""

    name = "prune_instances"
    needs_fresh_view = True

    def __init__(self, interval: float, staleness: float) -> None:
        super().__init__(interval)
        self.staleness = staleness

    async def run_batch(self, db: Asyncpg) -> int:
        params = {"staleness_seconds": float(self.staleness), "limit": self.batch, **self.guard}
        row = await db.fetch_one(QUERIES["prune_runtime_instances"], params)
        return int(row["deleted"]) if row is not None else 0


class PruneRollups(Service):
    """Outcome counters (``awa.queue_rollups``) older than the longest chart window."""

    name = "prune_rollups"

    async def run_batch(self, db: Asyncpg) -> int:
        return await prune_rollups(db)


class Cron(Service):
    """Due periodic jobs; one pass per tick (``fire_due_schedules`` bounds its own catch-up)."""

    name = "cron"

    async def run_batch(self, db: Asyncpg) -> int:
        await fire_due_schedules(db)
        return 0


def build_services(config: WorkerConfig, on_rescued: Rescued, held: Held) -> list[Service]:
    """Every service with its interval, in the order a tick runs them."""
    cfg = config
    return [
        Promote(cfg.promote_interval),
        Cron(cfg.promote_interval),
        RescueDeadlines(cfg.rescue_interval, on_rescued),
        RescueCallbackTimeouts(cfg.rescue_interval, on_rescued),
        RescueStaleHeartbeats(cfg.rescue_interval, on_rescued, cfg.heartbeat_staleness, held),
        PruneInstances(cfg.rescue_interval, cfg.heartbeat_staleness),
        Cleanup(cfg.cleanup_interval, cfg.completed_retention, cfg.failed_retention),
        PruneClaims(cfg.cleanup_interval, cfg.completed_retention),
        PruneRollups(cfg.cleanup_interval),
        PruneHistory(cfg.cleanup_interval, cfg.history_retention),
    ]
