"""Draining a backlog, a producer continues from the last job it claimed; nothing is skipped for long.

Claims that only continue a backlog start their scan of jobs_dispatch_idx
after the last job claimed (producer.Producer._after), so they do not pass the
index entries of every job claimed since the last vacuum. A job that sorts
before that point must still be claimed promptly: at once when a NOTIFY names
its queue (new jobs, promoted ones), within a poll interval otherwise.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

import psycopg
import pytest

import awa_bridge
from awa_bridge.admin import pause_queue, resume_queue
from awa_bridge.drivers import detect_sync
from awa_bridge.sql import QUERIES
from awa_bridge.worker import producer
from awa_bridge.worker.config import QueueConfig
from awa_bridge.worker.producer import claim_after

from .waiting import insert, wait_until

BACKLOG = 3000
SLOTS = 20  # claims of 10: a drain of a few hundred claims, each handler a short sleep


def backlog(db_url: str, jobs: int = BACKLOG) -> None:
    with psycopg.connect(db_url) as conn:
        awa_bridge.insert_many(conn, [{"i": i} for i in range(jobs)], kind="work", priority=3)
        conn.commit()


def test_a_claim_after_a_dispatch_key_starts_past_it(db_url: str) -> None:
    """claim_jobs with claim_after(key) takes the jobs after key in (priority, run_at, id) order only."""
    backlog(db_url, jobs=6)
    who = {"instance_id": uuid.uuid4(), "worker": "host/1", "queue": "default", "limit": 2, "deadline_seconds": 60.0}
    with psycopg.connect(db_url, autocommit=True) as conn:
        keys = conn.execute("SELECT priority, run_at, id FROM awa.jobs ORDER BY priority, run_at, id").fetchall()
        db = detect_sync(conn)
        after_third = db.fetch_all(QUERIES["claim_jobs"], {**who, **claim_after(keys[2])})
        from_start = db.fetch_all(QUERIES["claim_jobs"], {**who, **claim_after()})
        past_all = db.fetch_all(QUERIES["claim_jobs"], {**who, **claim_after(keys[-1])})
    ids = [key[2] for key in keys]
    assert [row["id"] for row in after_third] == ids[3:5]
    assert [row["id"] for row in from_start] == ids[:2]
    assert past_all == [], "jobs before the key are left to a claim from the start"


async def test_a_higher_priority_job_enqueued_mid_drain_is_claimed_next(make_client: Any, db_url: str) -> None:
    client = make_client()
    started: list[Any] = []

    @client.task("work")
    async def work(job: Any) -> None:
        started.append(job.id)
        await asyncio.sleep(0.002)

    @client.task("urgent")
    async def urgent(job: Any) -> None:
        started.append("urgent")

    backlog(db_url)
    await client.start([QueueConfig("default", max_workers=SLOTS, poll_interval=30)])
    await wait_until(lambda: len(started) > 500)  # well into continuing claims
    at = len(started)
    insert(db_url, {}, kind="urgent", priority=1)  # its NOTIFY asks for a claim from the start
    await wait_until(lambda: "urgent" in started)
    assert started.index("urgent") - at < 3 * SLOTS, "claimed behind the backlog"


async def test_a_job_moved_before_the_point_without_a_notify_waits_at_most_a_poll(
    make_client: Any, db_url: str
) -> None:
    """A row made available by hand (no NOTIFY) with an old run_at sorts before the claims' point."""
    client = make_client()
    started: dict[int, float] = {}

    @client.task("work")
    async def work(job: Any) -> None:
        started[job.id] = time.monotonic()
        await asyncio.sleep(0.005)  # 10,000 jobs take seconds: the backlog outlasts the poll interval

    backlog(db_url, jobs=10_000)
    quiet = insert(db_url, {}, kind="work", priority=3, run_at="2100-01-01T00:00:00+00:00")  # scheduled
    poll = 0.5
    await client.start([QueueConfig("default", max_workers=SLOTS, poll_interval=poll)])
    await wait_until(lambda: len(started) > 500)
    with psycopg.connect(db_url, autocommit=True) as conn:  # no trigger fires on UPDATE: no NOTIFY
        conn.execute(
            "UPDATE awa.jobs SET state = 'available', run_at = now() - interval '1 hour' WHERE id = %s", (quiet,)
        )
    moved = time.monotonic()
    await wait_until(lambda: quiet in started, timeout=10)
    assert started[quiet] - moved < 2 * poll + 0.5, started[quiet] - moved
    assert len(started) < 10_000, "it waited for the whole backlog"


