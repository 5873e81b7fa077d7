"""Queue rollups: a real worker counts the outcomes it wrote per queue and minute in
awa.queue_rollups (one upsert every few seconds and at shutdown); old rows are pruned."""

from __future__ import annotations

from typing import Any

import asyncpg
import psycopg

from awa_bridge.worker import Cancel, TerminalError
from awa_bridge.worker.rollup import prune_rollups

from .waiting import insert, job_state, wait_until


def _rollups(url: str) -> dict[str, tuple[int, int, int, int]]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT queue, sum(completed), sum(failed), sum(retried), sum(cancelled) FROM awa.queue_rollups GROUP BY 1"
        ).fetchall()
    return {queue: tuple(int(v) for v in values) for queue, *values in rows}


async def test_a_worker_counts_each_written_outcome_per_queue(make_client: Any, db_url: str) -> None:
    client = make_client()

    @client.task("ok", queue="fast")
    def ok(job: Any) -> None:
        return None

    @client.task("flaky", queue="fast")
    def flaky(job: Any) -> None:
        if job.attempt == 1:
            raise ValueError("first try fails")

    @client.task("doomed", queue="slow")
    def doomed(job: Any) -> None:
        raise TerminalError("no")

    @client.task("dropped", queue="slow")
    def dropped(job: Any) -> Any:
        return Cancel("not needed")

    ids = [insert(db_url, {}, kind="ok", queue="fast") for _ in range(5)]
    ids += [insert(db_url, {}, kind="flaky", queue="fast", max_attempts=3)]
    ids += [insert(db_url, {}, kind="doomed", queue="slow"), insert(db_url, {}, kind="dropped", queue="slow")]
    await client.start(["fast:2", "slow:2"])
    for job_id in ids[:5] + ids[6:]:
        await wait_until(lambda job_id=job_id: job_state(db_url, job_id) in ("completed", "failed", "cancelled"))
    await wait_until(lambda: job_state(db_url, ids[5]) == "retryable")
    await client.shutdown(timeout=2)

    assert _rollups(db_url) == {"fast": (5, 0, 1, 0), "slow": (0, 1, 0, 1)}


async def test_prune_deletes_rollups_older_than_two_days(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.queue_rollups (queue, minute, completed) VALUES "
            "('q', date_trunc('minute', now()) - interval '3 days', 1), "
            "('q', date_trunc('minute', now()) - interval '1 day', 2), ('q', date_trunc('minute', now()), 3)"
        )
    conn2 = await asyncpg.connect(db_url)
    try:
        assert await prune_rollups(conn2) == 1
    finally:
        await conn2.close()
    assert _rollups(db_url) == {"q": (5, 0, 0, 0)}
