"""Admin operations (awa_bridge.admin, docs/howto/operations.md) on every connection type.

On a connection each operation runs in the caller's transaction: its change
is seen by others only after the commit and is gone after a rollback; a
typed refusal (bad value, unknown id, wrong state) leaves the transaction
usable.
"""

from __future__ import annotations

from typing import Any

import pytest

from awa_bridge import JobState, admin
from awa_bridge.errors import InvalidState, JobNotFound

from ..drivers import Handle
from .support import force, insert, refused, rows, states, still_usable


def four_jobs(url: str) -> tuple[int, int, int, int]:
    """A failed, a scheduled, an available and a completed job."""
    failed, scheduled, available, completed = (insert(url, {"n": n}) for n in range(4))
    force(url, failed, "failed")
    force(url, scheduled, "scheduled")
    force(url, completed, "completed")
    return failed, scheduled, available, completed


async def single_operations(handle: Handle, url: str) -> tuple[int, int, int, int]:
    failed, scheduled, available, completed = four_jobs(url)
    await handle.begin()
    retried = await handle.call(admin.retry_job, admin.retry_job_async, failed, operator="alice")
    ran = await handle.call(admin.run_now, admin.run_now_async, scheduled, operator="alice")
    cancelled = await handle.call(admin.cancel_job, admin.cancel_job_async, available, operator="alice")
    deleted = await handle.call(admin.delete_job, admin.delete_job_async, completed, operator="alice")
    assert (retried.id, retried.state, retried.attempt) == (failed, JobState.available, 0)
    assert (ran.id, ran.state) == (scheduled, JobState.available)
    assert (cancelled.id, cancelled.state) == (available, JobState.cancelled)
    assert (deleted.id, deleted.state) == (completed, JobState.completed)
    return failed, scheduled, available, completed


async def test_single_job_operations_commit_with_the_caller(handle: Handle, db_url: str) -> None:
    failed, scheduled, available, completed = await single_operations(handle, db_url)
    before = {failed: "failed", scheduled: "scheduled", available: "available", completed: "completed"}
    assert states(db_url) == before, "nothing is visible before the caller commits"
    await handle.commit()
    assert states(db_url) == {failed: "available", scheduled: "available", available: "cancelled"}
    actions = rows(db_url, "SELECT job_id, action, operator FROM awa.job_actions ORDER BY job_id")
    assert actions == [
        (failed, "retry", "alice"),
        (scheduled, "run_now", "alice"),
        (available, "cancel", "alice"),
        (completed, "delete", "alice"),
    ]


async def test_single_job_operations_roll_back_with_the_caller(handle: Handle, db_url: str) -> None:
    failed, scheduled, available, completed = await single_operations(handle, db_url)
    await handle.rollback()
    assert states(db_url) == {failed: "failed", scheduled: "scheduled", available: "available", completed: "completed"}
    assert rows(db_url, "SELECT count(*) FROM awa.job_actions") == [(0,)]


async def test_refusals_leave_the_callers_transaction_usable(handle: Handle, db_url: str) -> None:
    done = insert(db_url)
    force(db_url, done, "completed")
    await handle.begin()
    await refused("job_id", handle.call(admin.retry_job, admin.retry_job_async, 0))
    await refused("operator", handle.call(admin.cancel_job, admin.cancel_job_async, done, operator=""))
    with pytest.raises(JobNotFound):
        await handle.call(admin.cancel_job, admin.cancel_job_async, done + 1)
    with pytest.raises(InvalidState) as info:
        await handle.call(admin.cancel_job, admin.cancel_job_async, done)
    assert (info.value.state, info.value.action) == ("completed", "cancel")
    await still_usable(handle, db_url)
    assert states(db_url) == {done: "completed"}