async def test_while_the_horizon_is_held_claims_continue_from_the_last_job_claimed(
    make_client: Any, db_url: str, caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """R31: with the MVCC horizon held, a claim from the start steps over the index entries of every
    job that left 'available' since. The producer says so, then continues every claim from the last
    job it claimed, a NOTIFY's too, with one claim from the start at most a second, which still
    finds a job that sorts before that point; and it says when claims from the start are fast again."""
    dead = 400_000  # a claim from the start walks them all (the limit: 20 ms, or 4x its fastest); 2-4 ms once released
    caplog.set_level(logging.INFO, logger="awa_bridge.worker")
    claims: list[tuple[float, bool]] = []  # (when, from the start) of every claim the producer starts
    claim = producer.Producer._claim

    def spy(self: producer.Producer, want: int, after: Any = None, *rest: Any) -> Any:
        claims.append((time.monotonic(), after is None))
        return claim(self, want, after, *rest)

    monkeypatch.setattr(producer.Producer, "_claim", spy)
    client = make_client()
    started: list[int] = []

    @client.task("work")
    async def work(job: Any) -> None:
        started.append(job.id)

    async def run_one(**opts: Any) -> int:
        job_id = insert(db_url, {}, kind="work", **opts)  # its NOTIFY asks for a claim
        await wait_until(lambda: job_id in started)
        return job_id

    async def run_until(text: str) -> None:
        for _ in range(60):
            await run_one()
            if text in caplog.text:
                return
            await asyncio.sleep(0.1)  # claims from the start are due once a second while held
        raise AssertionError(f"never logged {text!r}: {caplog.text}")

    await client.start([QueueConfig("default", max_workers=4, poll_interval=30)])
    for _ in range(3):
        await run_one()  # claims from the start on a clean index: the producer's fastest
    holder = psycopg.connect(db_url)  # a transaction that took an id and sits idle: the horizon stops
    try:
        holder.execute("SELECT txid_current()")
        pause_queue(db_url, "default")  # the dead entries are made while the worker claims nothing
        with psycopg.connect(db_url, autocommit=True) as conn:
            with conn.transaction():
                awa_bridge.insert_many(conn, [{"i": i} for i in range(dead)], kind="gone")
            conn.execute("UPDATE awa.jobs SET state = 'cancelled', finalized_at = now() WHERE kind = 'gone'")
        resume_queue(db_url, "default")
        await run_until("claims from the start of the queue take")
        held_at = time.monotonic()
        for _ in range(20):
            await run_one()
        # Sorts before the last job claimed (priority 1 before 2): the NOTIFY's claim continues past
        # it; the next claim from the start takes it.
        behind = insert(db_url, {}, kind="work", priority=1)
        await wait_until(lambda: behind in started, timeout=10)
        held = [from_start for at, from_start in claims if at > held_at]
        assert held.count(False) >= 20, f"the NOTIFYs' claims started from the start: {held}"
        seconds = time.monotonic() - held_at
        assert held.count(True) <= seconds + 2, f"more than one claim from the start a second: {held}"
        assert "are fast again" not in caplog.text
    finally:
        holder.close()
    # The dead entries go as autovacuum would take them once the horizon moves. Left to the claims
    # themselves (each marks the entries it steps over as dead), a walk of them all still took longer
    # than the slow limit on a loaded CI host, and "fast again" never came (2026-12-07).
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("VACUUM awa.jobs")
    await run_until("claims from the start of the queue are fast again")
    assert len(set(started)) == len(started), "a job ran twice"
