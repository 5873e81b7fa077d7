"""run_lease fencing and claim races against real PostgreSQL (docs/reliability.md R1-R6, R24).

These drive the runtime's own SQL and functions directly, with faults
injected by backdating timestamps, so each interleaving is deterministic.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import asyncpg
import psycopg
import pytest

import awa_bridge
from awa_bridge.drivers.asyncpg import as_asyncpg
from awa_bridge.sql import QUERIES
from awa_bridge.worker import Client, RetryAfter, Snooze
from awa_bridge.worker.completer import finalize_one
from awa_bridge.worker.context import JobContext
from awa_bridge.worker.maintenance.promote import promote_due
from awa_bridge.worker.maintenance.rescue import rescue_expired_deadlines, rescue_stale_heartbeats
from awa_bridge.worker.maintenance.services import RescueStaleHeartbeats, View
from awa_bridge.worker.outcomes import Outcome
from awa_bridge.worker.producer import claim_after

from .waiting import FAST, job_row, job_state, wait_until

#: Who claims in the tests that run the claim statement themselves (awa.job_attempts).
CLAIMER = {"instance_id": uuid.uuid4(), "worker": "test-host/1", **claim_after()}


async def claim(conn: asyncpg.Connection, queue: str = "default", limit: int = 1, deadline: float = 300) -> list[Any]:
    q = QUERIES["claim_jobs"]
    return list(
        await conn.fetch(
            q.numeric,
            *q.positional({"queue": queue, "limit": limit, "deadline_seconds": deadline, **CLAIMER}),
        )
    )


def context(row: Any) -> JobContext:
    return JobContext(
        id=row["id"],
        kind=row["kind"],
        queue="default",  # the claimer knows its queue (the claim does not return it)
        args=None,
        raw_args=json.loads(row["args"]),
        attempt=row["attempt"],
        max_attempts=row["max_attempts"],
        priority=row["priority"],
        metadata={},
        tags=[],
        run_lease=row["run_lease"],
        progress=None,
        deadline_at=datetime.fromtimestamp(row["deadline_epoch"], UTC),
    )


async def heartbeat(conn: asyncpg.Connection, job_id: int, lease: int) -> bool:
    q = QUERIES["heartbeat_jobs"]
    return bool(await conn.fetch(q.numeric, *q.positional({"ids": [job_id], "leases": [lease]})))


async def backdate_heartbeat(conn: asyncpg.Connection, job_id: int) -> None:
    await conn.execute("UPDATE awa.jobs SET heartbeat_at = now() - interval '1 hour' WHERE id = $1", job_id)


async def enqueue(conn: asyncpg.Connection, **opts: Any) -> int:
    return (await awa_bridge.insert_job(conn, {"n": 1}, kind="fenced", **opts)).id


async def test_r1_stale_completion_after_rescue_is_rejected(conn: asyncpg.Connection, db_url: str) -> None:
    job_id = await enqueue(conn)
    (a,) = await claim(conn)
    await backdate_heartbeat(conn, job_id)
    rescued = await rescue_stale_heartbeats(conn, staleness=90)
    assert [r["id"] for r in rescued] == [job_id]
    await promote_due(conn)
    (b,) = await claim(conn)
    assert b["run_lease"] == a["run_lease"] + 1 and b["attempt"] == 2

    assert await finalize_one(conn, context(a), Outcome("completed")) is False
    row = job_row(db_url, job_id)
    assert (row["state"], row["attempt"], row["run_lease"]) == ("running", 2, b["run_lease"])
    assert "heartbeat stale" in row["errors"][0]["error"]

    assert await finalize_one(conn, context(b), Outcome("completed")) is True
    assert job_state(db_url, job_id) == "completed"


async def test_the_rescuing_process_never_rescues_the_attempts_it_holds_itself(
    conn: asyncpg.Connection, db_url: str
) -> None:
    """Three stale attempts; the rescuer holds the first (its lease) and a past lease of the second.

    Only the held attempt is left: the second's current attempt (a lease the
    rescuer does not hold) and the third are rescued.
    """
    ids = [await enqueue(conn) for _ in range(3)]
    rows = await claim(conn, limit=3)
    lease = {r["id"]: r["run_lease"] for r in rows}
    for job_id in ids:
        await backdate_heartbeat(conn, job_id)
    held = [(ids[0], lease[ids[0]]), (ids[1], lease[ids[1]] - 1)]
    rescued = await rescue_stale_heartbeats(conn, staleness=90, held=held)
    assert sorted(r["id"] for r in rescued) == ids[1:]
    assert job_state(db_url, ids[0]) == "running"
    assert [r["id"] for r in await rescue_stale_heartbeats(conn, staleness=90)] == [ids[0]]


async def test_a_heartbeat_rescue_that_reaches_the_server_long_after_the_leaders_check_rescues_nothing(
    conn: asyncpg.Connection, db_url: str
) -> None:
    """The leader checks its view (no gap of its own), then stalls before its statement reaches the
    server: frozen there, or, here, its held-attempts snapshot slow to come (0.8 s, past the view's
    0.625 s). The statement refuses on the server's clock and rescues nothing; the leader's next
    check sees the gap and waits a window; after it the stale attempt is rescued."""
    job_id = await enqueue(conn)
    await claim(conn)
    await backdate_heartbeat(conn, job_id)
    db = as_asyncpg(conn)
    view = View(staleness=1.0, heartbeat_interval=0.25)
    assert view.max_gap == 0.625

    async def fresh() -> None:
        while not view.step():
            await asyncio.sleep(0.05)

    def slow_snapshot() -> list[tuple[int, int]]:
        time.sleep(0.8)  # the maintenance thread stuck between its check and the statement
        return []

    await fresh()
    stalled = RescueStaleHeartbeats(0.1, lambda rows: None, 1.0, held=slow_snapshot)
    assert await stalled.run_pass(db, view) == 0
    assert job_state(db_url, job_id) == "running"

    rescue = RescueStaleHeartbeats(0.1, lambda rows: None, 1.0, held=list)
    assert await rescue.run_pass(db, view) == 0, "the gap was not seen"
    assert rescue.due == view.fresh_at
    await fresh()
    assert await rescue.run_pass(db, view) == 1
    row = job_row(db_url, job_id)
    assert (row["state"], row["errors"][-1]["type"]) == ("available", "HeartbeatStale")  # promoted at once


async def test_two_stalls_around_the_leaders_check_count_together(conn: asyncpg.Connection, db_url: str) -> None:
    """0.4 s before the check (its step lets that pass: the view's gap is 0.625 s) and 0.4 s after it,
    before the statement: 0.8 s in all since the last step, and the statement rescues nothing."""
    job_id = await enqueue(conn)
    await claim(conn)
    await backdate_heartbeat(conn, job_id)
    view = View(staleness=1.0, heartbeat_interval=0.25)
    while not view.step():
        await asyncio.sleep(0.05)

    def slow_snapshot() -> list[tuple[int, int]]:
        time.sleep(0.4)
        return []

    time.sleep(0.4)
    stalled = RescueStaleHeartbeats(0.1, lambda rows: None, 1.0, held=slow_snapshot)
    assert await stalled.run_pass(as_asyncpg(conn), view) == 0
    assert view.fresh_at <= view.seen, "the check saw a gap of its own: no test of the sum"
    assert job_state(db_url, job_id) == "running"


@pytest.mark.parametrize("change", ["cancel", "snooze", "retry_after"])
async def test_r2_stale_writes_after_state_change_are_noops(conn: asyncpg.Connection, db_url: str, change: str) -> None:
    job_id = await enqueue(conn)
    (a,) = await claim(conn)
    ctx = context(a)
    if change == "cancel":  # an operator cancels the running job
        await conn.execute("UPDATE awa.jobs SET state = 'cancelled', finalized_at = now() WHERE id = $1", job_id)
    else:
        outcome_exc = Snooze(60) if change == "snooze" else RetryAfter(60)
        from awa_bridge.worker.outcomes import outcome_of_exception

        assert await finalize_one(conn, ctx, outcome_of_exception(outcome_exc, 1, 25)) is True
    before = job_row(db_url, job_id)
    assert await finalize_one(conn, ctx, Outcome("completed")) is False
    assert await heartbeat(conn, job_id, a["run_lease"]) is False
    after = job_row(db_url, job_id)
    assert (after["state"], after["run_at"], after["finalized_at"]) == (
        before["state"],
        before["run_at"],
        before["finalized_at"],
    )
    assert after["heartbeat_at"] == before["heartbeat_at"]


async def test_r3_stale_heartbeat_cannot_keep_reclaimed_attempt_alive(conn: asyncpg.Connection, db_url: str) -> None:
    job_id = await enqueue(conn)
    (a,) = await claim(conn)
    await backdate_heartbeat(conn, job_id)
    await rescue_stale_heartbeats(conn, staleness=90)
    await promote_due(conn)
    (b,) = await claim(conn)
    await conn.execute("UPDATE awa.jobs SET heartbeat_at = now() - interval '10 seconds' WHERE id = $1", job_id)
    before = job_row(db_url, job_id)["heartbeat_at"]
    assert await heartbeat(conn, job_id, a["run_lease"]) is False
    assert job_row(db_url, job_id)["heartbeat_at"] == before
    assert await heartbeat(conn, job_id, b["run_lease"]) is True
    assert job_row(db_url, job_id)["heartbeat_at"] > before


async def test_r4_rescue_cannot_overwrite_a_completion(conn: asyncpg.Connection, db_url: str) -> None:
    # Order 1: the completion holds the row (uncommitted) while rescue runs: rescue skips it.
    job_id = await enqueue(conn)
    (a,) = await claim(conn)
    await backdate_heartbeat(conn, job_id)
    completer = await asyncpg.connect(db_url)
    try:
        tx = completer.transaction()
        await tx.start()
        assert await finalize_one(completer, context(a), Outcome("completed")) is True
        rescued = await asyncio.wait_for(rescue_stale_heartbeats(conn, staleness=90), timeout=5)
        assert rescued == [], "rescue must skip a row locked by a completion, without blocking"
        await tx.commit()
    finally:
        await completer.close()
    done = job_row(db_url, job_id)
    assert done["state"] == "completed"
    assert await rescue_stale_heartbeats(conn, staleness=90) == []
    again = job_row(db_url, job_id)
    assert (again["state"], again["errors"], again["finalized_at"]) == ("completed", [], done["finalized_at"])

    # Order 2: rescue commits first; the completion then changes nothing.
    job2 = await enqueue(conn)
    (c,) = await claim(conn)
    await backdate_heartbeat(conn, job2)
    assert len(await rescue_stale_heartbeats(conn, staleness=90)) == 1
    assert await finalize_one(conn, context(c), Outcome("completed")) is False
    row = job_row(db_url, job2)
    assert row["state"] == "retryable" and len(row["errors"]) == 1


async def test_deadline_rescue_spends_the_attempt_and_exhausts(conn: asyncpg.Connection, db_url: str) -> None:
    job_id = await enqueue(conn, max_attempts=2)
    for attempt in (1, 2):
        (row,) = await claim(conn)
        assert row["attempt"] == attempt
        await conn.execute("UPDATE awa.jobs SET deadline_at = now() - interval '1 second' WHERE id = $1", job_id)
        (rescued,) = await rescue_expired_deadlines(conn)
        await promote_due(conn)
    assert rescued["state"] == "failed"
    final = job_row(db_url, job_id)
    assert final["state"] == "failed" and final["finalized_at"] is not None
    assert [e["type"] for e in final["errors"]] == ["DeadlineExceeded", "DeadlineExceeded"]


def test_claim_sql_uses_a_cte_fence_and_rechecks_state() -> None:
    """R6 (static): candidates in a CTE with SKIP LOCKED; the UPDATE re-checks availability."""
    sql = QUERIES["claim_jobs"].pyformat
    assert sql.lstrip().startswith("WITH candidates AS (")
    assert "FOR UPDATE SKIP LOCKED" in sql
    assert "WHERE j.id = ANY(ARRAY(SELECT id FROM candidates)) AND j.state::text = 'available'" in sql
    assert "ORDER BY priority, run_at, id" in sql


@pytest.mark.parametrize(
    ("n", "claimers", "k"),
    [
        (1000, 8, 7),
        pytest.param(10_000, 16, 7, marks=pytest.mark.slow, id="r6-size"),
    ],
)
def test_r5_r6_concurrent_claimers_never_double_claim(db_url: str, n: int, claimers: int, k: int) -> None:
    """``claimers`` claimers (asyncpg and psycopg, half each) race over ``n`` jobs with LIMIT k: a
    quick size, and R6's 10,000 jobs and 16 claimers."""
    with psycopg.connect(db_url) as pg:
        awa_bridge.insert_many_sync(pg, [{"i": i} for i in range(n)], kind="race")
        pg.commit()
    results: list[tuple[int, int, int]] = []
    oversized: list[int] = []
    lock = threading.Lock()
    barrier = threading.Barrier(claimers)
    q = QUERIES["claim_jobs"]
    params = {"queue": "default", "limit": k, "deadline_seconds": 300.0, **CLAIMER}

    def psycopg_claimer() -> None:
        with psycopg.connect(db_url, autocommit=True) as c:
            barrier.wait()
            while rows := c.execute(q.pyformat, params).fetchall():
                with lock:
                    oversized.extend([len(rows)] if len(rows) > k else [])
                    results.extend((r[0], r[6], r[4]) for r in rows)  # id, run_lease, attempt

    def asyncpg_claimer() -> None:
        async def run() -> None:
            c = await asyncpg.connect(db_url)
            barrier.wait()
            try:
                while rows := await c.fetch(q.numeric, *q.positional(params)):
                    with lock:
                        oversized.extend([len(rows)] if len(rows) > k else [])
                        results.extend((r["id"], r["run_lease"], r["attempt"]) for r in rows)
            finally:
                await c.close()

        asyncio.run(run())

    threads = [threading.Thread(target=psycopg_claimer if i % 2 else asyncpg_claimer) for i in range(claimers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=240)  # under pytest-timeout's 300 s, so that this message is what a hang shows
    assert not any(t.is_alive() for t in threads), "a claimer was still claiming after 240 s"
    assert oversized == []
    assert len(results) == n
    assert len({(job_id, lease) for job_id, lease, _ in results}) == n
    assert len({job_id for job_id, _, _ in results}) == n
    assert {attempt for _, _, attempt in results} == {1}
    with psycopg.connect(db_url) as pg:
        assert pg.execute("SELECT count(*) FROM awa.jobs WHERE state <> 'running'").fetchone()[0] == 0
        assert pg.execute("SELECT count(*) FROM awa.jobs WHERE attempt > max_attempts").fetchone()[0] == 0


async def test_r24_transactional_completion_loses_to_rescue(db_url: str) -> None:
    """The handler's write and the completion share a transaction; rescue wins first → both roll back."""
    with psycopg.connect(db_url, autocommit=True) as pg:
        pg.execute("DROP TABLE IF EXISTS t_effects")
        pg.execute("CREATE TABLE t_effects (job_id bigint NOT NULL)")
    # No maintenance in this worker, and slow heartbeats: the test plays the rescuer itself.
    client = Client(db_url, **{**FAST, "maintenance": False, "heartbeat_interval": 30, "heartbeat_staleness": 90})
    first_attempt_inside = asyncio.Event()
    release_first = asyncio.Event()

    @client.task("tx_effect", transactional=True)
    async def tx_effect(job):
        await job.conn.execute("INSERT INTO t_effects (job_id) VALUES ($1)", job.id)
        if job.attempt == 1:
            first_attempt_inside.set()
            await release_first.wait()

    with psycopg.connect(db_url, autocommit=True) as pg:
        job_id = awa_bridge.insert_job_sync(pg, {}, kind="tx_effect").id
    await client.start(["default:2"])
    try:
        await asyncio.wait_for(first_attempt_inside.wait(), 10)
        rescuer = await asyncpg.connect(db_url)
        try:
            await backdate_heartbeat(rescuer, job_id)
            assert len(await rescue_stale_heartbeats(rescuer, staleness=90)) == 1
            await promote_due(rescuer)
        finally:
            await rescuer.close()
        await wait_until(lambda: job_row(db_url, job_id)["attempt"] == 2)
        release_first.set()
        await wait_until(lambda: job_state(db_url, job_id) == "completed")
    finally:
        await client.shutdown(timeout=2)
    with psycopg.connect(db_url) as pg:
        effects = pg.execute("SELECT job_id FROM t_effects").fetchall()
    assert effects == [(job_id,)], "exactly one effect: attempt 1's write rolled back with its stale completion"


async def test_r30_rescue_with_unique_conflicts_cancels_the_superseded_attempt(
    conn: asyncpg.Connection, db_url: str
) -> None:
    """A unique job that gave up its key while running is cancelled, not allowed to break the batch."""
    mask = {"states": ["scheduled", "available", "retryable"]}  # 'running' not enforced
    superseded = (await awa_bridge.insert_job(conn, {"order": 1}, kind="charge", queue="r30", unique=mask)).id
    (a,) = await claim(conn, queue="r30")
    assert a["id"] == superseded
    holder = (await awa_bridge.insert_job(conn, {"order": 1}, kind="charge", queue="r30-other", unique=mask)).id
    innocent = (await awa_bridge.insert_job(conn, {"order": 2}, kind="charge", queue="r30")).id
    (c,) = await claim(conn, queue="r30")
    assert c["id"] == innocent
    for job_id in (superseded, innocent):
        await backdate_heartbeat(conn, job_id)

    rescued = {r["id"]: r["state"] for r in await rescue_stale_heartbeats(conn, staleness=90)}
    assert rescued == {superseded: "cancelled", innocent: "retryable"}
    row = job_row(db_url, superseded)
    assert f"superseded: job {holder} holds its unique key" in row["errors"][0]["error"]
    assert job_state(db_url, holder) == "available"
    assert await rescue_stale_heartbeats(conn, staleness=90) == []


async def test_r30_promotion_of_a_duplicate_cancels_it(conn: asyncpg.Connection, db_url: str) -> None:
    from datetime import UTC, datetime, timedelta

    mask = {"states": ["available", "running"]}  # a scheduled job does not hold its key
    later = datetime.now(UTC) + timedelta(hours=1)
    scheduled = (await awa_bridge.insert_job(conn, {"n": 1}, kind="report", run_at=later, unique=mask)).id
    holder = (await awa_bridge.insert_job(conn, {"n": 1}, kind="report", unique=mask)).id
    other = (await awa_bridge.insert_job(conn, {"n": 2}, kind="report", run_at=later, unique=mask)).id
    await conn.execute(
        "UPDATE awa.jobs SET run_at = now() - interval '1 second' WHERE id = ANY($1)", [scheduled, other]
    )
    moved = await promote_due(conn)
    assert moved == 2  # one made available, one cancelled
    assert job_state(db_url, scheduled) == "cancelled"
    assert f"superseded: job {holder}" in job_row(db_url, scheduled)["errors"][0]["error"]
    assert job_state(db_url, other) == "available"
