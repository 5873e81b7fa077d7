"""Periodic jobs: schedules declared in code, stored in ``awa.cron_jobs``.

Declare a schedule on a worker ``Client``::

    client.periodic("nightly_report", "30 2 * * *", Report(fmt="pdf"),
                    timezone="Europe/London", queue="reports")

or build a ``PeriodicJob`` yourself and store it with ``upsert_schedules`` /
``upsert_schedules_sync`` (for schedules kept in settings). Everything is
validated when the schedule is declared: the cron expression with croniter,
the timezone with ``zoneinfo`` and the job options with ``prepare_job`` (the
same path every insert takes); a bad value raises ``ValidationError`` naming
the field and nothing is written.

Settings and code are the source of truth for the schedules they declare:
a worker starting with a declaration set deletes the ones its owner declared
before and declares no longer (``prune_schedules``), so they stop firing.
Schedules created in the database (``awa_bridge.cron_edit``: the admin, ``cron
create``) are the operator's and are never touched by a worker.

The maintenance leader fires due schedules (``awa_bridge.worker.maintenance
.cron``). The operations here (``list_schedules``, ``pause_schedule``,
``resume_schedule``, ``trigger_schedule``, ``delete_schedule``) work from any
process; an unknown name raises ``ScheduleNotFound`` and changes nothing.

On a database migrated by the real Awa (awa-pg) there is no
``awa.cron_job_sources``: everything here still works on ``awa.cron_jobs``
(the table both share), without recording or reading where a schedule comes
from (``ScheduleInfo.source`` is ``None``), and ``prune_schedules`` prunes
nothing (it cannot tell a declared schedule from another).

Cron expressions have 5 fields (minute hour day-of-month month day-of-week),
or 6 with a leading seconds field (the convention of Awa's own scheduler, so a
row means the same to both), or are one of croniter's ``@hourly``-style
aliases. Fire times follow croniter in the schedule's IANA timezone, DST
transitions included (see docs/howto/cron.md).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, TypeVar

from .enqueue import DEFAULT_MAX_ATTEMPTS, DEFAULT_PRIORITY, DEFAULT_QUEUE, prepare_job
from .errors import AwaError, ValidationError, require
from .sql import QUERIES
from .types import Job
from .validation import check_name

MISSED_FIRE_POLICIES = ("coalesce", "catch_up")
#: ``catch_up`` enqueues at most this many missed fires per schedule per
#: leader tick; the rest follow on the next ticks, in order.
CATCH_UP_LIMIT = 100
#: Metadata keys every cron job carries (and a schedule's own metadata may not use).
RESERVED_METADATA = ("cron_name", "cron_fire_time", "triggered_manually")
#: What ``cron list`` says on a database migrated by awa-pg (no ``awa.cron_job_sources``).
SOURCES_UNKNOWN = (
    "note: this database was migrated by the real Awa (awa-pg): where each schedule comes from "
    "(settings / code or database) is not recorded, so there is no source column"
)
#: Who declared a schedule, unless told otherwise (``Client(schedule_owner=...)``).
DEFAULT_OWNER = "default"
# How many fire times ``latest_fire`` walks one by one before jumping close to now.
_SCAN_LIMIT = 1000
T = TypeVar("T")
_ALIASES = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")


class ScheduleNotFound(AwaError, LookupError):
    """No schedule of that name exists in ``awa.cron_jobs``."""

    def __init__(self, name: str) -> None:
        self.name = name
        super().__init__(f"no schedule named {name!r} in awa.cron_jobs")


# -- cron arithmetic --------------------------------------------------------


def _croniter() -> Any:
    return require("croniter", "cron", "periodic jobs need it")


def _zone(timezone: Any) -> Any:
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    if not isinstance(timezone, str) or not timezone:
        raise ValidationError("timezone", f"must be an IANA timezone name such as 'Europe/London', got {timezone!r}")
    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise ValidationError("timezone", f"{timezone!r} is not a known IANA timezone") from None


def _iterator(cron_expr: str, zone: Any, start: datetime) -> Any:
    """croniter over ``cron_expr`` from ``start`` (aware), in ``zone``."""
    croniter = _croniter()
    seconds_first = not cron_expr.startswith("@") and len(cron_expr.split()) == 6
    return croniter.croniter(cron_expr, start.astimezone(zone), ret_type=datetime, second_at_beginning=seconds_first)


def validate_cron_expr(cron_expr: Any, timezone: str = "UTC") -> str:
    """Return the normalised expression, or raise ``ValidationError('cron_expr', ...)``."""
    if not isinstance(cron_expr, str):
        raise ValidationError("cron_expr", f"must be a string, got {type(cron_expr).__name__}")
    expr = " ".join(cron_expr.split())
    if expr.startswith("@"):
        if expr.lower() not in _ALIASES:
            raise ValidationError("cron_expr", f"{cron_expr!r}: unknown alias; use one of {', '.join(_ALIASES)}")
        expr = expr.lower()
    elif len(expr.split()) not in (5, 6):
        raise ValidationError(
            "cron_expr",
            f"{cron_expr!r}: expected 5 fields (minute hour day month weekday) "
            f"or 6 with a leading seconds field, got {len(expr.split())}",
        )
    zone = _zone(timezone)
    croniter = _croniter()
    try:
        # Building the iterator parses the expression; one step proves it can fire at all.
        _iterator(expr, zone, datetime.now(UTC)).get_next()
    except croniter.CroniterBadDateError as exc:
        raise ValidationError("cron_expr", f"{cron_expr!r} never fires: {exc}") from None
    except (croniter.CroniterError, ValueError, KeyError, TypeError) as exc:
        raise ValidationError("cron_expr", f"{cron_expr!r}: {exc}") from None
    return expr


def _utc(value: datetime) -> datetime:
    return value.astimezone(UTC)


def _aware(value: datetime, name: str) -> datetime:
    if not isinstance(value, datetime):
        raise TypeError(f"{name} must be a datetime, got {type(value).__name__}")
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def fire_times(cron_expr: str, timezone: str, after: datetime) -> Iterator[datetime]:
    """Every fire time strictly after ``after``, in order, as UTC datetimes."""
    iterator = _iterator(cron_expr, _zone(timezone), _aware(after, "after"))
    while True:
        yield _utc(iterator.get_next())


def next_fire_time(cron_expr: str, timezone: str, after: datetime) -> datetime:
    """The first fire time strictly after ``after`` (UTC)."""
    return next(fire_times(cron_expr, timezone, after))


def latest_fire_time(cron_expr: str, timezone: str, after: datetime | None, until: datetime) -> datetime | None:
    """The latest fire time in ``(after, until]``, or None.

    Walks forward from ``after`` (so the answer is exactly the last element of
    ``fire_times`` up to ``until``); after a very long gap it restarts the walk
    two occurrences before ``until`` instead of stepping through all of them.
    """
    until = _aware(until, "until")
    start = _aware(after, "after") if after is not None else None
    latest: datetime | None = None
    if start is not None:
        for count, fire in enumerate(fire_times(cron_expr, timezone, start)):
            if fire > until:
                return latest
            latest = fire
            if count >= _SCAN_LIMIT:
                break
    zone = _zone(timezone)
    back = _iterator(cron_expr, zone, until)
    back.get_prev()
    restart = _utc(back.get_prev())
    if latest is not None and latest > restart:
        restart = latest
    elif start is not None and start > restart:
        restart = start
    for fire in fire_times(cron_expr, timezone, restart):
        if fire > until:
            break
        latest = fire
    return latest


def due_fire_times(
    cron_expr: str,
    timezone: str,
    policy: str,
    after: datetime,
    now: datetime,
    limit: int = CATCH_UP_LIMIT,
) -> list[datetime]:
    """Fire times to enqueue now for a schedule last accounted for at ``after``.

    ``catch_up``: every fire in ``(after, now]``, oldest first, at most
    ``limit``. ``coalesce``: only the latest fire in ``(after, now]``.
    """
    now = _aware(now, "now")
    if policy == "catch_up":
        due: list[datetime] = []
        for fire in fire_times(cron_expr, timezone, after):
            if fire > now or len(due) >= limit:
                break
            due.append(fire)
        return due
    if policy != "coalesce":
        raise ValidationError("missed_fire_policy", f"must be one of {MISSED_FIRE_POLICIES}, got {policy!r}")
    latest = latest_fire_time(cron_expr, timezone, after, now)
    return [latest] if latest is not None else []


# -- declaring --------------------------------------------------------------


@dataclass(frozen=True)
class PeriodicJob:
    """One schedule, validated on construction.

    ``args`` is a dataclass or pydantic instance (the kind is derived from its
    class) or a dict (then ``kind`` is required), exactly as for
    ``insert_job``. ``metadata`` is copied into every job the schedule
    enqueues, together with ``cron_name`` and ``cron_fire_time``.
    """

    name: str
    cron_expr: str
    args: Any = field(default_factory=dict)
    kind: str | None = None
    timezone: str = "UTC"
    queue: str = DEFAULT_QUEUE
    priority: int = DEFAULT_PRIORITY
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    tags: Sequence[str] = ()
    metadata: Mapping[str, Any] | None = None
    missed_fire_policy: str = "coalesce"
    _prepared: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_name("name", self.name)
        if self.missed_fire_policy not in MISSED_FIRE_POLICIES:
            raise ValidationError(
                "missed_fire_policy",
                f"must be 'coalesce' or 'catch_up', got {self.missed_fire_policy!r}",
            )
        object.__setattr__(self, "cron_expr", validate_cron_expr(self.cron_expr, self.timezone))
        if self.metadata is not None and isinstance(self.metadata, Mapping):
            clash = sorted(set(self.metadata) & set(RESERVED_METADATA))
            if clash:
                raise ValidationError(f"metadata.{clash[0]}", "is set by the scheduler on every cron job")
        prepared = prepare_job(
            self.args,
            kind=self.kind,
            queue=self.queue,
            priority=self.priority,
            max_attempts=self.max_attempts,
            metadata=self.metadata,
            tags=self.tags,
        )
        object.__setattr__(self, "_prepared", prepared)
        object.__setattr__(self, "kind", prepared.kind)
        object.__setattr__(self, "tags", prepared.tags)

    def params(self, now: datetime | None = None) -> dict[str, Any]:
        """Parameters of the ``upsert_cron_job`` query."""
        prepared = self._prepared
        return {
            "name": self.name,
            "cron_expr": self.cron_expr,
            "timezone": self.timezone,
            "kind": prepared.kind,
            "queue": prepared.queue,
            "args": prepared.args_json,
            "priority": prepared.priority,
            "max_attempts": prepared.max_attempts,
            "tags": list(prepared.tags),
            "metadata": prepared.metadata_json,
            "missed_fire_policy": self.missed_fire_policy,
            "now": now,
        }

    def next_fire_time(self, after: datetime | None = None) -> datetime:
        return next_fire_time(self.cron_expr, self.timezone, after or datetime.now(UTC))


def sourced_query(driver: Any, name: str) -> Any:
    """``QUERIES[name]``, or its ``_plain`` form (no ``awa.cron_job_sources``) on an awa-pg database."""
    return QUERIES[f"{name}_plain" if driver.fetch_all(QUERIES["awa_pg_schema"])[0]["present"] else name]


async def sourced_query_async(driver: Any, name: str) -> Any:
    """``sourced_query`` on an async driver."""
    rows = await driver.fetch_all(QUERIES["awa_pg_schema"])
    return QUERIES[f"{name}_plain" if rows[0]["present"] else name]


def _unique_by_name(schedules: Iterable[PeriodicJob]) -> list[PeriodicJob]:
    result: dict[str, PeriodicJob] = {}
    for schedule in schedules:
        if not isinstance(schedule, PeriodicJob):
            raise TypeError(f"expected PeriodicJob, got {type(schedule).__name__}")
        if schedule.name in result:
            raise ValidationError("name", f"schedule {schedule.name!r} is declared twice")
        result[schedule.name] = schedule
    return list(result.values())


async def upsert_schedules(
    conn: Any, schedules: Iterable[PeriodicJob], *, now: datetime | None = None, owner: str = DEFAULT_OWNER
) -> list[str]:
    """Store ``schedules`` in ``awa.cron_jobs`` on an async connection (caller's transaction).

    A new schedule is inserted (``created_at`` = ``now``, default the
    database's clock: firing starts with the first occurrence after it). An
    existing one gets its definition columns replaced and ``updated_at``
    bumped only when something changed; ``last_enqueued_at``, ``paused_at``
    and ``created_at`` are never touched. Each is marked *declared* by
    ``owner`` (``awa.cron_job_sources``; not on an awa-pg database, which has
    no such table). Schedules not passed are left alone
    (``prune_schedules`` removes them). Returns the names inserted or changed.
    """
    from .drivers import detect_async

    _check_owner(owner)
    driver = detect_async(conn)
    query = await sourced_query_async(driver, "upsert_cron_job")
    changed: list[str] = []
    for schedule in _unique_by_name(schedules):
        rows = await driver.fetch_all(query, {**schedule.params(now), "owner": owner})
        changed += [row["name"] for row in rows]
    return changed


def upsert_schedules_sync(
    conn: Any, schedules: Iterable[PeriodicJob], *, now: datetime | None = None, owner: str = DEFAULT_OWNER
) -> list[str]:
    """Blocking form of ``upsert_schedules`` (psycopg, SQLAlchemy or Django connection)."""
    from .drivers import detect_sync

    _check_owner(owner)
    driver = detect_sync(conn)
    query = sourced_query(driver, "upsert_cron_job")
    changed: list[str] = []
    for schedule in _unique_by_name(schedules):
        rows = driver.fetch_all(query, {**schedule.params(now), "owner": owner})
        changed += [row["name"] for row in rows]
    return changed


async def prune_schedules(conn: Any, declared: Iterable[str], *, owner: str = DEFAULT_OWNER) -> list[str]:
    """Delete the schedules ``owner`` declared before and no longer declares; returns their names.

    This is what makes settings and code the source of truth: a worker calls
    it at start with its declaration set, so a schedule removed from
    ``AWA["PERIODIC"]`` or from ``client.periodic(...)`` stops firing at the
    next worker start. Schedules created in the database (admin, ``cron
    create``) and other owners' are never touched.
    """
    from .drivers import detect_async

    _check_owner(owner)
    driver = detect_async(conn)
    if (await driver.fetch_all(QUERIES["awa_pg_schema"]))[0]["present"]:
        return []  # no record of what was declared
    rows = await driver.fetch_all(QUERIES["prune_declared_cron_jobs"], {"owner": owner, "names": sorted(set(declared))})
    return [row["name"] for row in rows]


def prune_schedules_sync(conn: Any, declared: Iterable[str], *, owner: str = DEFAULT_OWNER) -> list[str]:
    """Blocking form of ``prune_schedules``."""
    from .drivers import detect_sync

    _check_owner(owner)
    driver = detect_sync(conn)
    if driver.fetch_all(QUERIES["awa_pg_schema"])[0]["present"]:
        return []  # no record of what was declared
    rows = driver.fetch_all(QUERIES["prune_declared_cron_jobs"], {"owner": owner, "names": sorted(set(declared))})
    return [row["name"] for row in rows]


def _check_owner(owner: Any) -> None:
    check_name("owner", owner)


# -- operations -------------------------------------------------------------


@dataclass(frozen=True)
class ScheduleInfo:
    """A row of ``awa.cron_jobs``, where it comes from, and its next fire time (None while paused)."""

    name: str
    cron_expr: str
    timezone: str
    kind: str
    queue: str
    args: Any
    priority: int
    max_attempts: int
    tags: list[str]
    metadata: dict[str, Any]
    missed_fire_policy: str
    last_enqueued_at: datetime | None
    created_at: datetime
    updated_at: datetime
    paused_at: datetime | None
    paused_by: str | None
    source: str | None  # "declared" (settings / code), "database" (an operator's), None: not recorded (awa-pg)
    owner: str | None  # the declaring owner of a declared schedule
    next_fire_at: datetime | None

    @property
    def paused(self) -> bool:
        return self.paused_at is not None


def _run(conn_or_url: Any, work: Callable[[Any, Any], T]) -> T:
    """``work(driver, conn)`` on the caller's sync connection (in its transaction), or on a new one, committed."""
    from .drivers import detect_sync

    if isinstance(conn_or_url, str):
        from .drivers.connect import connect_sync

        with connect_sync(conn_or_url, autocommit=False) as db:
            result = work(db, db.conn)
            db.commit()
            return result
    return work(detect_sync(conn_or_url), conn_or_url)


def _decode(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _info(row: Mapping[str, Any], now: datetime) -> ScheduleInfo:
    values = {k: row[k] for k in ScheduleInfo.__dataclass_fields__ if k != "next_fire_at"}
    values["args"] = _decode(values["args"])
    values["metadata"] = _decode(values["metadata"])
    values["tags"] = list(values["tags"] or [])
    next_at = None
    if row["paused_at"] is None:
        base = row["last_enqueued_at"] or row["created_at"]
        try:
            next_at = next_fire_time(row["cron_expr"], row["timezone"], max(base, now))
        except (ValidationError, ValueError, KeyError):
            next_at = None  # a row this package cannot evaluate (written by someone else)
    return ScheduleInfo(**values, next_fire_at=next_at)


def list_schedules(conn_or_url: Any, *, now: datetime | None = None) -> list[ScheduleInfo]:
    """Every schedule, by name, with its next fire time after ``now`` (default: the database clock)."""

    def work(driver: Any, _conn: Any) -> list[ScheduleInfo]:
        rows = driver.fetch_all(sourced_query(driver, "list_cron_jobs"), {})
        at = _aware(now, "now") if now is not None else None
        return [_info(row, at or row["db_now"]) for row in rows]

    return _run(conn_or_url, work)


def get_schedule(conn_or_url: Any, name: str, *, now: datetime | None = None) -> ScheduleInfo:
    """One schedule, or ``ScheduleNotFound``."""

    def work(driver: Any, _conn: Any) -> ScheduleInfo:
        rows = driver.fetch_all(sourced_query(driver, "get_cron_job"), {"name": name})
        if not rows:
            raise ScheduleNotFound(name)
        return _info(rows[0], _aware(now, "now") if now is not None else rows[0]["db_now"])

    return _run(conn_or_url, work)


def pause_schedule(conn_or_url: Any, name: str, paused_by: str | None = None) -> None:
    """Stop firing ``name``. ``last_enqueued_at`` is kept; pausing twice keeps the first pause's time and author."""
    rows = _run(
        conn_or_url, lambda d, _: d.fetch_all(QUERIES["pause_cron_job"], {"name": name, "paused_by": paused_by})
    )
    if not rows:
        raise ScheduleNotFound(name)


def resume_schedule(conn_or_url: Any, name: str, *, skip_missed: bool = False, now: datetime | None = None) -> None:
    """Fire ``name`` again, continuing from its ``last_enqueued_at``.

    Fires that fell due while it was paused are then handled like fires missed
    during downtime: ``coalesce`` enqueues the latest one, ``catch_up`` each.
    With ``skip_missed=True`` they are skipped instead: ``last_enqueued_at``
    moves to the latest fire time up to ``now`` and firing resumes after it.
    """

    def work(driver: Any, _conn: Any) -> None:
        rows = driver.fetch_all(QUERIES["lock_cron_job_for_resume"], {"name": name})
        if not rows:
            raise ScheduleNotFound(name)
        row = rows[0]
        skip_to = None
        if skip_missed:
            at = _aware(now, "now") if now is not None else row["db_now"]
            skip_to = latest_fire_time(row["cron_expr"], row["timezone"], None, at)
        driver.fetch_all(QUERIES["resume_cron_job"], {"name": name, "skip_to": skip_to})

    _run(conn_or_url, work)


def trigger_schedule(conn_or_url: Any, name: str) -> Job:
    """Enqueue one job from ``name`` now, whatever its schedule and even while paused.

    The job carries ``cron_name`` and ``triggered_manually: true`` in its
    metadata. ``last_enqueued_at`` is not advanced: the regular fires go on as
    if the trigger had not happened.
    """
    from .enqueue import insert_job_sync

    def work(driver: Any, conn: Any) -> Job:
        rows = driver.fetch_all(sourced_query(driver, "get_cron_job"), {"name": name})
        if not rows:
            raise ScheduleNotFound(name)
        prepared = prepare_from_row(rows[0], {"cron_name": name, "triggered_manually": True})
        return insert_job_sync(conn, prepared)

    return _run(conn_or_url, work)


def delete_schedule(conn_or_url: Any, name: str) -> None:
    """Remove ``name`` from ``awa.cron_jobs``, whatever its source (a worker that still declares it adds it back).

    Operators delete database-only schedules with ``cron_edit.delete_schedule``,
    which refuses declared ones.
    """
    rows = _run(conn_or_url, lambda d, _: d.fetch_all(QUERIES["delete_cron_job"], {"name": name}))
    if not rows:
        raise ScheduleNotFound(name)


def prepare_from_row(row: Mapping[str, Any], extra_metadata: Mapping[str, Any]) -> Any:
    """The ``PreparedJob`` a schedule row enqueues, through ``prepare_job``."""
    metadata = {**(_decode(row["metadata"]) or {}), **extra_metadata}
    return prepare_job(
        _decode(row["args"]),
        kind=row["kind"],
        queue=row["queue"],
        priority=row["priority"],
        max_attempts=row["max_attempts"],
        tags=list(row["tags"] or []),
        metadata=metadata,
    )