async def test_retry_failed_and_cancel_by_unique_key(handle: Handle, db_url: str) -> None:
    failed = [insert(db_url, {"n": n}, kind="mail", queue="a" if n else "b") for n in range(3)]
    for job_id in failed:
        force(db_url, job_id, "failed")
    held = insert(db_url, {"to": "a@b.c"}, kind="mail", unique=True)
    await handle.begin()
    assert await handle.call(admin.retry_failed, admin.retry_failed_async, kind="mail", queue="a") == 2
    report = await handle.call(admin.retry_failed_report, admin.retry_failed_report_async, kind="mail")
    assert report == (1, 0)
    cancelled = await handle.call(
        admin.cancel_by_unique_key, admin.cancel_by_unique_key_async, "mail", args={"to": "a@b.c"}
    )
    assert (cancelled.id, cancelled.state) == (held, JobState.cancelled)
    with pytest.raises(JobNotFound):
        await handle.call(admin.cancel_by_unique_key, admin.cancel_by_unique_key_async, "mail", args={"to": "x"})
    await refused("kind", handle.call(admin.retry_failed, admin.retry_failed_async, kind=""))
    await handle.commit()
    assert states(db_url) == {**dict.fromkeys(failed, "available"), held: "cancelled"}


BULK = {
    "retry": admin.retry_jobs,
    "cancel": admin.cancel_jobs,
    "run_now": admin.run_jobs_now,
    "delete": admin.delete_jobs,
}


async def bulk(handle: Handle, action: str, *args: Any, **kwargs: Any) -> admin.BulkResult:
    """``admin.retry_jobs`` (and co.) on a sync connection, ``await admin.bulk_async(conn, action)`` on an async one."""
    if handle.is_async:
        return await admin.bulk_async(handle.conn, action, *args, **kwargs)
    return await handle.call(BULK[action], admin.bulk_async, *args, **kwargs)


async def test_bulk_operations_run_in_the_callers_transaction(handle: Handle, db_url: str) -> None:
    failed = [insert(db_url, {"n": n}, queue="bulk") for n in range(5)]
    for job_id in failed:
        force(db_url, job_id, "failed")
    done = insert(db_url, {"n": "done"})
    force(db_url, done, "completed")
    await handle.begin()
    retried = await bulk(handle, "retry", state="failed", queue="bulk", operator="bob", batch_size=2)
    assert (retried.changed, retried.skipped, retried.batches, retried.stopped) == (5, {}, 3, None)
    cancelled = await bulk(handle, "cancel", [failed[0], done, 10**9])
    assert cancelled.summary() == "1 cancelled; 2 skipped: 1 completed, 1 not found"
    assert states(db_url) == {**dict.fromkeys(failed, "failed"), done: "completed"}
    await handle.commit()
    assert states(db_url) == {failed[0]: "cancelled", **dict.fromkeys(failed[1:], "available"), done: "completed"}
    await handle.begin()
    deleted = await bulk(handle, "delete", state="available", queue="bulk")
    assert deleted.changed == 4
    await handle.rollback()
    assert len(states(db_url)) == 6


async def test_bulk_bad_input_names_the_field(handle: Handle, db_url: str) -> None:
    await handle.begin()
    await refused("state", bulk(handle, "run_now", state="completed"))
    await refused("ids", bulk(handle, "retry", [1], kind="k"))
    await refused("batch_size", bulk(handle, "delete", state="failed", batch_size=0))
    await still_usable(handle, db_url)


async def test_queue_pause_resume_and_stats(handle: Handle, db_url: str) -> None:
    for n in range(3):
        insert(db_url, {"n": n}, queue="email")
    await handle.begin()
    await handle.call(admin.pause_queue, admin.pause_queue_async, "email", paused_by="alice")
    [stats] = await handle.call(admin.queue_stats, admin.queue_stats_async, "email")
    assert (stats.queue, stats.available, stats.total_queued, stats.paused) == ("email", 3, 3, True)
    assert rows(db_url, "SELECT count(*) FROM awa.queue_meta WHERE paused") == [(0,)]
    await handle.commit()
    assert rows(db_url, "SELECT queue, paused, paused_by FROM awa.queue_meta") == [("email", True, "alice")]
    await handle.begin()
    assert await handle.call(admin.resume_queue, admin.resume_queue_async, "email") is True
    assert await handle.call(admin.resume_queue, admin.resume_queue_async, "email") is False  # not paused now
    assert await handle.call(admin.resume_queue, admin.resume_queue_async, "never-paused") is False
    await refused("queue", handle.call(admin.resume_queue, admin.resume_queue_async, ""))
    await refused("queue", handle.call(admin.pause_queue, admin.pause_queue_async, ""))
    await handle.commit()
    assert rows(db_url, "SELECT queue, paused FROM awa.queue_meta") == [("email", False)]
