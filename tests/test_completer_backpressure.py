"""A completer that cannot write holds the producers back (the runaway a soak found).

A handler's slot is free when it returns, before its outcome is written. When
the completion writes stall (here: another transaction holds a row lock on
one job of the batch, as a long statement or a vacuum-starved server does),
the outcomes of returned handlers must not pile up without bound: each one
keeps its job ``running`` and heartbeated. The worker stops claiming once two
completion batches wait, and claims again when they are written.
"""

from __future__ import annotations

import asyncio

import psycopg

import awa_bridge
from awa_bridge.worker.config import QueueConfig

from .waiting import job_state, states, wait_until

JOBS = 600
BATCH = 10  # completion_batch: the completer is congested at 2 x 10 unwritten outcomes
WORKERS = 5


async def test_stalled_completions_stop_claims_until_written(make_client, db_url: str) -> None:
    client = make_client(completion_batch=BATCH, claim_batch=WORKERS)
    gate = asyncio.Event()

    @client.task("gated")
    async def gated(job):
        await gate.wait()  # the row lock is taken while this attempt runs

    @client.task("noop")
    async def noop(job):
        return None

    with psycopg.connect(db_url, autocommit=True) as conn:
        first = awa_bridge.insert_job(conn, {}, kind="gated").id
        awa_bridge.insert_many(conn, [{"i": i} for i in range(JOBS)], kind="noop")

    await client.start([QueueConfig("default", max_workers=WORKERS)])
    await wait_until(lambda: job_state(db_url, first) == "running")
    with psycopg.connect(db_url) as locker:
        # Its completion (batched with others) now waits for this transaction.
        locker.execute("SELECT 1 FROM awa.jobs WHERE id = %s FOR UPDATE", (first,))
        before = states(db_url).get("available", 0)
        gate.set()
        running: list[int] = []
        for _ in range(20):  # two seconds with the completer stalled
            await asyncio.sleep(0.1)
            running.append(states(db_url).get("running", 0))
        available = states(db_url).get("available", 0)
        locker.rollback()
    # Bounded: the batch being written, the unwritten outcomes (congested at 2 x BATCH) and the
    # attempts claimed (two claims in flight) or running when it happened; never the whole backlog.
    assert max(running) <= 3 * BATCH + 2 * WORKERS, running
    assert before - available <= 3 * BATCH + 3 * WORKERS, (before, available)
    await wait_until(lambda: states(db_url).get("completed", 0) == JOBS + 1, timeout=30)
