"""Poll a predicate instead of sleeping (the conventions of docs/reliability.md)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg

MULTIPLIER = float(os.environ.get("AWA_CHAOS_TIMEOUT_MULTIPLIER", "1"))

FAST = {
    "heartbeat_interval": 0.05,
    "heartbeat_staleness": 0.25,
    "rescue_interval": 0.1,
    "promote_interval": 0.05,
    "leader_election_interval": 0.2,
}


async def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Await until ``predicate()`` (sync or async) returns a truthy value; return it."""
    deadline = time.monotonic() + timeout * MULTIPLIER
    while True:
        value = predicate()
        if isinstance(value, Awaitable):
            value = await value
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout * MULTIPLIER:.1f} s")
        await asyncio.sleep(interval)


def job_row(url: str, job_id: int) -> dict[str, Any]:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute("SELECT * FROM awa.jobs WHERE id = %s", (job_id,))
        names = [c.name for c in cur.description]
        row = cur.fetchone()
    return dict(zip(names, row, strict=True)) if row else {}


def job_state(url: str, job_id: int) -> str | None:
    row = job_row(url, job_id)
    return row.get("state")


def states(url: str, sql: str = "SELECT state::text, count(*) FROM awa.jobs GROUP BY 1") -> dict[str, int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return dict(conn.execute(sql).fetchall())


def insert(url: str, args: Any, **opts: Any) -> int:
    """Enqueue one job in its own committed transaction; return its id."""
    import awa_bridge

    with psycopg.connect(url) as conn:
        job = awa_bridge.insert_job_sync(conn, args, **opts)
        conn.commit()
    return job.id
