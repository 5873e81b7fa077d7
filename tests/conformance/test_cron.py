"""Cron schedules (awa_bridge.cron, docs/howto/cron.md) on every connection type.

Declaring (``upsert_schedules_sync`` / ``await upsert_schedules``) and pruning
(``prune_schedules_sync`` / ``await prune_schedules``) work on every type, in
the caller's transaction. The operations (list, get, pause, resume, trigger,
delete) are documented for a URL or a sync connection: on a sync one they run
in the caller's transaction, on an async one they refuse with
UnsupportedConnection and write nothing.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from awa_bridge import JobState, cron_edit
from awa_bridge.cron import (
    PeriodicJob,
    ScheduleNotFound,
    delete_schedule,
    get_schedule,
    list_schedules,
    pause_schedule,
    prune_schedules,
    prune_schedules_sync,
    resume_schedule,
    trigger_schedule,
    upsert_schedules,
    upsert_schedules_sync,
)
from awa_bridge.errors import ValidationError

from ..drivers import Handle, sync_result
from .support import refused, rows, still_usable, sync_only

CREATED = datetime(2024, 3, 9, 12, tzinfo=UTC)
NIGHTLY = PeriodicJob("nightly", "30 2 * * *", {"fmt": "pdf"}, kind="report", timezone="Europe/London")
HOURLY = PeriodicJob("hourly", "0 * * * *", {}, kind="tick", queue="ticks")


def schedules(url: str) -> list[tuple[str, str]]:
    return rows(url, "SELECT name, cron_expr FROM awa.cron_jobs ORDER BY name")


async def declare(handle: Handle, *declared: PeriodicJob) -> list[str]:
    return await handle.call(upsert_schedules_sync, upsert_schedules, list(declared), now=CREATED, owner="app")


async def test_declaring_and_pruning_run_in_the_callers_transaction(handle: Handle, db_url: str) -> None:
    await handle.begin()
    assert sorted(await declare(handle, NIGHTLY, HOURLY)) == ["hourly", "nightly"]
    assert schedules(db_url) == [], "nothing is visible before the caller commits"
    await handle.commit()
    assert schedules(db_url) == [("hourly", "0 * * * *"), ("nightly", "30 2 * * *")]
    await handle.begin()
    assert await declare(handle, NIGHTLY, HOURLY) == [], "an unchanged declaration changes nothing"
    pruned = await handle.call(prune_schedules_sync, prune_schedules, ["nightly"], owner="app")
    assert pruned == ["hourly"]
    await handle.rollback()
    assert len(schedules(db_url)) == 2
    await handle.begin()
    assert sorted(await handle.call(prune_schedules_sync, prune_schedules, [], owner="app")) == ["hourly", "nightly"]
    await handle.commit()
    assert schedules(db_url) == []


async def test_bad_declarations_name_the_field_and_leave_the_transaction_usable(handle: Handle, db_url: str) -> None:
    await handle.begin()
    await refused("owner", handle.call(upsert_schedules_sync, upsert_schedules, [NIGHTLY], owner=""))
    await refused("name", handle.call(upsert_schedules_sync, upsert_schedules, [NIGHTLY, NIGHTLY]))
    await refused("owner", handle.call(prune_schedules_sync, prune_schedules, [], owner="x" * 1000))
    await still_usable(handle, db_url)
    assert schedules(db_url) == []


async def test_operations_on_a_sync_connection_or_refused_on_an_async_one(handle: Handle, db_url: str) -> None:
    await handle.begin()
    await declare(handle, NIGHTLY)
    await handle.commit()
    if handle.is_async:
        for operation in (get_schedule, pause_schedule, resume_schedule, trigger_schedule, delete_schedule):
            sync_only(handle, lambda conn, op=operation: op(conn, "nightly"))
        sync_only(handle, list_schedules)
        assert rows(db_url, "SELECT paused_at FROM awa.cron_jobs") == [(None,)]
        return
    await handle.begin()
    [info] = sync_result(list_schedules(handle.conn))
    assert (info.name, info.kind, info.source, info.owner) == ("nightly", "report", "declared", "app")
    assert not info.paused and info.next_fire_at is not None
    sync_result(pause_schedule(handle.conn, "nightly", paused_by="alice"))
    assert sync_result(get_schedule(handle.conn, "nightly")).paused
    job = sync_result(trigger_schedule(handle.conn, "nightly"))
    assert (job.kind, job.state, job.metadata["cron_name"], job.metadata["triggered_manually"]) == (
        "report",
        JobState.available,
        "nightly",
        True,
    )
    assert rows(db_url, "SELECT paused_at FROM awa.cron_jobs") == [(None,)], "not before the caller commits"
    await handle.commit()
    assert rows(db_url, "SELECT paused_by FROM awa.cron_jobs") == [("alice",)]
    assert rows(db_url, "SELECT kind FROM awa.jobs") == [("report",)]
    await handle.begin()
    sync_result(resume_schedule(handle.conn, "nightly"))
    sync_result(delete_schedule(handle.conn, "nightly"))
    with pytest.raises(ScheduleNotFound):
        get_schedule(handle.conn, "nightly")
    await still_usable(handle, db_url)
    assert schedules(db_url) == []


async def test_database_schedules_are_edited_on_a_sync_connection(handle: Handle, db_url: str) -> None:
    """``cron_edit`` (the operator's schedules) in the caller's transaction; declared ones are refused."""
    await handle.begin()
    await declare(handle, NIGHTLY)
    await handle.commit()
    if handle.is_async:
        sync_only(handle, lambda conn: cron_edit.create_schedule(conn, HOURLY))
        sync_only(handle, lambda conn: cron_edit.delete_schedule(conn, "nightly"))
        assert schedules(db_url) == [("nightly", "30 2 * * *")]
        return
    await handle.begin()
    sync_result(cron_edit.create_schedule(handle.conn, HOURLY))
    sync_result(cron_edit.update_schedule(handle.conn, PeriodicJob("hourly", "15 * * * *", {}, kind="tick")))
    with pytest.raises(ValidationError, match=r"^name: "):
        cron_edit.create_schedule(handle.conn, HOURLY)
    with pytest.raises(cron_edit.DeclaredSchedule) as info:
        cron_edit.delete_schedule(handle.conn, "nightly")
    assert (info.value.name, info.value.owner) == ("nightly", "app")
    assert schedules(db_url) == [("nightly", "30 2 * * *")], "nothing is visible before the caller commits"
    await handle.commit()
    assert schedules(db_url) == [("hourly", "15 * * * *"), ("nightly", "30 2 * * *")]
