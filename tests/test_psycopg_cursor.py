"""The cursor ``insert_job`` keeps on a psycopg connection (``awa_bridge/drivers/psycopg.py``).

A single enqueue on psycopg reuses one cursor per connection (a new cursor
sets up its parameter dumpers and column loaders again on every statement).
Each cursor must serve one caller at a time: callers that share a connection
(threads, tasks, a pipeline) each get back their own job, never another's
row, and a connection closed and dropped is still freed. The admin calls and
receipts read their rows on a caller's connection in pipeline mode too, where
a result arrives only at the first fetch.
"""

from __future__ import annotations

import asyncio
import gc
import sys
import threading
import weakref
from collections.abc import Callable

import psycopg
import pytest

import awa_bridge
from awa_bridge import Job, UniqueConflict, admin
from awa_bridge.receipts import record_effect, record_effect_async


def written(db_url: str, jobs: list[Job]) -> dict[int, dict[str, int]]:
    """The args of these jobs' rows, read back by id."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        rows = conn.execute("SELECT id, args FROM awa.jobs WHERE id = ANY(%s)", ([job.id for job in jobs],)).fetchall()
    return {row[0]: row[1] for row in rows}


def assert_each_got_its_own_row(db_url: str, jobs: list[Job], expected: int) -> None:
    assert len(jobs) == expected and len({job.id for job in jobs}) == expected
    rows = written(db_url, jobs)
    assert all(rows[job.id] == job.args for job in jobs)


def test_threads_sharing_a_connection_each_get_their_own_job(db_url: str) -> None:
    """psycopg lets threads share a connection; the kept cursor is lent to one of them at a time, so
    no thread reads the row another thread's statement returned."""
    jobs: list[Job] = []
    failures: list[BaseException] = []
    start = threading.Barrier(8)

    def enqueue(conn: psycopg.Connection, thread: int) -> None:
        try:
            start.wait()
            for n in range(400):
                jobs.append(awa_bridge.insert_job(conn, {"thread": thread, "n": n}, kind="shared_conn"))
        except BaseException as exc:  # reported below, in the test's own thread
            failures.append(exc)

    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads switch between any two steps, between a statement and its fetch too
    try:
        with psycopg.connect(db_url, autocommit=True) as conn:
            threads = [threading.Thread(target=enqueue, args=(conn, t)) for t in range(8)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(60)
    finally:
        sys.setswitchinterval(interval)
    assert not failures
    assert_each_got_its_own_row(db_url, jobs, 8 * 400)


async def test_tasks_sharing_an_async_connection_in_a_pipeline_each_get_their_own_job(db_url: str) -> None:
    """In pipeline mode a statement's result is read at a later await, where another task may run: the
    task holding the kept cursor keeps it until it has its row; the others take cursors of their own."""
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        async with conn.pipeline():
            jobs = await asyncio.gather(*(awa_bridge.insert_job(conn, {"n": n}, kind="pipelined") for n in range(60)))
        jobs += [await awa_bridge.insert_job(conn, {"n": n}, kind="after_pipeline") for n in range(60, 70)]
    assert_each_got_its_own_row(db_url, jobs, 70)


def test_enqueues_in_a_sync_pipeline_each_get_their_own_job(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn, conn.pipeline():
        jobs = [awa_bridge.insert_job(conn, {"n": n}, kind="pipelined_sync") for n in range(20)]
    assert_each_got_its_own_row(db_url, jobs, 20)


@pytest.mark.parametrize("driver", ["psycopg", "psycopg-async"])
async def test_the_kept_cursor_serves_the_next_enqueue_after_a_failed_one(db_url: str, driver: str) -> None:
    """A statement that fails on the kept cursor (a duplicate unique key) leaves it usable: the caller's
    transaction is rolled back as usual and the next enqueue on the connection goes through."""
    args = {"order": driver}
    if driver == "psycopg":
        with psycopg.connect(db_url, autocommit=True) as conn:
            first = awa_bridge.insert_job(conn, args, kind="kept_cursor", unique=True)
            with pytest.raises(UniqueConflict):
                awa_bridge.insert_job(conn, args, kind="kept_cursor", unique=True)
            second = awa_bridge.insert_job(conn, {"order": "next"}, kind="kept_cursor")
    else:
        async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
            first = await awa_bridge.insert_job(aconn, args, kind="kept_cursor", unique=True)
            with pytest.raises(UniqueConflict):
                await awa_bridge.insert_job(aconn, args, kind="kept_cursor", unique=True)
            second = await awa_bridge.insert_job(aconn, {"order": "next"}, kind="kept_cursor")
    assert_each_got_its_own_row(db_url, [first, second], 2)


def test_a_closed_connection_with_a_kept_cursor_is_still_freed(db_url: str) -> None:
    """The kept cursor references its connection (a cycle): the collector frees both once dropped."""
    conn = psycopg.connect(db_url, autocommit=True)
    awa_bridge.insert_job(conn, {"n": 1}, kind="freed")
    conn.close()
    ref = weakref.ref(conn)
    del conn
    gc.collect()
    assert ref() is None


def test_admin_calls_on_a_sync_pipeline_read_their_rows(db_url: str, make_database: Callable[[], str]) -> None:
    """Before the fix, inside ``conn.pipeline()`` ``queue_stats`` returned [] and ``cancel_job`` said the
    job did not exist: the driver read the result before the pipeline had fetched it."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        job = awa_bridge.insert_job(conn, {"n": 1}, kind="admin_in_pipeline", queue="piped")
        with conn.pipeline():
            before = admin.queue_stats(conn, "piped")
            cancelled = admin.cancel_job(conn, job.id)
            admin.pause_queue(conn, "piped", paused_by="test")  # a statement that returns no rows
            after = admin.queue_stats(conn, "piped")
    assert [(s.queue, s.available, s.paused) for s in before] == [("piped", 1, False)]
    assert (cancelled.id, cancelled.state.value) == (job.id, "cancelled")
    assert [(s.available, s.paused) for s in after] == [(0, True)]
    # Receipts read their rows the same way: the second call finds the first one's outcome.
    effects: list[int] = []
    with psycopg.connect(db_url) as conn, conn.pipeline():
        for _ in range(2):
            outcome = record_effect(conn, "t1", "op-1", {"n": 1}, lambda: effects.append(1) or "done")
            assert outcome == "done"
        conn.commit()
    assert effects == [1]
    # A statement that fails in a pipeline still raises (42P01 is itself a ProgrammingError).
    with (
        psycopg.connect(make_database(), autocommit=True) as bare,
        bare.pipeline(),
        pytest.raises(psycopg.errors.UndefinedTable),
    ):
        admin.queue_stats(bare)


async def test_admin_calls_on_an_async_pipeline_read_their_rows(db_url: str, make_database: Callable[[], str]) -> None:
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as conn:
        job = await awa_bridge.insert_job(conn, {"n": 1}, kind="admin_in_pipeline", queue="piped_async")
        async with conn.pipeline():
            before = await admin.queue_stats_async(conn, "piped_async")
            cancelled = await admin.cancel_job_async(conn, job.id)
            await admin.pause_queue_async(conn, "piped_async", paused_by="test")
            after = await admin.queue_stats_async(conn, "piped_async")
    assert [(s.queue, s.available, s.paused) for s in before] == [("piped_async", 1, False)]
    assert (cancelled.id, cancelled.state.value) == (job.id, "cancelled")
    assert [(s.available, s.paused) for s in after] == [(0, True)]
    effects: list[int] = []
    async with await psycopg.AsyncConnection.connect(db_url) as conn, conn.pipeline():
        for _ in range(2):
            outcome = await record_effect_async(conn, "t1", "op-async", {"n": 1}, lambda: effects.append(1) or "done")
            assert outcome == "done"
        await conn.commit()
    assert effects == [1]
    async with await psycopg.AsyncConnection.connect(make_database(), autocommit=True) as bare, bare.pipeline():
        with pytest.raises(psycopg.errors.UndefinedTable):
            await admin.queue_stats_async(bare)
