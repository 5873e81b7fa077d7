"""R18, pool exhaustion: more worker slots than connections, and a server that refuses new ones.

Scenario R18 of docs/reliability.md. A worker process runs transactional
handlers (each holds a connection from the worker's handler pools for its
whole run) next to plain ones. First with many more slots than those pools
have connections; then with the server out of connections for the worker's
role: idle connections fill the role's limit, the worker's handler backends
are terminated, and every reconnect it tries is refused (SQLSTATE 53300, what
a full ``max_connections`` gives) until the pressure goes. Throughput may
drop; nothing may crash, hang or run twice, and it must come back.

The limit is a role's ``CONNECTION LIMIT`` rather than the server's
``max_connections``: the same refusal, but confined to the worker, so the
test's own connections (and the rest of the suite's) keep working. The role
is a member of the test's superuser role, so it can use every table, but is
no superuser itself (superusers ignore connection limits).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

import awa_bridge
from awa_bridge.worker import pools
from awa_bridge.worker.config import QueueConfig
from awa_bridge.worker.pools import MAX_HANDLER_CONNECTIONS

from .procs import Probe, Producer, Workers, unique_queue, wait_for
from .waiting import insert

pytestmark = pytest.mark.slow


def enqueue(url: str, queue: str, kinds: list[str]) -> int:
    with psycopg.connect(url) as conn:
        jobs = [awa_bridge.prepare_job({"n": i}, kind=kind, queue=queue) for i, kind in enumerate(kinds)]
        inserted = awa_bridge.insert_many_sync(conn, jobs).inserted
        conn.commit()
    return inserted


HANDLER_POOLS = ("awa-handler-async", "awa-handler-sync")


def handler_backends(probe: Probe, role: str | None = None) -> int:
    """The worker's handler-pool backends now open (of ``role`` when given)."""
    return sum(handler_backends_by_pool(probe, role).values())


def handler_backends_by_pool(probe: Probe, role: str | None = None) -> dict[str, int]:
    """The backends now open of each handler pool (asyncpg's, psycopg's), of ``role`` when given."""
    rows = probe.rows(
        "SELECT application_name, count(*) FROM pg_stat_activity WHERE application_name = ANY(%s) "
        "AND datname = current_database() AND (%s::text IS NULL OR usename = %s) GROUP BY 1",
        (list(HANDLER_POOLS), role, role),
    )
    return {pool: 0 for pool in HANDLER_POOLS} | {name: int(count) for name, count in rows}


def test_more_slots_than_handler_connections_runs_everything_once(app_db: str, probe: Probe, workers: Workers) -> None:
    """60 slots, 400 transactional jobs holding their connection 0-50 ms: the pools stay at their
    limit, slots wait their turn for a connection, and every job runs once (no retry, no deadline)."""
    queue = unique_queue()
    kinds = ["tx_effect_async", "tx_effect"] * 200
    count = enqueue(app_db, queue, kinds)
    # A loose staleness: 60 threads and the server on two cores must not look like a dead worker.
    env = {"AWA_TX_MAX_SLEEP": "0.05", "AWA_HEARTBEAT_STALENESS": "5"}
    worker = workers.start(f"{queue}:60", env=env).wait_started()

    most = dict.fromkeys(HANDLER_POOLS, 0)

    def finished() -> bool:
        for pool, open_now in handler_backends_by_pool(probe).items():
            most[pool] = max(most[pool], open_now)
        return probe.states(queue) == {"completed": count}

    wait_for(finished, 90, "every transactional job to complete", interval=0.02)
    assert worker.alive()
    # Two pools (async handlers on asyncpg, sync ones on psycopg), each capped; 60 slots wanted more.
    for pool, at_most in most.items():
        assert at_most <= MAX_HANDLER_CONNECTIONS, f"{at_most} connections of {pool} open at once"
        assert at_most > MAX_HANDLER_CONNECTIONS // 4, f"only {at_most} of {pool}: its slots never competed for them"
    total, distinct = probe.rows("SELECT count(*), count(DISTINCT job_id) FROM t_effects")[0]
    assert (total, distinct) == (count, count)
    assert probe.value("SELECT max(attempt) FROM awa.jobs WHERE queue = %s", (queue,)) == 1
    assert not worker.logged("Traceback"), worker.output
    print(f"at most {most} handler connections per pool for 60 slots")


# -- the server refuses new connections -----------------------------------------------------


