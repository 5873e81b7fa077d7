"""Poll a predicate instead of sleeping (the conventions of docs/reliability.md)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import time
from collections.abc import Awaitable, Callable, Iterator
from datetime import datetime
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


def db_now(url: str) -> datetime:
    """The server's clock, to compare with ``pg_stat_activity`` times."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT clock_timestamp()").fetchone()
    assert row is not None and isinstance(row[0], datetime)
    return row[0]


def lock_waiters(url: str) -> int:
    """How many backends of this database are blocked on a lock (a row, a transaction id)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND wait_event_type = 'Lock'"
        ).fetchone()
    assert row is not None
    return int(row[0])


class ClaimLog:
    """Proof that the worker ran claims, for tests that check a job is *not* claimed.

    A statement-level trigger on ``awa.jobs`` (test-only; it fires even when an UPDATE changes no
    row) records the start time of every worker claim statement. A claim that started after a
    job's commit saw that job, so a paused queue or an uncommitted insert is checked after such
    claims instead of after a sleep: the test cannot pass before the worker had its chance.
    """

    def __init__(self, url: str) -> None:
        from awa_bridge.sql import QUERIES

        self.url = url
        text = QUERIES["claim_jobs"].pyformat
        self.head = text[: text.index("%(")]  # the text before the first parameter, the same for every driver

    def install(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("CREATE TABLE IF NOT EXISTS t_claim_log (started timestamptz NOT NULL, query text NOT NULL)")
            conn.execute(
                "CREATE OR REPLACE FUNCTION t_log_claim() RETURNS trigger LANGUAGE plpgsql AS $$"
                " BEGIN INSERT INTO t_claim_log VALUES (statement_timestamp(), left(current_query(), 500));"
                " RETURN NULL; END $$"
            )
            conn.execute(
                "CREATE OR REPLACE TRIGGER t_claim_log AFTER UPDATE ON awa.jobs"
                " FOR EACH STATEMENT EXECUTE FUNCTION t_log_claim()"
            )

    def remove(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as conn:
            conn.execute("DROP TRIGGER IF EXISTS t_claim_log ON awa.jobs")
            conn.execute("DROP FUNCTION IF EXISTS t_log_claim()")
            conn.execute("DROP TABLE IF EXISTS t_claim_log")

    def ran_since(self, since: datetime) -> bool:
        with psycopg.connect(self.url, autocommit=True) as conn:
            row = conn.execute(
                "SELECT EXISTS (SELECT 1 FROM t_claim_log WHERE started > %s AND starts_with(query, %s))",
                (since, self.head),
            ).fetchone()
        assert row is not None
        return bool(row[0])

    async def passes(self, count: int = 2, timeout: float = 10.0) -> None:
        """Wait for ``count`` claims one after another, each begun after the one before.

        Everything committed before the call was visible to all of them.
        """
        for _ in range(count):
            since = db_now(self.url)
            await wait_until(functools.partial(self.ran_since, since), timeout=timeout)


@contextlib.contextmanager
def recording_claims(url: str) -> Iterator[ClaimLog]:
    """Install the claim log for the block (before the worker starts: it is DDL on awa.jobs)."""
    log = ClaimLog(url)
    log.install()
    try:
        yield log
    finally:
        log.remove()
