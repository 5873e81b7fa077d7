"""Periodic jobs: declaration, upsert, firing with a controllable clock, DST, pause/resume/trigger,
exactly-once under races and leader failover (R29). Real PostgreSQL only."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import asyncpg
import psycopg
import pytest
from psycopg.rows import dict_row

import awa_bridge
from awa_bridge import cron
from awa_bridge.cli import main as cli_main
from awa_bridge.cron import PeriodicJob, ScheduleNotFound
from awa_bridge.errors import ValidationError
from awa_bridge.sql import QUERIES
from awa_bridge.worker import Client
from awa_bridge.worker.maintenance.cron import fire_due_schedules

from .waiting import FAST, MULTIPLIER, wait_until

REPO_ROOT = Path(__file__).resolve().parent.parent
T0 = datetime(2024, 6, 3, 12, 0, 30, tzinfo=UTC)  # a Monday, 30 s past a minute
NEW_YORK = ZoneInfo("America/New_York")
LONDON = ZoneInfo("Europe/London")


@dataclass
class Report:
    fmt: str


def declare(url: str, *schedules: PeriodicJob, now: datetime = T0) -> list[str]:
    with psycopg.connect(url) as c:
        changed = cron.upsert_schedules_sync(c, schedules, now=now)
        c.commit()
    return changed


def rows(url: str, sql: str, params: tuple = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as c:
        cur = c.execute(sql, params)
        return cur.fetchall() if cur.description else []


def schedule_row(url: str, name: str) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as c:
        cur = c.execute("SELECT * FROM awa.cron_jobs WHERE name = %s", (name,))
        names = [col.name for col in cur.description]
        row = cur.fetchone()
    assert row is not None, name
    return dict(zip(names, row, strict=True))


def fired(url: str, name: str) -> list[datetime]:
    """Fire times of the jobs a schedule enqueued, in insertion order."""
    found = rows(
        url,
        "SELECT metadata->>'cron_fire_time' FROM awa.jobs WHERE metadata->>'cron_name' = %s "
        "AND metadata->>'cron_fire_time' IS NOT NULL ORDER BY id",
        (name,),
    )
    return [datetime.fromisoformat(r[0]) for r in found]


def job_of(url: str, name: str) -> awa_bridge.Job:
    """The one job a schedule enqueued."""
    with psycopg.connect(url, autocommit=True) as c:
        (job_id,) = c.execute("SELECT id FROM awa.jobs WHERE metadata->>'cron_name' = %s", (name,)).fetchone()
        found = c.cursor(row_factory=dict_row).execute(QUERIES["get_job"].pyformat, {"id": job_id})
        return awa_bridge.row_to_job(found.fetchone())


def counts(url: str) -> tuple[int, int]:
    return (
        rows(url, "SELECT count(*) FROM awa.jobs")[0][0],
        rows(url, "SELECT count(*) FROM awa.cron_jobs")[0][0],
    )


def at(hour: int, minute: int, second: int = 0) -> datetime:
    return T0.replace(hour=hour, minute=minute, second=second)


# -- declaration ---------------------------------------------------------------------------------


def test_bad_declarations_name_the_field_and_write_nothing(db_url: str) -> None:
    good = {"name": "n", "cron_expr": "*/5 * * * *", "args": {"a": 1}, "kind": "k"}
    cases = [
        ({"cron_expr": "61 * * * *"}, "cron_expr", "out of range"),  # croniter's own message
        ({"cron_expr": "every day"}, "cron_expr", "expected 5 fields"),
        ({"cron_expr": "0 0 31 2 *"}, "cron_expr", "never fires"),
        ({"cron_expr": "@reboot"}, "cron_expr", "unknown alias"),
        ({"cron_expr": 5}, "cron_expr", "must be a string"),
        ({"timezone": "Mars/Olympus_Mons"}, "timezone", "not a known IANA timezone"),
        ({"timezone": "../etc/passwd"}, "timezone", "not a known IANA timezone"),
        ({"missed_fire_policy": "all"}, "missed_fire_policy", "'coalesce' or 'catch_up'"),
        ({"name": ""}, "name", "non-empty"),
        ({"priority": 7}, "priority", "between 1 and 4"),  # job options go through prepare_job
        ({"max_attempts": 0}, "max_attempts", "between 1 and 1000"),
        ({"queue": "q" * 201}, "queue", "limit is 200"),
        ({"tags": ["t"] * 21}, "tags", "limit is 20"),
        ({"kind": None}, "kind", "explicit kind"),
        ({"args": {"s": "nul\x00"}}, "args.s", "NUL"),
        ({"metadata": {"cron_name": "x"}}, "metadata.cron_name", "set by the scheduler"),
    ]
    for change, field, text in cases:
        with pytest.raises(ValidationError) as info:
            PeriodicJob(**{**good, **change})
        assert info.value.field == field, (change, info.value)
        assert text in str(info.value), (change, info.value)

    client = Client(db_url)
    with pytest.raises(ValidationError, match="timezone"):
        client.periodic("tz", "0 9 * * *", {}, kind="k", timezone="Nowhere/Special")
    client.periodic("ok", "0 9 * * *", Report("pdf"))
    with pytest.raises(ValidationError, match="already declared"):
        client.periodic("ok", "0 10 * * *", Report("pdf"))
    assert list(client.schedules) == ["ok"]
    # Declaring the same name twice in one upsert is refused before anything is written.
    twice = [PeriodicJob("dup", "* * * * *", {}, kind="k"), PeriodicJob("dup", "0 * * * *", {}, kind="k")]
    with pytest.raises(ValidationError, match="declared twice"):
        declare(db_url, *twice)
    assert counts(db_url) == (0, 0)


def test_schedule_values_are_normalised() -> None:
    schedule = PeriodicJob("r", "  0   9 * *  MON-FRI ", Report("pdf"), timezone="Europe/London", tags=["a"])
    assert schedule.cron_expr == "0 9 * * MON-FRI"
    assert schedule.kind == "report"  # derived from the dataclass, as for insert_job
    assert schedule.tags == ("a",)
    assert PeriodicJob("h", "@Hourly", {}, kind="k").cron_expr == "@hourly"
    # Six fields: the first is seconds (Awa's convention).
    every_ten = PeriodicJob("s", "*/10 * * * * *", {}, kind="k")
    assert every_ten.next_fire_time(T0) == T0 + timedelta(seconds=10)
    # A 02:30 schedule in New York on a winter day is 07:30 UTC.
    nightly = PeriodicJob("n", "30 2 * * *", {}, kind="k", timezone="America/New_York")
    assert nightly.next_fire_time(datetime(2024, 1, 10, tzinfo=UTC)) == datetime(2024, 1, 10, 7, 30, tzinfo=UTC)


async def test_worker_start_upserts_schedules_and_keeps_fire_state(make_client, db_url: str) -> None:
    client = make_client()
    client.periodic(
        "report",
        "0 9 * * MON-FRI",
        Report("pdf"),
        timezone="Europe/London",
        queue="reports",
        priority=1,
        max_attempts=3,
        tags=["nightly"],
        metadata={"team": "ops"},
        missed_fire_policy="catch_up",
    )
    client.periodic("cleanup", "*/5 * * * *", {"older_than_days": 7}, kind="cleanup")
    assert counts(db_url) == (0, 0)  # declaring writes nothing; starting the worker does
    await client.start(["reports"])
    row = schedule_row(db_url, "report")
    assert (row["cron_expr"], row["timezone"], row["kind"], row["queue"]) == (
        "0 9 * * MON-FRI",
        "Europe/London",
        "report",
        "reports",
    )
    assert (row["args"], row["priority"], row["max_attempts"], row["tags"], row["metadata"]) == (
        {"fmt": "pdf"},
        1,
        3,
        ["nightly"],
        {"team": "ops"},
    )
    assert row["missed_fire_policy"] == "catch_up" and row["last_enqueued_at"] is None
    assert schedule_row(db_url, "cleanup")["args"] == {"older_than_days": 7}

    # Fire state that a redeploy must not touch.
    fired_at = datetime(2024, 1, 1, 9, tzinfo=UTC)
    rows(
        db_url,
        "UPDATE awa.cron_jobs SET last_enqueued_at = %s, paused_at = %s, paused_by = 'ops' WHERE name = 'report'",
        (fired_at, fired_at),
    )
    before = schedule_row(db_url, "report")
    # Same definition again: nothing changes, not even updated_at.
    assert declare(db_url, client.schedules["report"], now=T0) == []
    assert schedule_row(db_url, "report") == before
    # A changed definition replaces the definition columns and bumps updated_at only.
    changed = PeriodicJob("report", "0 10 * * *", Report("csv"), timezone="UTC", queue="reports2", priority=3)
    assert declare(db_url, changed, now=T0) == ["report"]
    after = schedule_row(db_url, "report")
    assert (after["cron_expr"], after["timezone"], after["args"], after["queue"], after["priority"]) == (
        "0 10 * * *",
        "UTC",
        {"fmt": "csv"},
        "reports2",
        3,
    )
    assert after["missed_fire_policy"] == "coalesce" and after["tags"] == [] and after["metadata"] == {}
    assert after["updated_at"] == T0 and after["created_at"] == before["created_at"]
    assert (after["last_enqueued_at"], after["paused_at"], after["paused_by"]) == (fired_at, fired_at, "ops")
    # Schedules not declared are left alone (additive upsert).
    assert schedule_row(db_url, "cleanup")["cron_expr"] == "*/5 * * * *"


# -- firing with a controllable clock --------------------------------------------------------------


async def test_first_fire_is_after_declaration_and_jobs_carry_the_schedule(conn, db_url: str) -> None:
    declare(
        db_url,
        PeriodicJob(
            "every5",
            "*/5 * * * *",
            Report("pdf"),
            queue="reports",
            priority=1,
            max_attempts=3,
            tags=["cron"],
            metadata={"team": "ops"},
        ),
    )
    # Declared at 12:00:30: the 12:00 occurrence is before the declaration and never fires.
    assert (await fire_due_schedules(conn, now=at(12, 4, 59))).count == 0
    tick = await fire_due_schedules(conn, now=at(12, 5))
    assert tick.enqueued == {"every5": [at(12, 5)]}
    assert (await fire_due_schedules(conn, now=at(12, 7))).count == 0  # nothing new is due
    job = job_of(db_url, "every5")
    assert (job.kind, job.args, job.queue, job.priority, job.max_attempts, job.tags, job.state.value) == (
        "report",
        {"fmt": "pdf"},
        "reports",
        1,
        3,
        ["cron"],
        "available",
    )
    assert job.metadata == {"team": "ops", "cron_name": "every5", "cron_fire_time": "2024-06-03T12:05:00+00:00"}
    assert schedule_row(db_url, "every5")["last_enqueued_at"] == at(12, 5)


async def test_coalesce_enqueues_only_the_latest_missed_fire(conn, db_url: str) -> None:
    declare(db_url, PeriodicJob("minutely", "* * * * *", {}, kind="tick"))
    await fire_due_schedules(conn, now=at(12, 1, 5))
    # Down for 90 minutes: one job, for the latest occurrence, not 90.
    tick = await fire_due_schedules(conn, now=at(13, 31, 20))
    assert tick.enqueued == {"minutely": [at(13, 31)]}
    await fire_due_schedules(conn, now=at(13, 32))
    assert fired(db_url, "minutely") == [at(12, 1), at(13, 31), at(13, 32)]
    # A very long outage (every second for 3 days) still coalesces to the one latest fire.
    declare(db_url, PeriodicJob("per_second", "* * * * * *", {}, kind="tick"))
    tick = await fire_due_schedules(conn, now=T0 + timedelta(days=3, microseconds=500))
    assert tick.enqueued["per_second"] == [T0 + timedelta(days=3)]


async def test_catch_up_enqueues_each_missed_fire_in_order_capped_per_tick(conn, db_url: str) -> None:
    declare(db_url, PeriodicJob("minutely", "* * * * *", {}, kind="tick", missed_fire_policy="catch_up"))
    await fire_due_schedules(conn, now=at(12, 1))
    # Down for 150 minutes: every occurrence, oldest first, 100 per tick.
    first = await fire_due_schedules(conn, now=at(14, 31, 10))
    assert len(first.enqueued["minutely"]) == 100
    second = await fire_due_schedules(conn, now=at(14, 31, 10))
    assert len(second.enqueued["minutely"]) == 50
    assert (await fire_due_schedules(conn, now=at(14, 31, 10))).count == 0
    expected = [at(12, 1) + timedelta(minutes=i) for i in range(151)]
    assert fired(db_url, "minutely") == expected  # in order, once each
    assert schedule_row(db_url, "minutely")["last_enqueued_at"] == at(14, 31)


def _run_clock(conn: asyncpg.Connection, start: datetime, end: datetime, step: timedelta) -> Any:
    async def run() -> None:
        now = start
        while now <= end:
            await fire_due_schedules(conn, now=now)
            now += step

    return run()


async def test_dst_spring_forward_follows_croniter(conn, db_url: str) -> None:
    """New York skips 02:00-03:00 on 2024-03-10 (07:00 UTC); London skips 01:00-02:00 on 2024-03-31."""
    start = datetime(2024, 3, 9, 12, tzinfo=UTC)
    declare(
        db_url,
        PeriodicJob("ny_0230", "30 2 * * *", {}, kind="k", timezone="America/New_York", missed_fire_policy="catch_up"),
        PeriodicJob("ny_hourly", "0 * * * *", {}, kind="k", timezone="America/New_York", missed_fire_policy="catch_up"),
        now=start,
    )
    await _run_clock(conn, start, datetime(2024, 3, 11, 12, tzinfo=UTC), timedelta(minutes=15))
    # 02:30 does not exist on the 10th: croniter fires at the end of the gap, 03:00 EDT (07:00 UTC).
    assert fired(db_url, "ny_0230") == [datetime(2024, 3, 10, 7, tzinfo=UTC), datetime(2024, 3, 11, 6, 30, tzinfo=UTC)]
    assert [t.astimezone(NEW_YORK).strftime("%H:%M %Z") for t in fired(db_url, "ny_0230")] == [
        "03:00 EDT",
        "02:30 EDT",
    ]
    hourly = [t.astimezone(NEW_YORK) for t in fired(db_url, "ny_hourly")]
    on_the_day = [t.hour for t in hourly if t.date().isoformat() == "2024-03-10"]
    assert on_the_day == [0, 1, *range(3, 24)]  # 23 fires, no 02:00
    assert len(set(fired(db_url, "ny_hourly"))) == len(hourly)

    london_start = datetime(2024, 3, 30, 12, tzinfo=UTC)
    declare(
        db_url,
        PeriodicJob("ldn_0130", "30 1 * * *", {}, kind="k", timezone="Europe/London", missed_fire_policy="catch_up"),
        now=london_start,
    )
    await _run_clock(conn, london_start, datetime(2024, 4, 1, 12, tzinfo=UTC), timedelta(minutes=30))
    assert fired(db_url, "ldn_0130") == [
        datetime(2024, 3, 31, 1, tzinfo=UTC),  # 02:00 BST, the end of the gap
        datetime(2024, 4, 1, 0, 30, tzinfo=UTC),  # 01:30 BST
    ]


async def test_dst_fall_back_follows_croniter(conn, db_url: str) -> None:
    """New York repeats 01:00-02:00 on 2024-11-03 (EDT 05:00-06:00 UTC, then EST 06:00-07:00 UTC)."""
    start = datetime(2024, 11, 2, 12, tzinfo=UTC)
    zone = {"kind": "k", "timezone": "America/New_York", "missed_fire_policy": "catch_up"}
    declare(
        db_url,
        PeriodicJob("ny_0230", "30 2 * * *", {}, **zone),
        PeriodicJob("ny_0130", "30 1 * * *", {}, **zone),
        PeriodicJob("ny_hourly", "0 * * * *", {}, **zone),
        now=start,
    )
    await _run_clock(conn, start, datetime(2024, 11, 4, 12, tzinfo=UTC), timedelta(minutes=20))
    # 02:30 happens once.
    assert fired(db_url, "ny_0230") == [
        datetime(2024, 11, 3, 7, 30, tzinfo=UTC),
        datetime(2024, 11, 4, 7, 30, tzinfo=UTC),
    ]
    # 01:30 happens twice on the 3rd, and croniter fires both: 01:30 EDT and 01:30 EST.
    assert fired(db_url, "ny_0130") == [
        datetime(2024, 11, 3, 5, 30, tzinfo=UTC),
        datetime(2024, 11, 3, 6, 30, tzinfo=UTC),
        datetime(2024, 11, 4, 6, 30, tzinfo=UTC),
    ]
    hourly = [t.astimezone(NEW_YORK) for t in fired(db_url, "ny_hourly")]
    on_the_day = [t.strftime("%H %Z") for t in hourly if t.date().isoformat() == "2024-11-03"]
    assert len(on_the_day) == 25 and on_the_day[:4] == ["00 EDT", "01 EDT", "01 EST", "02 EST"]
    assert len(set(fired(db_url, "ny_hourly"))) == len(hourly)


# -- operations ------------------------------------------------------------------------------------


async def test_pause_keeps_last_enqueued_at_and_resume_continues(conn, db_url: str) -> None:
    declare(
        db_url,
        PeriodicJob("co", "* * * * *", {}, kind="k"),
        PeriodicJob("cu", "* * * * *", {}, kind="k", missed_fire_policy="catch_up"),
        PeriodicJob("skip", "* * * * *", {}, kind="k", missed_fire_policy="catch_up"),
    )
    await fire_due_schedules(conn, now=at(12, 1))
    for name in ("co", "cu", "skip"):
        cron.pause_schedule(db_url, name, paused_by="alice")
    cron.pause_schedule(db_url, "co", paused_by="bob")  # pausing again keeps the first pause
    row = schedule_row(db_url, "co")
    assert (row["paused_by"], row["last_enqueued_at"]) == ("alice", at(12, 1))
    info = cron.get_schedule(db_url, "co", now=at(12, 5))
    assert info.paused and info.next_fire_at is None

    assert (await fire_due_schedules(conn, now=at(12, 10, 15))).count == 0
    for name in ("co", "cu", "skip"):
        assert schedule_row(db_url, name)["last_enqueued_at"] == at(12, 1)  # untouched by the pause

    cron.resume_schedule(db_url, "co")
    cron.resume_schedule(db_url, "cu")
    cron.resume_schedule(db_url, "skip", skip_missed=True, now=at(12, 10, 15))
    row = schedule_row(db_url, "co")
    assert (row["paused_at"], row["paused_by"]) == (None, None)
    await fire_due_schedules(conn, now=at(12, 10, 15))
    # The pause is handled like downtime, by each schedule's missed_fire_policy...
    assert fired(db_url, "co") == [at(12, 1), at(12, 10)]
    assert fired(db_url, "cu") == [at(12, m) for m in range(1, 11)]
    # ...unless the resume skipped the fires missed while paused.
    assert fired(db_url, "skip") == [at(12, 1)]
    assert schedule_row(db_url, "skip")["last_enqueued_at"] == at(12, 10)
    await fire_due_schedules(conn, now=at(12, 11))
    assert fired(db_url, "skip") == [at(12, 1), at(12, 11)]
    assert cron.get_schedule(db_url, "skip", now=at(12, 11, 30)).next_fire_at == at(12, 12)


async def test_trigger_enqueues_now_without_moving_the_schedule(conn, db_url: str) -> None:
    declare(db_url, PeriodicJob("nightly", "0 3 * * *", Report("pdf"), queue="reports", metadata={"a": 1}))
    job = cron.trigger_schedule(db_url, "nightly")
    assert (job.kind, job.args, job.queue, job.state.value) == ("report", {"fmt": "pdf"}, "reports", "available")
    assert job.metadata == {"a": 1, "cron_name": "nightly", "triggered_manually": True}
    assert schedule_row(db_url, "nightly")["last_enqueued_at"] is None
    # Works while paused too (an operator asked for it explicitly).
    cron.pause_schedule(db_url, "nightly")
    cron.trigger_schedule(db_url, "nightly")
    assert rows(db_url, "SELECT count(*) FROM awa.jobs WHERE metadata->>'cron_name' = 'nightly'")[0][0] == 2
    # In the caller's transaction: rolled back with it.
    with psycopg.connect(db_url) as c:
        cron.trigger_schedule(c, "nightly")
        c.rollback()
    assert rows(db_url, "SELECT count(*) FROM awa.jobs")[0][0] == 2
    # The regular fires go on as declared.
    cron.resume_schedule(db_url, "nightly")
    tick = await fire_due_schedules(conn, now=datetime(2024, 6, 4, 3, 0, 1, tzinfo=UTC))
    assert tick.enqueued == {"nightly": [datetime(2024, 6, 4, 3, tzinfo=UTC)]}


def test_unknown_schedule_is_a_clear_error_and_changes_nothing(db_url: str) -> None:
    declare(db_url, PeriodicJob("real", "* * * * *", {}, kind="k"))
    before = schedule_row(db_url, "real")
    operations = [
        lambda: cron.pause_schedule(db_url, "ghost", paused_by="x"),
        lambda: cron.resume_schedule(db_url, "ghost"),
        lambda: cron.resume_schedule(db_url, "ghost", skip_missed=True),
        lambda: cron.trigger_schedule(db_url, "ghost"),
        lambda: cron.delete_schedule(db_url, "ghost"),
        lambda: cron.get_schedule(db_url, "ghost"),
    ]
    for operation in operations:
        with pytest.raises(ScheduleNotFound, match="no schedule named 'ghost'"):
            operation()
    assert counts(db_url) == (0, 1)
    assert schedule_row(db_url, "real") == before
    cron.delete_schedule(db_url, "real")
    assert counts(db_url) == (0, 0)


def test_list_schedules_with_next_fire_time(db_url: str) -> None:
    declare(
        db_url,
        PeriodicJob("b_nightly", "30 2 * * *", {}, kind="k", timezone="America/New_York"),
        PeriodicJob("a_minutely", "* * * * *", {}, kind="k"),
    )
    listed = cron.list_schedules(db_url, now=at(12, 7, 10))
    assert [s.name for s in listed] == ["a_minutely", "b_nightly"]
    assert listed[0].next_fire_at == at(12, 8)
    assert listed[1].next_fire_at == datetime(2024, 6, 4, 6, 30, tzinfo=UTC)  # 02:30 EDT
    assert listed[1].timezone == "America/New_York" and not listed[1].paused
    # Without a clock the database's decides; the next fire is in the future.
    assert all(s.next_fire_at > datetime.now(UTC) for s in cron.list_schedules(db_url))


def test_cli_cron_commands(db_url: str, capsys: pytest.CaptureFixture[str]) -> None:
    declare(db_url, PeriodicJob("nightly", "0 3 * * *", {}, kind="k"))
    base = ["--database-url", db_url]
    assert cli_main(["cron", "list", *base]) == 0
    out = capsys.readouterr().out
    assert "nightly" in out and "0 3 * * *" in out and "next_fire_at" in out
    assert cli_main(["cron", "pause", "nightly", "--by", "ops", *base]) == 0
    assert schedule_row(db_url, "nightly")["paused_by"] == "ops"
    assert cli_main(["cron", "list", *base]) == 0
    assert "yes (by ops)" in capsys.readouterr().out
    assert cli_main(["cron", "trigger", "nightly", *base]) == 0
    assert "enqueued job" in capsys.readouterr().out
    assert cli_main(["cron", "resume", "nightly", *base]) == 0
    assert schedule_row(db_url, "nightly")["paused_at"] is None
    assert cli_main(["cron", "pause", "ghost", *base]) == 2
    assert "no schedule named 'ghost'" in capsys.readouterr().err
    assert counts(db_url) == (1, 1)


# -- exactly once -----------------------------------------------------------------------------------


async def test_a_leader_dying_mid_tick_commits_nothing_and_the_next_fires_once(conn, db_url: str) -> None:
    declare(db_url, PeriodicJob("minutely", "* * * * *", {}, kind="k", missed_fire_policy="catch_up"))
    dying = await asyncpg.connect(db_url)
    pid = dying.get_server_pid()
    try:
        # The dying leader has inserted the job and advanced the schedule, but not committed.
        outer = dying.transaction()
        await outer.start()
        tick = await fire_due_schedules(dying, now=at(12, 3, 1))
        assert tick.enqueued == {"minutely": [at(12, 1), at(12, 2), at(12, 3)]}
        # Another leader meanwhile skips the locked schedule instead of firing it again.
        racing = await fire_due_schedules(conn, now=at(12, 3, 1))
        assert racing.count == 0 and racing.skipped_locked == 1
        assert counts(db_url) == (0, 1)
        await conn.execute("SELECT pg_terminate_backend($1)", pid)
    finally:
        dying.terminate()
    await wait_until(lambda: rows(db_url, "SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (pid,))[0][0] == 0)
    assert counts(db_url) == (0, 1) and schedule_row(db_url, "minutely")["last_enqueued_at"] is None
    tick = await fire_due_schedules(conn, now=at(12, 3, 1))
    assert tick.enqueued == {"minutely": [at(12, 1), at(12, 2), at(12, 3)]}
    assert fired(db_url, "minutely") == [at(12, 1), at(12, 2), at(12, 3)]


def test_two_processes_racing_fire_each_occurrence_exactly_once(db_url: str) -> None:
    """Two processes x two connections run the cron tick on the same clock sequence at the same time."""
    declare(
        db_url,
        PeriodicJob("race_cu", "* * * * *", {}, kind="k", missed_fire_policy="catch_up"),
        PeriodicJob("race_co", "* * * * *", {}, kind="k"),
        PeriodicJob("race_10s", "*/10 * * * * *", {}, kind="k", missed_fire_policy="catch_up"),
    )
    rounds, step = 150, 20.0
    start = time.time() + 2.0 * MULTIPLIER  # both processes have connected by then
    command = [sys.executable, "-m", "tests.cron_race", db_url, str(start), T0.isoformat(), str(rounds), str(step), "2"]
    procs = [
        subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=60 * MULTIPLIER) for proc in procs]
    for proc, (_, err) in zip(procs, outputs, strict=True):
        assert proc.returncode == 0, err
    stats = [json.loads(out.strip().splitlines()[-1]) for out, _ in outputs]
    end = T0 + timedelta(seconds=rounds * step)  # 12:50:30

    # No fire time has two jobs, for any schedule.
    dupes = rows(
        db_url,
        "SELECT metadata->>'cron_name', metadata->>'cron_fire_time', count(*) FROM awa.jobs "
        "GROUP BY 1, 2 HAVING count(*) > 1",
    )
    assert dupes == []
    minutes = [at(12, 1) + timedelta(minutes=i) for i in range(50)]
    assert fired(db_url, "race_cu") == minutes
    assert fired(db_url, "race_10s") == [T0 + timedelta(seconds=10 * i - 20) for i in range(3, 303)]
    coalesced = fired(db_url, "race_co")
    assert coalesced == sorted(set(coalesced)) and coalesced[-1] == at(12, 50) and set(coalesced) <= set(minutes)
    assert sum(s["enqueued"] for s in stats) == rows(db_url, "SELECT count(*) FROM awa.jobs")[0][0]
    assert all(s["errors"] == 0 and s["ticks"] == 2 * rounds for s in stats)
    print("racers:", stats, "end", end)


# -- R29: leader failover ---------------------------------------------------------------------------

ADVISORY_LEADER = """
SELECT a.pid FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
WHERE l.locktype = 'advisory' AND l.granted AND a.datname = current_database()
  AND a.application_name = 'awa-maintenance'