@pytest.fixture
def limited_role(app_db: str) -> Iterator[str]:
    """A login role (no superuser) that can use the test database; dropped afterwards."""
    role = f"awa_r18_{os.getpid()}"
    with psycopg.connect(app_db, autocommit=True) as conn:
        member_of = conn.execute("SELECT current_user").fetchone()[0]  # type: ignore[index]
        conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))
        conn.execute(
            sql.SQL("CREATE ROLE {} LOGIN NOSUPERUSER INHERIT IN ROLE {}").format(
                sql.Identifier(role), sql.Identifier(member_of)
            )
        )
    try:
        yield role
    finally:
        with psycopg.connect(app_db, autocommit=True) as conn:
            # NOLOGIN first: a worker still running would reconnect as fast as its backends are cut.
            conn.execute(sql.SQL("ALTER ROLE {} NOLOGIN").format(sql.Identifier(role)))
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", (role,))
            wait_for(
                lambda: (
                    conn.execute("SELECT count(*) FROM pg_stat_activity WHERE usename = %s", (role,)).fetchone() == (0,)
                ),
                10,
                "the role's backends to go",
            )
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


# What a worker's log shows of an error nobody handled: a runtime failure of an attempt, an
# exception of a task or a thread nobody retrieved.
UNHANDLED = ("inside the worker", "was never retrieved", "Exception in thread", "Exception in callback", " CRITICAL ")


def effects(probe: Probe, queue: str) -> tuple[int, int]:
    """Rows in ``t_effects`` of ``queue``'s jobs, and how many distinct jobs they are of."""
    total, distinct = probe.rows(
        "SELECT count(*), count(DISTINCT e.job_id) FROM t_effects e JOIN awa.jobs j ON j.id = e.job_id "
        "WHERE j.queue = %s",
        (queue,),
    )[0]
    return int(total), int(distinct)


def set_connection_limit(admin: psycopg.Connection[Any], role: str, limit: int) -> None:
    """New connections of ``role`` beyond ``limit`` are refused (-1: no limit); open ones stay."""
    admin.execute(sql.SQL("ALTER ROLE {} CONNECTION LIMIT {}").format(sql.Identifier(role), sql.Literal(limit)))


def as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{role}@{host}"))


def completed_since(probe: Probe, queue: str, since: Any) -> int:
    return int(
        probe.value(
            "SELECT count(*) FROM awa.jobs WHERE queue = %s AND state = 'completed' AND finalized_at >= %s",
            (queue, since),
        )
    )


def rate_over(probe: Probe, queue: str, seconds: float) -> float:
    """Jobs completed per second over the next ``seconds``."""
    start = probe.now()
    time.sleep(seconds)
    return completed_since(probe, queue, start) / seconds


def backlog(probe: Probe, queue: str) -> int:
    """Jobs of ``queue`` waiting to run (now or after a retry's backoff)."""
    return int(
        probe.value(
            "SELECT count(*) FROM awa.jobs WHERE queue = %s AND state IN ('available', 'retryable', 'scheduled')",
            (queue,),
        )
    )


