"""``Client.insert`` / ``insert_many`` / ``insert_sync``: enqueue for producers without a transaction of their own.

Each call is its own transaction on the client's small pool; the pool skips
asyncpg's per-release session reset (the connections only run inserts), so a
failed insert must still leave the next one a clean connection.
"""

from __future__ import annotations

import pytest

import awa_bridge
from awa_bridge.worker import Client

from .conftest import count_rows


async def test_each_insert_commits_on_its_own_and_a_failure_spoils_nothing(db_url: str) -> None:
    client = Client(db_url)
    try:
        first = await client.insert({"n": 1}, kind="produced", unique=True)
        assert count_rows(db_url) == 1  # committed: visible from another connection at once
        with pytest.raises(awa_bridge.UniqueConflict):
            await client.insert({"n": 1}, kind="produced", unique=True)
        for n in range(2, 12):  # more calls than the pool has connections
            await client.insert({"n": n}, kind="produced")
        result = await client.insert_many([{"n": n} for n in range(100, 105)], kind="produced")
        assert result.inserted == 5
        assert client.insert_sync({"n": 200}, kind="produced").id > first.id
    finally:
        await client.shutdown()
    assert count_rows(db_url) == 17
    idle_in_transaction = count_rows(
        db_url, "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state LIKE 'idle in%%'"
    )
    assert idle_in_transaction == 0


async def test_an_insert_cancelled_mid_statement_leaves_the_next_one_a_clean_connection(db_url: str) -> None:
    """The connection of a cancelled call is not reused (its state is unknown); the next call just works."""
    import asyncio

    import psycopg

    from .waiting import lock_waiters, wait_until

    client = Client(db_url)
    blocker = psycopg.connect(db_url)
    try:
        blocker.execute("LOCK TABLE awa.jobs IN EXCLUSIVE MODE")  # the insert waits for this lock
        stuck = asyncio.ensure_future(client.insert({"n": 1}, kind="produced"))
        await wait_until(lambda: lock_waiters(db_url) >= 1)
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        blocker.rollback()
        jobs = [await client.insert({"n": n}, kind="produced") for n in range(2, 8)]  # more than the pool holds
        assert [job.args for job in jobs] == [{"n": n} for n in range(2, 8)]
    finally:
        blocker.close()
        await client.shutdown()
    assert count_rows(db_url, "SELECT count(*) FROM awa.jobs WHERE args->>'n' = '1'") == 0
    assert count_rows(db_url) == 6
