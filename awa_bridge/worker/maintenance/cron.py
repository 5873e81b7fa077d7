"""Fire due periodic jobs (leader tick).

For each schedule that is not paused, the fire times after its
``last_enqueued_at`` (or, never fired, after its ``created_at``) up to now are
computed with croniter in the schedule's timezone. ``coalesce`` enqueues only
the latest of them, ``catch_up`` each in order (at most ``CATCH_UP_LIMIT`` per
tick; the rest follow on the next ticks).

Exactly once per fire time: the schedule row is locked with ``FOR UPDATE SKIP
LOCKED``, the jobs are inserted through the ``insert_job`` query and
``last_enqueued_at`` is advanced (guarded by its previous value) in ONE
transaction. Two leaders racing see the row either locked (and skip it) or
already advanced (nothing due); a leader that dies mid-tick commits nothing
and the next leader fires the same occurrences.

``now`` is injectable for tests; by default the database's clock decides, so
workers with skewed clocks agree.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

from ... import enqueue
from ...cron import CATCH_UP_LIMIT, due_fire_times, next_fire_time, prepare_from_row
from ...drivers.asyncpg import as_asyncpg
from ...errors import AwaError
from ...sql import QUERIES

if TYPE_CHECKING:
    from ...drivers.asyncpg import Asyncpg

log = logging.getLogger("awa_bridge.worker")


@dataclass
class CronTick:
    """What one call of ``fire_due_schedules`` did."""

    enqueued: dict[str, list[datetime]] = field(default_factory=dict)  # schedule -> fire times
    skipped_locked: int = 0  # schedules another transaction was firing
    lost_race: int = 0  # schedules advanced by someone else between our read and our update
    errors: int = 0

    @property
    def count(self) -> int:
        return sum(len(fires) for fires in self.enqueued.values())


class _LostRace(Exception):
    pass


# (name, cron_expr, timezone) already reported as impossible to evaluate
_reported: set[tuple[str, str, str]] = set()


async def fire_due_schedules(
    conn: Any,
    *,
    now: datetime | None = None,
    catch_up_limit: int = CATCH_UP_LIMIT,
) -> CronTick:
    """Enqueue every due occurrence once, on an asyncpg connection; see the module doc."""
    db = as_asyncpg(conn)
    tick = CronTick()
    candidates = await db.fetch(QUERIES["cron_fire_candidates"])
    for row in candidates:
        at = now or row["db_now"]
        base = row["last_enqueued_at"] or row["created_at"]
        try:
            first = next_fire_time(row["cron_expr"], row["timezone"], base)
        except (AwaError, ValueError, KeyError) as exc:
            key = (row["name"], row["cron_expr"], row["timezone"])
            if key not in _reported:
                _reported.add(key)
                log.error("cron schedule %s cannot be evaluated (%s); skipping it", row["name"], exc)
            tick.errors += 1
            continue
        if first > at:
            continue
        try:
            fired = await _fire(db, row["name"], at, catch_up_limit)
        except _LostRace:
            tick.lost_race += 1
            continue
        except Exception as exc:
            if db.is_closed():
                raise
            tick.errors += 1
            log.warning("cron schedule %s: firing failed (%s); will retry next tick", row["name"], exc)
            continue
        if fired is None:
            tick.skipped_locked += 1
        elif fired:
            tick.enqueued[row["name"]] = fired
    return tick


async def _fire(db: Asyncpg, name: str, now: datetime, limit: int) -> list[datetime] | None:
    """One schedule's due fires in one transaction; None when another transaction holds it."""
    async with db.transaction():
        row = await db.fetch_one(QUERIES["lock_cron_job_for_fire"], {"name": name})
        if row is None:
            return None  # locked by another firer, or paused / deleted meanwhile
        previous = row["last_enqueued_at"]
        fires = due_fire_times(
            row["cron_expr"], row["timezone"], row["missed_fire_policy"], previous or row["created_at"], now, limit
        )
        if not fires:
            return []
        job_ids = []
        for fire in fires:
            prepared = prepare_from_row(dict(row), {"cron_name": name, "cron_fire_time": fire.isoformat()})
            job = await enqueue.insert_job(db.conn, prepared)
            job_ids.append(job.id)
        params = {"name": name, "fire_at": fires[-1], "previous": previous}
        if await db.fetch_one(QUERIES["advance_cron_job"], params) is None:
            raise _LostRace(name)  # rolls the inserts back
    for fire, job_id in zip(fires, job_ids, strict=True):
        log.info("cron %s: enqueued job %s for %s", name, job_id, fire.isoformat())
    return fires