def test_server_out_of_connections_degrades_then_recovers(
    app_db: str, probe: Probe, limited_role: str, workers: Workers
) -> None:
    """A producer at 40 jobs/s (plain and transactional); the worker's role runs out of connections
    for 6 s, its handler backends cut; then the pressure goes.

    During: the worker stays up, and whatever it cannot connect for is retried, not lost. After:
    it handles the producer's rate again (at least 90 % of the baseline), every job completes, and
    each transactional effect exists exactly once."""
    queue = unique_queue()
    role = limited_role
    role_url = as_role(app_db, role)
    worker = workers.start(f"{queue}:8", url=role_url, env={"AWA_TX_MAX_SLEEP": "0.01"}).wait_started()
    producer = Producer(app_db, queue, kinds=["ledger", "tx_effect_async", "tx_effect"], rate=40, duration=30)
    producer.start()
    fillers: list[psycopg.Connection[Any]] = []
    try:
        wait_for(lambda: handler_backends(probe, role) >= 2, 15, "both handler pools to open")
        baseline = rate_over(probe, queue, 4)
        assert baseline > 30, f"baseline {baseline:.1f} jobs/s for a producer at 40/s"

        # Pressure: 20 idle connections of the role, then its limit set at what it will have once
        # the worker's own backends are cut, so that none of them can come back; then they are cut.
        fillers = [psycopg.connect(role_url, autocommit=True, application_name="r18-idle") for _ in range(20)]
        with psycopg.connect(app_db, autocommit=True) as admin:
            others = admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND application_name NOT LIKE 'awa-%%'",
                (role,),
            ).fetchone()[0]  # type: ignore[index]
            set_connection_limit(admin, role, others)
            cut = admin.execute(
                "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE usename = %s AND application_name LIKE 'awa-%%'",
                (role,),
            ).fetchone()[0]  # type: ignore[index]
        assert cut >= 4, f"only {cut} of the worker's backends were cut"
        with pytest.raises(psycopg.OperationalError, match="too many connections"):
            psycopg.connect(role_url)
        during = rate_over(probe, queue, 6)
        assert worker.alive(), worker.output

        # The pressure goes.
        for conn in fillers:
            conn.close()
        fillers = []
        with psycopg.connect(app_db, autocommit=True) as admin:
            set_connection_limit(admin, role, -1)
        # Back to the producer's rate: first the backlog of the jobs that waited, then a steady window.
        wait_for(lambda: backlog(probe, queue) <= 40, 30, "the backlog of the pressure to drain")
        after = rate_over(probe, queue, 4)
        assert after >= 0.9 * baseline, f"{after:.1f} jobs/s after the pressure, {baseline:.1f} before"
        ids = producer.finish()
    finally:
        producer.stop()
        for conn in fillers:
            conn.close()
    wait_for(lambda: probe.states(queue) == {"completed": len(ids)}, 60, "every job to complete")
    assert worker.alive(), worker.output
    transactional = probe.value("SELECT count(*) FROM awa.jobs WHERE queue = %s AND kind LIKE 'tx_effect%%'", (queue,))
    total, distinct = effects(probe, queue)
    assert (total, distinct) == (transactional, transactional)
    # The refusals reached the worker (its reconnects were refused, and it said so), yet it stops cleanly.
    assert worker.logged("too many connections"), worker.output
    # Nothing unhandled. (A transactional handler whose backend was cut in the middle of its work is
    # retried with its backoff, the attempt spent; one that found no connection is handed back.)
    assert not any(worker.logged(text) for text in UNHANDLED), worker.output
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0, worker.output
    retried = probe.value("SELECT count(*) FROM awa.jobs WHERE queue = %s AND attempt > 1", (queue,))
    print(f"baseline {baseline:.1f} jobs/s, during {during:.1f}, after {after:.1f}; {retried} of {len(ids)} retried")