"""


def assert_one_job_per_second(url: str, name: str) -> list[datetime]:
    """≤ 1 job per fire time, and (catch_up) no fire time skipped between the first and the last."""
    assert (
        rows(
            url,
            "SELECT metadata->>'cron_fire_time', count(*) FROM awa.jobs WHERE metadata->>'cron_name' = %s "
            "GROUP BY 1 HAVING count(*) > 1",
            (name,),
        )
        == []
    )
    times = fired(url, name)
    assert times == [times[0] + timedelta(seconds=i) for i in range(len(times))]
    return times


def insert_scheduled(url: str, queue: str, delay: float) -> int:
    with psycopg.connect(url) as c:
        run_at = c.execute("SELECT clock_timestamp()").fetchone()[0] + timedelta(seconds=delay)
        job = awa_bridge.insert_job_sync(c, {}, kind="cron_beat", queue=queue, run_at=run_at)
        c.commit()
    return job.id


def job_state(url: str, job_id: int) -> str:
    return rows(url, "SELECT state::text FROM awa.jobs WHERE id = %s", (job_id,))[0][0]


async def test_r29_lock_connection_terminated_cron_and_promotion_go_on(make_client, db_url: str) -> None:
    queue, name = "r29", "every_second"
    clients = [make_client(), make_client()]
    for client in clients:

        @client.task("cron_beat", queue=queue)
        async def beat(job) -> None:
            pass

        client.periodic(name, "* * * * * *", {}, kind="cron_beat", queue=queue, missed_fire_policy="catch_up")
        await client.start([queue])
    old_pid = await wait_until(lambda: rows(db_url, ADVISORY_LEADER))
    await wait_until(lambda: len(fired(db_url, name)) >= 2)

    rows(db_url, "SELECT pg_terminate_backend(%s)", (old_pid[0][0],))
    killed = time.monotonic()
    new_pid = await wait_until(lambda: [r for r in rows(db_url, ADVISORY_LEADER) if r != old_pid[0]], interval=0.01)
    took = time.monotonic() - killed
    election = FAST["leader_election_interval"]
    print(f"a new leader (pid {new_pid[0][0]}) holds the lock {took:.2f} s after the old one's was terminated")
    assert took <= (election + 1.5) * MULTIPLIER  # one election interval, plus reconnect slack

    due = insert_scheduled(db_url, queue, 0.3)
    cut = datetime.now(UTC)
    await wait_until(lambda: sum(t > cut for t in fired(db_url, name)) >= 2)
    await wait_until(lambda: job_state(db_url, due) == "completed")
    assert_one_job_per_second(db_url, name)


class Worker:
    """A ``python -m awa_bridge worker tests.cron_app:client`` subprocess with its log."""

    def __init__(self, url: str) -> None:
        env = {**os.environ, "DATABASE_URL": url, "PYTHONUNBUFFERED": "1"}
        command = [sys.executable, "-m", "awa_bridge", "worker", "tests.cron_app:client", "--queue", "cron_r29"]
        self.proc = subprocess.Popen(
            command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._drain, daemon=True)
        self.reader.start()

    def _drain(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append(line.rstrip("\n"))

    def logged(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.reader.join(timeout=5)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


@pytest.fixture
def workers() -> Iterator[list[Worker]]:
    started: list[Worker] = []
    yield started
    for worker in started:
        worker.stop()
    for worker in started:
        print(f"--- worker {worker.proc.pid} log ---", *worker.lines[-30:], sep="\n")


async def test_r29_leader_process_killed_the_other_takes_over(db_url: str, workers: list[Worker]) -> None:
    name = "r29_every_second"  # declared in tests/cron_app.py, on queue cron_r29
    workers += [Worker(db_url), Worker(db_url)]
    leader = await wait_until(lambda: next((w for w in workers if w.logged("became the maintenance leader")), None))
    survivor = next(w for w in workers if w is not leader)
    await wait_until(lambda: len(fired(db_url, name)) >= 2)
    assert not survivor.logged("became the maintenance leader")

    leader.proc.kill()  # SIGKILL: no graceful release; the server drops its session and lock
    killed = time.monotonic()
    leader.proc.wait()
    await wait_until(lambda: survivor.logged("became the maintenance leader"), interval=0.01)
    took = time.monotonic() - killed
    election = FAST["leader_election_interval"]
    print(f"survivor became leader {took:.2f} s after the kill (election interval {election} s)")
    assert took <= (election + 1.5) * MULTIPLIER

    due = insert_scheduled(db_url, "cron_r29", 0.3)
    cut = datetime.now(UTC)
    await wait_until(lambda: sum(t > cut for t in fired(db_url, name)) >= 2)
    await wait_until(lambda: job_state(db_url, due) == "completed")
    times = assert_one_job_per_second(db_url, name)
    done = Counter(r[0] for r in rows(db_url, "SELECT state::text FROM awa.jobs WHERE queue = 'cron_r29'"))
    print(f"{len(times)} fires, job states {dict(done)}")


def _awa_cron(url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m awa_bridge cron ...`` as an operator types it."""
    env = {**os.environ, "DATABASE_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "awa_bridge", "cron", *argv],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_cron_edit_without_options_and_pausing_twice_say_so(db_url: str) -> None:
    """``cron edit NAME`` alone printed "updated schedule NAME" though nothing changed; pausing a paused
    schedule said "paused" again."""
    pytest.importorskip("croniter")
    created = _awa_cron(db_url, "create", "nightly_db", "--cron", "0 3 * * *", "--kind", "k")
    assert created.returncode == 0, created.stderr
    before = schedule_row(db_url, "nightly_db")
    edit = _awa_cron(db_url, "edit", "nightly_db")
    assert (edit.returncode, edit.stdout) == (2, ""), edit
    assert edit.stderr.startswith("error: give at least one option to change (--cron, --timezone, --kind, "), edit
    assert len(edit.stderr.splitlines()) == 1
    assert schedule_row(db_url, "nightly_db") == before
    first = _awa_cron(db_url, "pause", "nightly_db", "--by", "alice")
    assert (first.returncode, first.stdout) == (0, "schedule nightly_db paused\n"), first.stderr
    paused_at = schedule_row(db_url, "nightly_db")["paused_at"]
    again = _awa_cron(db_url, "pause", "nightly_db", "--by", "bob")
    assert again.returncode == 0, again.stderr
    said, _, since = again.stdout.rstrip("\n").removesuffix("; nothing to do").rpartition(" since ")
    assert said == "schedule nightly_db was already paused by alice", again.stdout
    assert datetime.fromisoformat(since) == paused_at.replace(microsecond=0), again.stdout
    assert schedule_row(db_url, "nightly_db")["paused_by"] == "alice"
