"""Who ran each attempt: one claim row per claim statement, a row of its own per attempt that ended
other than completed, the timeline's reader over both, and the pruning of claim rows (v009).

The statements are run as the worker runs them (awa_bridge/sql/queries.sql through the
driver adapter); the last test runs a real in-process worker, its retention and its leader.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import awa_bridge
from awa_bridge.drivers import detect_sync
from awa_bridge.sql import QUERIES
from awa_bridge.worker import Client
from awa_bridge.worker.completer import int_array
from awa_bridge.worker.producer import claim_after

from .waiting import wait_until

# Who claims, from the start of the dispatch order.
A = {"instance_id": uuid.uuid4(), "worker": "host-a/1", **claim_after()}
B = {"instance_id": uuid.uuid4(), "worker": "host-b/2", **claim_after()}


def run(url: str, name: str, **params: Any) -> list[dict[str, Any]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return detect_sync(conn).fetch_all(QUERIES[name], params)


def claim(url: str, who: dict[str, Any], limit: int = 10, queue: str = "records") -> list[dict[str, Any]]:
    return run(url, "claim_jobs", queue=queue, limit=limit, deadline_seconds=60.0, **who)


def attempts(url: str, job_id: int) -> list[tuple[int, str, bool, bool]]:
    """(attempt, worker, snoozed, handed back) per attempt, oldest first, as the timeline reads them."""
    return [
        (r["attempt"], r["worker"], r["snoozed_at"] is not None, r["released_at"] is not None)
        for r in run(url, "list_job_attempts", id=job_id)
    ]


def count(url: str, sql: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql).fetchone()
    assert row is not None
    return int(row[0])


def enqueue(url: str, n: int) -> list[int]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [awa_bridge.insert_job(conn, {"i": i}, kind="rec", queue="records").id for i in range(n)]


def test_one_claim_row_per_claim_statement_names_the_worker_of_every_job_it_claimed(db_url: str) -> None:
    jobs = enqueue(db_url, 3)
    claimed = claim(db_url, A)
    assert sorted(r["id"] for r in claimed) == jobs
    assert count(db_url, "SELECT count(*) FROM awa.job_claims") == 1
    assert count(db_url, "SELECT count(*) FROM awa.job_attempts") == 0  # nothing per job on the hot path
    run(db_url, "complete_jobs", ids=int_array(jobs[:1]), leases="{1}")
    for job_id in jobs:  # running or completed: the claim that started it
        assert attempts(db_url, job_id) == [(1, "host-a/1", False, False)]
    assert claim(db_url, A) == []
    assert count(db_url, "SELECT count(*) FROM awa.job_claims") == 1  # an empty claim writes nothing


def test_an_attempt_that_ends_otherwise_gets_its_own_row_with_its_worker(db_url: str) -> None:
    retried, snoozed, released, rescued = enqueue(db_url, 4)
    claim(db_url, A)
    finish = {"run_at": None, "error": None, "progress": None, "metadata": "{}", "lease": 1}
    run(db_url, "finish_attempt", **finish, id=retried, state="retryable", refund=0)
    run(db_url, "finish_attempt", **{**finish, "run_at": "now"}, id=snoozed, state="scheduled", refund=1)
    run(db_url, "release_jobs", ids=[released], leases=[1])
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs SET deadline_at = now() - interval '1 s' WHERE id = %s", (rescued,))
    assert [r["id"] for r in run(db_url, "rescue_expired_deadlines", limit=10)] == [rescued]
    assert attempts(db_url, retried) == [(1, "host-a/1", False, False)]
    assert attempts(db_url, snoozed) == [(1, "host-a/1", True, False)]
    assert attempts(db_url, released) == [(1, "host-a/1", False, True)]
    assert attempts(db_url, rescued) == [(1, "host-a/1", False, False)]
    assert count(db_url, "SELECT count(*) FROM awa.job_attempts") == 4

    # The next attempts, claimed by another worker: the ended ones keep their worker.
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs SET state = 'available', run_at = now() WHERE state <> 'available'")
    claim(db_url, B)
    assert attempts(db_url, retried) == [(1, "host-a/1", False, False), (2, "host-b/2", False, False)]
    # A snooze and a hand-back did not spend the attempt: the next one is attempt 1 again.
    assert attempts(db_url, snoozed) == [(1, "host-a/1", True, False), (1, "host-b/2", False, False)]
    assert attempts(db_url, released) == [(1, "host-a/1", False, True), (1, "host-b/2", False, False)]


def test_a_claim_row_is_pruned_once_no_retained_job_needs_it(db_url: str) -> None:
    done, moved_on = enqueue(db_url, 2)
    claim(db_url, A)
    run(db_url, "complete_jobs", ids=int_array([done]), leases="{1}")
    run(
        db_url,
        "finish_attempt",
        id=moved_on,
        lease=1,
        state="retryable",
        run_at=None,
        refund=0,
        error=None,
        progress=None,
        metadata="{}",
    )
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("UPDATE awa.jobs SET state = 'available' WHERE id = %s", (moved_on,))
    claim(db_url, B)  # moved_on's attempt 2, on a claim row of its own
    assert count(db_url, "SELECT count(*) FROM awa.job_claims") == 2
    prune = {"retention_seconds": 0.0, "limit": 1000}
    # done (retained) still names A; B runs moved_on
    assert run(db_url, "prune_job_claims", **prune) == [{"deleted": 0}]
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("DELETE FROM awa.jobs WHERE id = %s", (done,))  # as retention does
    assert run(db_url, "prune_job_claims", **prune) == [{"deleted": 1}]
    assert attempts(db_url, moved_on) == [(1, "host-a/1", False, False), (2, "host-b/2", False, False)]
    assert run(db_url, "prune_job_claims", **{**prune, "retention_seconds": 3600.0}) == [{"deleted": 0}]  # too young


@pytest.mark.parametrize("jobs", [300])
async def test_the_leader_prunes_claims_as_retention_deletes_their_jobs(
    make_client: Callable[..., Client], db_url: str, jobs: int
) -> None:
    client = make_client(cleanup_interval=0.2, completed_retention=0.5, claim_batch=7)

    @client.task("rec")
    async def rec(job: Any) -> None:
        return None

    with psycopg.connect(db_url) as conn:
        awa_bridge.insert_many(conn, [{"i": i} for i in range(jobs)], kind="rec", queue="records")
    await client.start(["records:20"])
    await wait_until(lambda: count(db_url, "SELECT count(*) FROM awa.job_claims") > 1)
    await wait_until(lambda: count(db_url, "SELECT count(*) FROM awa.jobs") == 0, timeout=20)
    await wait_until(lambda: count(db_url, "SELECT count(*) FROM awa.job_claims") == 0, timeout=20)
