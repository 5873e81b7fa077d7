"""Admin operations: retry, retry failed, cancel (running jobs included), delete, run now,
cancel by unique key, queue statistics, the CLI, and concurrent mutations on one job (R9).

Every rejected call is checked to leave the row exactly as it was.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest

import awa_bridge
from awa_bridge import admin, cli
from awa_bridge.errors import InvalidState, JobNotFound, UniqueConflict, ValidationError
from awa_bridge.worker.config import QueueConfig

from .dbutil import with_driver
from .waiting import job_row, job_state, wait_until


@dataclass
class SendInvoice:
    invoice: int


def insert(url: str, args: Any = None, **opts: Any) -> int:
    if args is None or isinstance(args, dict):
        opts.setdefault("kind", "admin_job")
    with psycopg.connect(url) as conn:
        job = awa_bridge.insert_job_sync(conn, {} if args is None else args, **opts)
        conn.commit()
    return job.id


def force(url: str, job_id: int, state: str, **columns: Any) -> None:
    """Put a job in a state directly (test setup, not an API)."""
    sets = ["state = CAST(%(state)s AS awa.job_state)"] + [f"{name} = %({name})s" for name in columns]
    if state in ("completed", "failed", "cancelled"):
        sets.append("finalized_at = now()")
    if state == "running":
        sets += ["attempt = attempt + 1", "run_lease = run_lease + 1", "heartbeat_at = now()", "attempted_at = now()"]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(
            f"UPDATE awa.jobs SET {', '.join(sets)} WHERE id = %(id)s", {"state": state, "id": job_id, **columns}
        )


def job_in(url: str, state: str, **opts: Any) -> int:
    job_id = insert(url, **opts)
    if state != "available":
        force(url, job_id, state)
    return job_id


def jobs_snapshot(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute("SELECT * FROM awa.jobs ORDER BY id").fetchall()


def assert_rejected(url: str, error: type[Exception], call: Callable[[], Any], match: str | None = None) -> None:
    """``call`` raises ``error`` and changes no row."""
    before = jobs_snapshot(url)
    with pytest.raises(error, match=match):
        call()
    assert jobs_snapshot(url) == before


# -- retry ---------------------------------------------------------------------------------


def test_retry_makes_a_failed_job_available_now_with_a_fresh_attempt_budget(db_url: str) -> None:
    job_id = insert(db_url, max_attempts=3)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "UPDATE awa.jobs SET state = 'failed', attempt = 3, finalized_at = now(), "
            "run_at = now() - interval '1 day', errors = ARRAY['{\"error\": \"boom\"}'::jsonb], "
            "progress = '{\"percent\": 40}' WHERE id = %s",
            (job_id,),
        )
    job = admin.retry_job(db_url, job_id)
    assert job.state == "available" and job.attempt == 0 and job.max_attempts == 3
    assert job.finalized_at is None and job.heartbeat_at is None and job.deadline_at is None
    assert abs((job.run_at - datetime.now(UTC)).total_seconds()) < 5
    assert job.errors == [{"error": "boom"}] and job.progress == {"percent": 40}  # history is kept
    assert job_row(db_url, job_id)["state"] == "available"


@pytest.mark.parametrize("state", ["cancelled", "retryable", "waiting_external"])
def test_retry_accepts_cancelled_retryable_and_waiting_jobs(db_url: str, state: str) -> None:
    job_id = job_in(db_url, state)
    if state == "waiting_external":
        with psycopg.connect(db_url, autocommit=True) as conn:
            conn.execute(
                "UPDATE awa.jobs SET callback_id = gen_random_uuid(), "
                "callback_timeout_at = now() + interval '1 h' WHERE id = %s",
                (job_id,),
            )
    job = admin.retry_job(db_url, job_id)
    assert (job.state, job.attempt, job.callback_id, job.callback_timeout_at) == ("available", 0, None, None)


@pytest.mark.parametrize("state", ["scheduled", "available", "running", "completed"])
def test_retry_rejects_jobs_that_are_not_finished_or_waiting(db_url: str, state: str) -> None:
    job_id = job_in(db_url, state)
    assert_rejected(db_url, InvalidState, lambda: admin.retry_job(db_url, job_id), match=f"it is {state}")
    with pytest.raises(InvalidState) as info:
        admin.retry_job(db_url, job_id)
    assert (info.value.job_id, info.value.state, info.value.action) == (job_id, state, "retry")
    assert "failed" in info.value.allowed


@pytest.mark.parametrize(
    "operation", [admin.retry_job, admin.cancel_job, admin.delete_job, admin.run_now], ids=lambda f: f.__name__
)
def test_single_job_operations_reject_unknown_ids_and_bad_values(db_url: str, operation: Callable) -> None:
    insert(db_url)
    assert_rejected(db_url, JobNotFound, lambda: operation(db_url, 424242), match="no job with id 424242")
    for bad in (0, -1, True, "1", 1.0, None, 2**63):
        assert_rejected(db_url, ValidationError, lambda bad=bad: operation(db_url, bad), match="job_id")


def test_retry_of_a_job_whose_unique_key_is_taken_raises_and_changes_nothing(db_url: str) -> None:
    old = insert(db_url, {"to": "a"}, unique=True)
    force(db_url, old, "cancelled")
    insert(db_url, {"to": "a"}, unique=True)  # a new job holds the key now
    assert_rejected(db_url, UniqueConflict, lambda: admin.retry_job(db_url, old))


# -- retry failed ------------------------------------------------------------------------------


def test_retry_failed_filters_by_kind_and_queue_and_counts(db_url: str) -> None:
    a = [job_in(db_url, "failed", kind="k1", queue="q1") for _ in range(3)]
    b = job_in(db_url, "failed", kind="k2", queue="q1")
    c = job_in(db_url, "failed", kind="k1", queue="q2")
    done = job_in(db_url, "completed", kind="k1", queue="q1")
    assert admin.retry_failed(db_url, kind="k1", queue="q1") == 3
    assert [job_state(db_url, i) for i in a] == ["available"] * 3
    assert job_state(db_url, b) == job_state(db_url, c) == "failed"
    assert admin.retry_failed(db_url, queue="q2") == 1 and job_state(db_url, c) == "available"
    assert admin.retry_failed(db_url) == 1 and job_state(db_url, b) == "available"
    assert admin.retry_failed(db_url) == 0
    assert job_state(db_url, done) == "completed"
    for bad in ({"kind": ""}, {"queue": "x" * 201}, {"kind": 3}):
        assert_rejected(db_url, ValidationError, lambda bad=bad: admin.retry_failed(db_url, **bad))


def test_retry_failed_leaves_jobs_whose_unique_key_is_held(db_url: str) -> None:
    held = job_in(db_url, "failed", args={"n": 1}, unique=True)
    insert(db_url, {"n": 1}, unique=True)  # holds the key
    twin = job_in(db_url, "failed", args={"n": 2}, unique=True)
    with psycopg.connect(db_url, autocommit=True) as conn:  # a second failed job with the same key
        conn.execute(
            "INSERT INTO awa.jobs (kind, args, state, unique_key, unique_states, finalized_at) "
            "SELECT kind, args, 'failed', unique_key, unique_states, now() FROM awa.jobs WHERE id = %s",
            (twin,),
        )
    plain = job_in(db_url, "failed", args={"n": 3})
    assert admin.retry_failed_report(db_url) == (2, 2)
    assert job_state(db_url, held) == "failed"
    assert job_state(db_url, twin) == "available"  # the oldest of the twins
    assert job_state(db_url, plain) == "available"


# -- cancel ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["scheduled", "available", "retryable", "waiting_external", "running"])
def test_cancel_applies_to_every_unfinished_state(db_url: str, state: str) -> None:
    job_id = job_in(db_url, state)
    job = admin.cancel_job(db_url, job_id)
    assert job.state == "cancelled" and job.finalized_at is not None
    assert job.heartbeat_at is None and job.deadline_at is None
    assert job.errors[-1]["type"] == "AdminCancel" and state in job.errors[-1]["error"]


@pytest.mark.parametrize("state", ["completed", "failed", "cancelled"])
def test_cancel_rejects_finished_jobs(db_url: str, state: str) -> None:
    job_id = job_in(db_url, state)
    assert_rejected(db_url, InvalidState, lambda: admin.cancel_job(db_url, job_id), match=f"it is {state}")


async def test_cancelling_a_running_job_is_observed_by_its_handler_and_fences_its_completion(
    make_client, db_url: str
) -> None:
    """A sync handler polls job.cancelled; an async one ignores it and returns late: both are fenced."""
    client = make_client()
    observed: list[tuple[str, int, bool]] = []
    release = asyncio.Event()

    @client.task("cooperative")
    def cooperative(job):
        deadline = time.monotonic() + 10
        while not job.cancelled and time.monotonic() < deadline:
            time.sleep(0.01)
        observed.append(("cooperative", job.id, job.cancelled))

    @client.task("stubborn")
    async def stubborn(job):
        await release.wait()  # ignores the cancellation, then "completes"
        observed.append(("stubborn", job.id, job.cancelled))

    later: list[int] = []

    @client.task("later")
    async def later_job(job):
        later.append(job.id)

    a = insert(db_url, kind="cooperative")
    b = insert(db_url, kind="stubborn")
    await client.start([QueueConfig("default", max_workers=4, poll_interval=0.05)])
    await wait_until(lambda: job_state(db_url, a) == "running" and job_state(db_url, b) == "running")

    assert admin.cancel_job(db_url, a).state == "cancelled"
    assert admin.cancel_job(db_url, b).state == "cancelled"
    await wait_until(lambda: ("cooperative", a, True) in observed)
    await wait_until(lambda: client.runtime.inflight.get(b) is None or client.runtime.inflight[b].cancelled)
    release.set()
    await wait_until(lambda: ("stubborn", b, True) in observed)
    await wait_until(lambda: not client.runtime.inflight)  # both outcomes were written or found stale
    for job_id in (a, b):
        row = job_row(db_url, job_id)
        assert row["state"] == "cancelled" and row["attempt"] == 1, row
    # A job enqueued after the cancellations is claimed and runs; the cancelled ones do not run again.
    sentinel = insert(db_url, kind="later")
    await wait_until(lambda: sentinel in later)
    assert sorted(o[0] for o in observed) == ["cooperative", "stubborn"]


# -- run now, delete ---------------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["scheduled", "retryable"])
def test_run_now_makes_a_waiting_job_available_and_wakes_workers(db_url: str, state: str) -> None:
    job_id = insert(db_url, queue="later", run_at=datetime.now(UTC) + timedelta(hours=1))
    if state == "retryable":
        force(db_url, job_id, "retryable")
    with psycopg.connect(db_url, autocommit=True) as listener:
        listener.execute("LISTEN awa_jobs")
        job = admin.run_now(db_url, job_id)
        notices = [n.payload for n in listener.notifies(timeout=2, stop_after=1)]
    assert job.state == "available" and abs((job.run_at - datetime.now(UTC)).total_seconds()) < 5
    assert notices == ["later"]


@pytest.mark.parametrize("state", ["available", "running", "completed", "failed", "cancelled", "waiting_external"])
def test_run_now_rejects_other_states(db_url: str, state: str) -> None:
    job_id = job_in(db_url, state)
    assert_rejected(db_url, InvalidState, lambda: admin.run_now(db_url, job_id), match=f"it is {state}")


@pytest.mark.parametrize("state", ["scheduled", "available", "completed", "retryable", "failed", "cancelled"])
def test_delete_removes_a_job_that_is_not_running(db_url: str, state: str) -> None:
    job_id = job_in(db_url, state, ordering_key="k")
    deleted = admin.delete_job(db_url, job_id)
    assert (deleted.id, deleted.state) == (job_id, state)
    assert job_row(db_url, job_id) == {}
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM awa.job_ordering_keys").fetchone()[0] == 0


def test_delete_refuses_a_running_job(db_url: str) -> None:
    job_id = job_in(db_url, "running")
    assert_rejected(
        db_url, InvalidState, lambda: admin.delete_job(db_url, job_id), match="it is running; delete applies"
    )


# -- cancel by unique key -------------------------------------------------------------------------------


def test_cancel_by_unique_key_computes_the_key_like_the_bridge(db_url: str) -> None:
    plain = insert(db_url, {"to": "a@b.c"}, kind="send_email", unique=True)
    by_queue = insert(db_url, {"to": "x"}, kind="send_email", queue="mail", unique={"by_queue": True})
    by_period = insert(db_url, {"to": "x"}, kind="digest", unique={"by_period": 202611})
    no_args = insert(db_url, {"any": 1}, kind="nightly", unique={"by_args": False})
    typed = insert(db_url, SendInvoice(7), unique=True)

    assert admin.cancel_by_unique_key(db_url, "send_email", args={"to": "a@b.c"}).id == plain
    assert admin.cancel_by_unique_key(db_url, "send_email", queue="mail", args={"to": "x"}).id == by_queue
    with pytest.raises(JobNotFound, match="no job holds unique key"):
        admin.cancel_by_unique_key(db_url, "digest", args={"to": "x"}, by_period=202612)
    assert admin.cancel_by_unique_key(db_url, "digest", args={"to": "x"}, by_period=202611).id == by_period
    assert admin.cancel_by_unique_key(db_url, "nightly").id == no_args
    assert admin.cancel_by_unique_key(db_url, None, args=SendInvoice(7)).id == typed
    assert {job_state(db_url, i) for i in (plain, by_queue, by_period, no_args, typed)} == {"cancelled"}


def test_cancel_by_unique_key_errors(db_url: str) -> None:
    job_id = insert(db_url, {"n": 1}, kind="k", unique=True)
    force(db_url, job_id, "completed")  # completed still holds the key by default
    assert_rejected(
        db_url, InvalidState, lambda: admin.cancel_by_unique_key(db_url, "k", args={"n": 1}), match="it is completed"
    )
    assert_rejected(db_url, JobNotFound, lambda: admin.cancel_by_unique_key(db_url, "k", args={"n": 2}))
    assert_rejected(db_url, ValidationError, lambda: admin.cancel_by_unique_key(db_url, ""), match="kind")
    assert_rejected(db_url, ValidationError, lambda: admin.cancel_by_unique_key(db_url, None), match="kind")
    assert_rejected(
        db_url, ValidationError, lambda: admin.cancel_by_unique_key(db_url, "k", by_period="x"), match="by_period"
    )
    assert_rejected(
        db_url, ValidationError, lambda: admin.cancel_by_unique_key(db_url, "k", args={"a": "\x00"}), match="args"
    )
    assert_rejected(db_url, ValidationError, lambda: admin.cancel_by_unique_key(db_url, "k", args=[1]), match="args")


# -- queue statistics ------------------------------------------------------------------------------------


def test_queue_stats_counts_states_lag_and_recent_completions(db_url: str) -> None:
    for state, count in (("available", 3), ("running", 2), ("scheduled", 1), ("retryable", 1), ("failed", 2)):
        for _ in range(count):
            job_in(db_url, state, queue="alpha")
    job_in(db_url, "waiting_external", queue="alpha")
    recent = [job_in(db_url, "completed", queue="alpha") for _ in range(2)]
    old = job_in(db_url, "completed", queue="alpha")
    job_in(db_url, "cancelled", queue="alpha")
    job_in(db_url, "available", queue="beta")
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs SET finalized_at = now() - interval '2 hours' WHERE id = %s", (old,))
        conn.execute("UPDATE awa.jobs SET run_at = now() - interval '90 seconds' WHERE queue = 'beta'")
    admin.pause_queue(db_url, "idle", paused_by="ops")  # a queue with no jobs yet

    stats = {s.queue: s for s in admin.queue_stats(db_url)}
    assert list(stats) == ["alpha", "beta", "idle"]
    alpha = stats["alpha"]
    assert (alpha.available, alpha.running, alpha.scheduled, alpha.retryable) == (3, 2, 1, 1)
    assert (alpha.waiting_external, alpha.failed, alpha.completed_last_hour) == (1, 2, len(recent))
    assert alpha.total_queued == 5 and not alpha.paused
    assert 0 <= alpha.lag_seconds < 30
    assert 89 <= stats["beta"].lag_seconds < 120
    assert stats["idle"].paused and stats["idle"].lag_seconds is None and stats["idle"].available == 0

    [only] = admin.queue_stats(db_url, "alpha")
    assert only == alpha or (only.queue, only.available, only.completed_last_hour) == ("alpha", 3, 2)
    [unknown] = admin.queue_stats(db_url, "nobody-uses-this")
    assert (unknown.available, unknown.failed, unknown.completed_last_hour, unknown.lag_seconds) == (0, 0, 0, None)
    for bad in ("", "x" * 201, 5):
        with pytest.raises(ValidationError, match="queue"):
            admin.queue_stats(db_url, bad)


def test_queue_stats_on_an_empty_database(db_url: str) -> None:
    assert admin.queue_stats(db_url) == []


def test_queue_stats_plan_reads_indexes_not_the_history(db_url: str) -> None:
    """Structural, not timed: with 60,000 finished jobs the statement touches a small fraction of the
    table, never scans it sequentially, and is not estimated expensive enough to be JIT-compiled.
    (Timings on a million rows: benchmarks/bench_admin_stats.py.)"""
    from awa_bridge.sql import QUERIES

    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.jobs (kind, queue, state, attempt, finalized_at) "
            "SELECT 'old', 'q' || (g % 4), 'completed', 1, now() - (g % 2880) * interval '1 minute' "
            "FROM generate_series(1, 60000) AS g"
        )
        conn.execute("INSERT INTO awa.jobs (kind, queue) SELECT 'live', 'q' || (g % 4) FROM generate_series(1, 40) g")
        conn.execute("VACUUM (ANALYZE) awa.jobs")
        pages = conn.execute("SELECT relpages FROM pg_class WHERE oid = 'awa.jobs'::regclass").fetchone()[0]
        for queue in (None, "q1"):
            sql = QUERIES["queue_stats"].pyformat
            plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", {"queue": queue}).fetchone()[0][0]
            buffers = plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"]
            assert buffers < pages / 4, (buffers, pages)
            scans = [(n["Node Type"], n.get("Relation Name")) for n in _plan_nodes(plan["Plan"])]
            assert ("Seq Scan", "jobs") not in scans, scans
            assert "JIT" not in plan and plan["Plan"]["Total Cost"] < 100_000
    stats = {s.queue: s for s in admin.queue_stats(db_url)}
    assert sum(s.completed_last_hour for s in stats.values()) == sum(g % 2880 < 60 for g in range(1, 60001))
    assert [s.available for s in stats.values()] == [10, 10, 10, 10]


def _plan_nodes(node: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield node
    for child in node.get("Plans", []):
        yield from _plan_nodes(child)


# -- connections the bridge supports ----------------------------------------------------------------------


def test_operations_run_in_the_callers_transaction_on_bridge_connections(db_url: str, django_setup: None) -> None:
    from django.db import connection as django_connection
    from django.db import transaction
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    a, b, c = (job_in(db_url, "failed") for _ in range(3))
    with psycopg.connect(db_url) as conn:  # psycopg, rolled back: nothing happened
        assert admin.retry_job(conn, a).state == "available"
        conn.rollback()
    assert job_state(db_url, a) == "failed"

    engine = create_engine(with_driver(db_url, "psycopg"))
    try:
        with Session(engine) as session:
            assert admin.retry_job(session, a).state == "available"
            assert [s.failed for s in admin.queue_stats(session)] == [2]  # sees its own change
            session.commit()
    finally:
        engine.dispose()
    assert job_state(db_url, a) == "available"

    with transaction.atomic():
        assert admin.cancel_job(django_connection, a).state == "cancelled"
        assert admin.retry_failed(django_connection) == 2
    django_connection.close()
    assert [job_state(db_url, i) for i in (a, b, c)] == ["cancelled", "available", "available"]


async def test_async_twins_on_asyncpg_and_psycopg(db_url: str) -> None:
    import asyncpg

    job_id = job_in(db_url, "scheduled")
    conn = await asyncpg.connect(db_url)
    try:
        assert (await admin.run_now_async(conn, job_id)).state == "available"
        assert (await admin.cancel_job_async(conn, job_id)).state == "cancelled"
        with pytest.raises(InvalidState):
            await admin.cancel_job_async(conn, job_id)
        assert (await admin.retry_job_async(conn, job_id)).attempt == 0
        assert [s.available for s in await admin.queue_stats_async(conn)] == [1]
    finally:
        await conn.close()
    async with await psycopg.AsyncConnection.connect(db_url, autocommit=True) as aconn:
        assert await admin.retry_failed_async(aconn) == 0
        assert (await admin.delete_job_async(aconn, job_id)).id == job_id
        with pytest.raises(JobNotFound):
            await admin.delete_job_async(db_url, job_id)
    assert (await admin.queue_stats_async(db_url)) == []


# -- R9: concurrent mutations on one job ----------------------------------------------------------------------


def race(url: str, job_id: int, operations: list[Callable[[Any, int], Any]]) -> list[Any]:
    """Run the operations at the same instant on their own connections.

    A third connection holds the job's row lock until every operation is
    waiting for it, so they really contend; then it lets go. Each result is
    the returned job or the exception raised.
    """
    results: list[Any] = [None] * len(operations)
    names = [f"r9-{i}" for i in range(len(operations))]
    barrier = threading.Barrier(len(operations) + 1)

    def run(index: int) -> None:
        with psycopg.connect(url, autocommit=True, application_name=names[index]) as conn:
            barrier.wait()
            try:
                results[index] = operations[index](conn, job_id)
            except Exception as exc:
                results[index] = exc

    with psycopg.connect(url) as blocker, psycopg.connect(url, autocommit=True) as probe:
        blocker.execute("SELECT 1 FROM awa.jobs WHERE id = %s FOR UPDATE", (job_id,))
        threads = [threading.Thread(target=run, args=(i,)) for i in range(len(operations))]
        for thread in threads:
            thread.start()
        barrier.wait()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            waiting = probe.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = ANY(%s) AND wait_event_type = 'Lock'",
                (names,),
            ).fetchone()[0]
            if waiting == len(operations):
                break
            time.sleep(0.01)
        else:
            raise AssertionError("the operations never all waited on the row lock")
        blocker.commit()
        for thread in threads:
            thread.join(10)
    return results


@pytest.mark.parametrize(
    ("state", "operation", "loser"),
    [
        ("running", admin.cancel_job, InvalidState),
        ("failed", admin.retry_job, InvalidState),
        ("scheduled", admin.run_now, InvalidState),
        ("completed", admin.delete_job, JobNotFound),
    ],
    ids=["cancel-twice", "retry-twice", "run-now-twice", "delete-twice"],
)
def test_r9_the_same_operation_twice_at_once_succeeds_exactly_once(
    db_url: str, state: str, operation: Callable, loser: type[Exception]
) -> None:
    for _ in range(3):
        job_id = job_in(db_url, state)
        results = race(db_url, job_id, [operation, operation])
        winners = [r for r in results if isinstance(r, awa_bridge.Job)]
        losers = [r for r in results if isinstance(r, Exception)]
        assert len(winners) == 1 and len(losers) == 1, results
        assert isinstance(losers[0], loser), losers
        row = job_row(db_url, job_id)
        assert row.get("state") == (None if operation is admin.delete_job else winners[0].state)


def test_r9_cancel_and_retry_at_once_are_linearizable(db_url: str) -> None:
    """Cancel and retry of a running job: the results are those of one serial order, and so is the row.

    cancel first: both succeed (running → cancelled → available); retry first: retry finds it running
    (InvalidState), then cancel succeeds. Never both failing, never a state no order explains.
    """
    orders = set()
    for _ in range(6):
        job_id = job_in(db_url, "running")
        cancelled, retried = race(db_url, job_id, [admin.cancel_job, admin.retry_job])
        assert isinstance(cancelled, awa_bridge.Job) and cancelled.state == "cancelled", cancelled
        row = job_row(db_url, job_id)
        if isinstance(retried, awa_bridge.Job):
            orders.add("cancel, retry")
            assert retried.state == "available" and row["state"] == "available" and row["attempt"] == 0
        else:
            orders.add("retry, cancel")
            assert isinstance(retried, InvalidState) and retried.state == "running"
            assert row["state"] == "cancelled"
    assert orders  # which orders occurred is up to the scheduler


async def test_r9_cancel_racing_the_workers_completion_has_one_winner(make_client, db_url: str) -> None:
    """A handler finishing while an operator cancels: either the completion or the cancel wins, never both."""
    client = make_client()
    go = threading.Event()

    @client.task("finisher")
    def finisher(job):
        go.wait(10)

    outcomes = []
    await client.start([QueueConfig("default", max_workers=4, poll_interval=0.05)])
    for _ in range(4):
        job_id = insert(db_url, kind="finisher")
        await wait_until(lambda job_id=job_id: job_state(db_url, job_id) == "running")
        go.set()  # the handler returns: the completer's batched write races the cancel below
        await asyncio.sleep(random.uniform(0, 0.004))
        try:
            await asyncio.to_thread(admin.cancel_job, db_url, job_id)
            won = "cancel"
        except InvalidState as exc:
            assert exc.state == "completed"
            won = "completion"
        await wait_until(lambda job_id=job_id: client.runtime.inflight.get(job_id) is None)
        assert job_state(db_url, job_id) == ("cancelled" if won == "cancel" else "completed")
        outcomes.append(won)
        go.clear()
    assert len(outcomes) == 4


# -- CLI --------------------------------------------------------------------------------------------------------------


@pytest.fixture
def run_cli(db_url: str, capsys: pytest.CaptureFixture[str]) -> Iterator[Callable[..., tuple[int, str, str]]]:
    def run(*argv: str) -> tuple[int, str, str]:
        code = cli.main([*argv, "--database-url", db_url])
        out, err = capsys.readouterr()
        return code, out, err

    yield run


def test_cli_job_actions(run_cli, db_url: str) -> None:
    job_id = job_in(db_url, "failed", kind="cli_job", queue="cliq")
    other = job_in(db_url, "failed", kind="cli_job", queue="cliq")
    code, out, _ = run_cli("jobs", "retry", str(job_id))
    assert code == 0 and f"job {job_id} (cli_job, queue cliq): available now" in out
    code, _, err = run_cli("jobs", "run-now", str(job_id))
    assert code == 2 and "it is available" in err
    code, out, _ = run_cli("jobs", "cancel", str(job_id))
    assert code == 0 and out == f"job {job_id} (cli_job, queue cliq): cancelled\n"  # no handler to tell
    running = job_in(db_url, "running", kind="cli_job", queue="cliq")
    code, out, _ = run_cli("jobs", "cancel", str(running))
    assert code == 0 and "a running handler sees job.cancelled at its next heartbeat" in out
    code, _, err = run_cli("jobs", "cancel", str(job_id))
    assert code == 2 and f"cannot cancel job {job_id}: it is cancelled" in err
    code, out, _ = run_cli("jobs", "retry-failed", "--queue", "cliq")
    assert code == 0 and out.startswith("retried 1 failed job(s)") and job_state(db_url, other) == "available"
    code, out, _ = run_cli("jobs", "delete", str(job_id))
    assert code == 0 and "deleted (it was cancelled)" in out
    code, _, err = run_cli("jobs", "delete", str(job_id))
    assert code == 2 and f"no job with id {job_id}" in err
    code, _, err = run_cli("jobs", "retry")
    assert code == 2 and "needs a job id" in err
    code, _, err = run_cli("jobs", "retry", "-4")
    assert code == 2 and "must be a job id, an integer from 1" in err
    with pytest.raises(SystemExit) as exit_info:
        run_cli("jobs", "retry", "abc")
    assert exit_info.value.code == 2
    with pytest.raises(SystemExit):
        run_cli("jobs", "explode", "1")
    code, out, _ = run_cli("jobs")  # listing still the default
    assert code == 0 and "cli_job" in out and str(other) in out
    code, out, _ = run_cli("jobs", "--state", "available")
    assert code == 0 and str(other) in out


def test_cli_queue_actions(run_cli, db_url: str) -> None:
    job_in(db_url, "available", queue="mail")
    code, out, _ = run_cli("queues", "pause", "mail", "--paused-by", "alice")
    assert code == 0 and "queue mail paused" in out
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT paused, paused_by FROM awa.queue_meta").fetchone() == (True, "alice")
    code, out, _ = run_cli("queues", "stats")
    header, row = out.splitlines()
    assert "completed_last_hour" in header and row.split()[:3] == ["mail", "yes", "1"]
    code, out, _ = run_cli("queues")  # the listing is still the default
    assert code == 0 and "mail" in out
    code, out, _ = run_cli("queues", "resume", "mail")
    assert code == 0 and "resumed" in out
    code, _, err = run_cli("queues", "pause")
    assert code == 2 and "needs a queue name" in err
    code, _, err = run_cli("queues", "stats", "")
    assert code == 2 and "queue" in err