async def test_an_attempt_that_waited_past_its_deadline_for_a_connection_does_not_start(
    make_client: Any, db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Four slots on a handler pool of two connections, a deadline of 0.5 s, and transactional
    handlers that hold their connection for a second, cancelled or not: the two attempts that get
    a connection only after their deadline are handed back unspent, not run without a deadline."""
    monkeypatch.setattr(pools, "MAX_HANDLER_CONNECTIONS", 2)
    client = make_client(rescue_interval=60)  # the leader's deadline rescue would race this one
    lateness: list[float] = []

    @client.task("tx_hold", transactional=True)
    async def tx_hold(job: Any) -> None:
        lateness.append(time.time() - job.deadline_at.timestamp())
        end = time.monotonic() + 1.0
        while (left := end - time.monotonic()) > 0:
            with contextlib.suppress(asyncio.CancelledError):  # keeps its connection past the deadline
                await asyncio.sleep(left)

    for n in range(4):
        insert(db_url, {"n": n}, kind="tx_hold")
    await client.start([QueueConfig("default", max_workers=4, deadline=0.5)])
    await asyncio.sleep(2.0)
    assert len(lateness) >= 2, lateness
    assert max(lateness) < 0, f"a handler started {max(lateness):.2f} s after its deadline"


async def test_a_refused_connection_counts_as_the_server_gone_on_both_drivers(app_db: str, limited_role: str) -> None:
    """A refusal (SQLSTATE 53300) is judged as the server going away, not as a bad statement, on the
    worker's asyncpg paths (``is_transient``) and its psycopg ones (``is_operational``): retried and
    read back, never taken for the job's own failure."""
    import asyncpg

    from awa_bridge.drivers.errors import is_connection_failure, is_operational, is_transient

    with psycopg.connect(app_db, autocommit=True) as admin:
        set_connection_limit(admin, limited_role, 0)
    role_url = as_role(app_db, limited_role)
    with pytest.raises(psycopg.OperationalError) as refused_psycopg:
        psycopg.connect(role_url)
    with pytest.raises(asyncpg.TooManyConnectionsError) as refused_asyncpg:
        await asyncpg.connect(role_url)
    assert is_operational(refused_psycopg.value), refused_psycopg.value
    assert is_transient(refused_asyncpg.value), refused_asyncpg.value

    # Django re-raises the driver's error as its own (``django.db.OperationalError``, from it): a
    # transactional handler in ``atomic()`` sees that one. All three are a connection failure for
    # the executor, which then hands the attempt back unspent.
    from django.db import OperationalError as DjangoOperationalError
    from django.db.utils import DatabaseErrorWrapper

    class Backend:  # what DatabaseErrorWrapper reads of a Django connection
        Database = psycopg
        errors_occurred = False

    with pytest.raises(DjangoOperationalError) as refused_django, DatabaseErrorWrapper(Backend()):
        psycopg.connect(role_url)
    assert not is_operational(refused_django.value)
    # A psycopg pool never hands a refusal to its caller: it retries, and the caller's wait for a
    # connection ends in PoolTimeout (psycopg_pool's own module), what a sync handler then sees.
    from psycopg_pool import ConnectionPool, PoolTimeout

    pool = ConnectionPool(role_url, min_size=0, max_size=1, timeout=1.0)
    with pool, pytest.raises(PoolTimeout) as timed_out, pool.connection():
        pass
    refusals = (refused_psycopg.value, refused_asyncpg.value, refused_django.value, timed_out.value)
    assert all(is_connection_failure(refusal) for refusal in refusals)


def test_a_transactional_handler_refused_its_connection_is_released_unspent(
    app_db: str, probe: Probe, limited_role: str, workers: Workers
) -> None:
    """Only the handler pools are refused: the worker keeps its claim and completion connections and
    goes on claiming, while every new connection of its role is refused for 6 s and its handler
    backends are cut. 60 transactional jobs of two attempts each arrive in that window: each attempt
    that finds no connection for its handler is handed back with its attempt unspent and runs a
    little later, so every job completes at attempt 1, with no error recorded and its effect once,
    instead of spending its two attempts on the refusal and failing."""
    queue = unique_queue()
    role = limited_role
    role_url = as_role(app_db, role)
    worker = workers.start(
        f"{queue}:8", url=role_url, env={"AWA_TX_MAX_SLEEP": "0.01", "AWA_PRINT_HOOKS": "1"}
    ).wait_started()
    warm = enqueue(app_db, queue, ["tx_effect_async", "tx_effect"])
    wait_for(lambda: probe.states(queue) == {"completed": warm}, 15, "the handler pools to open")
    assert handler_backends(probe, role) >= 2
    with psycopg.connect(app_db, autocommit=True) as admin:
        kept = admin.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE usename = %s AND NOT application_name = ANY(%s)",
            (role, list(HANDLER_POOLS)),
        ).fetchone()[0]  # type: ignore[index]
        set_connection_limit(admin, role, kept)
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s AND application_name = ANY(%s)",
            (role, list(HANDLER_POOLS)),
        )
    try:
        wait_for(lambda: handler_backends(probe, role) == 0, 10, "the handler backends to go")
        with psycopg.connect(app_db) as conn:
            kinds = ["tx_effect_async", "tx_effect"] * 30
            jobs = [
                awa_bridge.prepare_job({"n": n}, kind=kind, queue=queue, max_attempts=2) for n, kind in enumerate(kinds)
            ]
            awa_bridge.insert_many_sync(conn, jobs)
            conn.commit()
        time.sleep(6)
        assert worker.alive(), worker.output
        assert worker.logged("got no database connection for its transactional handler"), worker.output
    finally:
        with psycopg.connect(app_db, autocommit=True) as admin:
            set_connection_limit(admin, role, -1)
    count = warm + len(kinds)
    wait_for(lambda: probe.states(queue) == {"completed": count}, 60, "every job to complete")
    attempts, with_errors = probe.rows(
        "SELECT max(attempt), count(*) FILTER (WHERE cardinality(errors) > 0) FROM awa.jobs WHERE queue = %s",
        (queue,),
    )[0]
    assert (attempts, with_errors) == (1, 0), worker.output
    total, distinct = effects(probe, queue)
    assert (total, distinct) == (count, count)
    assert not any(worker.logged(text) for text in UNHANDLED), worker.output
    # The started hook fired once per job: for the attempt that ran, not for those handed back.
    ids = [row[0] for row in probe.rows("SELECT id FROM awa.jobs WHERE queue = %s", (queue,))]
    wait_for(lambda: all(worker.logged(f"hook completed job {i}") for i in ids), 10, "the completed hooks")
    started = Counter(re.findall(r"^hook started job (\d+)$", worker.output, re.M))
    assert started == Counter({str(i): 1 for i in ids}), started
    worker.signal(signal.SIGTERM)
    assert worker.wait(15) == 0, worker.output
