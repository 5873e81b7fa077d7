"""Maintenance services that keep up, the leader's lease, the worker registry, per-queue settings on the CLI.

In-process workers (``Client.start``) on the test database; the chaos tests
with real subprocesses are in tests/test_worker_stuck.py.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Callable
from importlib.metadata import version
from typing import Any
from uuid import uuid4

import asyncpg
import psycopg
import pytest

import awa_bridge
from awa_bridge.drivers.asyncpg import Asyncpg, as_asyncpg
from awa_bridge.sql import QUERIES
from awa_bridge.worker import Client, QueueConfig, WorkerConfig
from awa_bridge.worker.config import MAINTENANCE_BATCH
from awa_bridge.worker.maintenance.promote import promote_due
from awa_bridge.worker.maintenance.services import Cleanup, PruneInstances, Service, View

from .procs import wait_for
from .waiting import FAST, wait_until

MakeClient = Callable[..., Client]


def instance_of(client: Client) -> object:
    assert client.runtime is not None
    return client.runtime.instance_id


def scalar(url: str, sql: str, params: tuple[Any, ...] = ()) -> Any:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(sql, params).fetchone()
    return row[0] if row else None


# -- every maintenance service repeats its batch until one comes back short ----------------------
# Each test leaves two and a half batches of work for one service whose interval is a minute: done
# in seconds only if a pass repeats its batch (one batch per interval leaves the rest for minutes).

BACKLOG = 2 * MAINTENANCE_BATCH + MAINTENANCE_BATCH // 2


def run_sql(url: str, sql: str, params: tuple[Any, ...] = ()) -> None:
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(sql, params)


def make_jobs(url: str, n: int, columns: str, values: str) -> None:
    """``n`` jobs on queue 'elsewhere' (no worker serves it) with these extra columns, made in the server."""
    run_sql(
        url,
        f"INSERT INTO awa.jobs (kind, queue, args, {columns}) "
        f"SELECT 'backlog', 'elsewhere', jsonb_build_object('n', g), {values} FROM generate_series(1, %s) AS g",
        (n,),
    )


def error_types(url: str) -> dict[str | None, int]:
    """The jobs on 'elsewhere' by the type of their last error (None: no error)."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT errors[cardinality(errors)] ->> 'type', count(*) FROM awa.jobs WHERE queue = 'elsewhere' GROUP BY 1"
        ).fetchall()
    return dict(rows)


def count(url: str, where: str) -> int:
    return int(scalar(url, f"SELECT count(*) FROM awa.jobs WHERE queue = 'elsewhere' AND {where}"))


async def test_cleanup_repeats_its_batch_until_short_and_keeps_up(make_client: MakeClient, db_url: str) -> None:
    """Two and a half cleanup batches of completed jobs past retention go in one pass, not one batch
    per cleanup interval (60 s)."""
    n = 2 * Cleanup.batch + Cleanup.batch // 2
    make_jobs(
        db_url, n, "state, attempt, attempted_at, finalized_at",
        "'completed', 1, now() - interval '2 hours', now() - interval '1 hour'",
    )  # fmt: skip
    client = make_client(completed_retention=60, cleanup_interval=60)
    await client.start(["maint"])
    await wait_until(lambda: count(db_url, "true") == 0, 10)


async def test_cleanup_counts_a_job_retried_under_its_batch_in_the_batch(conn: asyncpg.Connection, db_url: str) -> None:
    """A job an operator retries while a cleanup batch that picked it waits for its lock is not
    deleted; the batch still picked its limit, so the pass goes on to the rest (before, the batch
    looked short and the rest waited for the cleanup interval)."""
    cleanup = Cleanup(interval=60, completed_retention=60, failed_retention=60)
    cleanup.batch = 10
    make_jobs(
        db_url, 25, "state, attempt, attempted_at, finalized_at",
        "'completed', 1, now() - interval '2 hours', now() - interval '1 hour' + g * interval '1 second'",
    )  # fmt: skip
    oldest = scalar(db_url, "SELECT min(id) FROM awa.jobs WHERE queue = 'elsewhere'")
    with psycopg.connect(db_url) as operator:
        operator.execute(
            "UPDATE awa.jobs SET state = 'available', attempt = 0, run_at = now(), finalized_at = NULL WHERE id = %s",
            (oldest,),
        )
        pass_ = asyncio.create_task(cleanup.run_pass(as_asyncpg(conn), View(staleness=1, heartbeat_interval=0.25)))
        waiting = "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s"
        await wait_until(lambda: scalar(db_url, waiting, (conn.get_server_pid(),)), 10)
        operator.commit()
    deleted = await asyncio.wait_for(pass_, 10)
    assert deleted == 24 and count(db_url, "true") == 1
    assert count(db_url, f"id = {oldest} AND state = 'available'") == 1
    assert cleanup.due > time.monotonic() + 55  # the pass ended on its short third batch


async def test_promotion_repeats_its_batch_until_short(make_client: MakeClient, db_url: str) -> None:
    make_jobs(db_url, BACKLOG, "state, run_at", "'scheduled', now() - interval '1 minute'")
    client = make_client(promote_interval=60)
    await client.start(["maint"])
    await wait_until(lambda: count(db_url, "state = 'available'") == BACKLOG, 10)


async def test_promotion_counts_superseded_jobs_as_a_full_batch(make_client: MakeClient, db_url: str) -> None:
    """Due duplicates of a job that holds their unique key are cancelled (R30); a batch of them is a
    full batch, so the pass goes on to the next instead of leaving the rest for an interval."""
    mask = {"states": ["available", "running"]}  # a scheduled job does not hold its key
    with psycopg.connect(db_url, autocommit=True) as conn:
        holder = awa_bridge.insert_job_sync(conn, {"order": 1}, kind="backlog", queue="elsewhere", unique=mask).id
    run_sql(
        db_url,
        "INSERT INTO awa.jobs (kind, queue, args, state, run_at, unique_key, unique_states) "
        "SELECT kind, queue, args, 'scheduled', now() - interval '1 minute', unique_key, unique_states "
        "FROM awa.jobs, generate_series(1, %s) WHERE id = %s",
        (BACKLOG, holder),
    )
    client = make_client(promote_interval=60)
    await client.start(["maint"])
    await wait_until(lambda: count(db_url, "state = 'cancelled'") == BACKLOG, 10)
    assert error_types(db_url) == {None: 1, "Superseded": BACKLOG}


async def test_promotion_notifies_each_queue_that_got_an_available_job(conn: asyncpg.Connection, db_url: str) -> None:
    """One NOTIFY per queue that got available jobs, so their workers claim at once; none for a queue
    whose due jobs were all cancelled as superseded."""
    heard: list[str] = []
    await conn.add_listener("awa_jobs", lambda *event: heard.append(event[3]))
    mask = {"states": ["available", "running"]}
    with psycopg.connect(db_url, autocommit=True) as pg:
        holder = awa_bridge.insert_job_sync(pg, {"n": 1}, kind="backlog", queue="held", unique=mask).id
    await wait_until(lambda: heard == ["held"], 5)  # the insert's own NOTIFY
    heard.clear()
    run_sql(
        db_url,
        "INSERT INTO awa.jobs (kind, queue, args, state, run_at) "
        "SELECT 'backlog', q, '{}', 'scheduled', now() - interval '1 second' FROM unnest(ARRAY['a', 'a', 'b']) AS q",
    )
    run_sql(
        db_url,
        "INSERT INTO awa.jobs (kind, queue, args, state, run_at, unique_key, unique_states) "
        "SELECT kind, 'dup', args, 'scheduled', now() - interval '1 second', unique_key, unique_states "
        "FROM awa.jobs WHERE id = %s",
        (holder,),
    )
    other = await asyncpg.connect(db_url)
    try:
        assert await promote_due(other) == 4
    finally:
        await other.close()
    await wait_until(lambda: sorted(heard) == ["a", "b"], 5)
    await asyncio.sleep(0.2)
    assert sorted(heard) == ["a", "b"]


RUNNING = "state, attempt, run_lease, attempted_at, heartbeat_at, deadline_at"


@pytest.mark.parametrize(
    ("columns", "values", "config", "state", "error_type"),
    [
        pytest.param(
            RUNNING,
            "'running', 1, 1, now() - interval '2 minutes', now(), now() - interval '1 minute'",
            {"heartbeat_staleness": 3600},  # heartbeats stay fresh: only the deadline rescue may take them
            "running",
            "DeadlineExceeded",
            id="deadline",
        ),
        pytest.param(
            RUNNING,
            "'running', 1, 1, now() - interval '2 hours', now() - interval '1 hour', now() + interval '1 hour'",
            {},
            "running",
            "HeartbeatStale",
            id="stale-heartbeat",
        ),
        pytest.param(
            "state, attempt, run_lease, attempted_at, callback_id, callback_timeout_at",
            "'waiting_external', 1, 1, now() - interval '2 minutes', gen_random_uuid(), now() - interval '1 minute'",
            {},
            "waiting_external",
            "CallbackTimeout",
            id="callback-timeout",
        ),
    ],
)
async def test_rescue_repeats_its_batch_until_short(
    make_client: MakeClient,
    db_url: str,
    columns: str,
    values: str,
    config: dict[str, Any],
    state: str,
    error_type: str,
) -> None:
    make_jobs(db_url, BACKLOG, columns, values)
    client = make_client(rescue_interval=60, **config)
    await client.start(["maint"])
    await wait_until(lambda: count(db_url, f"state = '{state}'") == 0, 10)
    assert error_types(db_url) == {error_type: BACKLOG}


class Sleeper(Service):
    """A service whose batch is a real statement that takes 0.1 s, full for the first ``full`` batches."""

    name = "sleeper"

    def __init__(self, interval: float, budget: float, full: int) -> None:
        super().__init__(interval, budget)
        self.full = full
        self.ended: list[float] = []  # monotonic time at the end of each batch

    async def run_batch(self, db: Asyncpg) -> int:
        await db.execute_script("SELECT pg_sleep(0.1)")
        self.ended.append(time.monotonic())
        return self.batch if len(self.ended) <= self.full else self.batch - 1


async def test_a_pass_stops_at_its_budget_and_is_due_again_at_once(conn: asyncpg.Connection) -> None:
    """A backlog longer than the budget: the pass stops after the batch that spent it, and the service
    is due at the next tick (not after its interval), so the leader's other services get their turn."""
    service = Sleeper(interval=60, budget=0.35, full=1000)
    began = time.monotonic()
    handled = await service.run_pass(as_asyncpg(conn), View(staleness=1, heartbeat_interval=0.25))
    batches = len(service.ended)
    assert 2 <= batches < 10 and handled == batches * service.batch
    assert service.ended[-1] - began >= 0.35, "stopped before its budget was spent"
    assert service.ended[-2] - began < 0.35 + 0.05, "went on after its budget was spent"
    assert service.due <= time.monotonic()


async def test_a_pass_ends_at_the_first_short_batch_and_waits_its_interval(conn: asyncpg.Connection) -> None:
    service = Sleeper(interval=60, budget=10, full=2)
    handled = await service.run_pass(as_asyncpg(conn), View(staleness=1, heartbeat_interval=0.25))
    assert len(service.ended) == 3 and handled == 3 * service.batch - 1
    assert service.due > time.monotonic() + 55


async def test_leader_holds_the_lease_and_hands_it_over_at_shutdown(make_client: MakeClient, db_url: str) -> None:
    first, second = make_client(), make_client()
    await first.start(["lease_q"])
    holder = await wait_until(
        lambda: scalar(db_url, "SELECT holder FROM awa.maintenance_lease WHERE expires_at > now()")
    )
    assert holder == instance_of(first)
    await second.start(["lease_q"])
    await first.shutdown()
    # Released at shutdown: the other worker takes it at its next election, without waiting for the lease to expire.
    await wait_until(
        lambda: scalar(db_url, "SELECT holder FROM awa.maintenance_lease") == instance_of(second),
        timeout=FAST["leader_election_interval"] * 5 + 2,
    )
    assert scalar(db_url, "SELECT epoch FROM awa.maintenance_lease") == 2


def test_a_candidate_holding_the_lock_displaces_only_a_leader_whose_session_held_it(db_url: str) -> None:
    """The start-up race of two workers, step by step on two sessions, through the leader's own statements.

    B (a candidate) takes the advisory lock; before B's upsert lands, A inserts the first lease
    without the lock. B's lock must not displace A, who is alive (it did before v012: two leaders
    for one renewal, then a change of leader for nothing). Once A holds the lock and its session
    ends, B's lock does displace it, at once.
    """
    acquire, lock, unlock = (
        QUERIES[name].pyformat for name in ("acquire_maintenance_lease", "try_leader_lock", "leader_unlock")
    )
    a_id, b_id = uuid4(), uuid4()

    def take(conn: psycopg.Connection[Any], holder: object, locked: bool) -> Any:
        row = conn.execute(acquire, {"holder": holder, "ttl_seconds": 15.0, "locked": locked}).fetchone()
        return None if row is None else row[0]  # the epoch

    with psycopg.connect(db_url, autocommit=True) as b:
        a = psycopg.connect(db_url, autocommit=True)
        assert b.execute(lock).fetchone() == (True,)
        assert a.execute(lock).fetchone() == (False,)
        assert take(a, a_id, locked=False) == 1  # A leads, without the lock
        assert take(b, b_id, locked=True) is None  # B's lock does not displace a live leader
        b.execute(unlock)
        assert a.execute(lock).fetchone() == (True,)
        assert take(a, a_id, locked=True) == 1  # renewed, now holding the lock
        assert take(b, b_id, locked=False) is None
        a.close()  # A's session ends; the lock goes with it (when its backend has exited)
        wait_for(lambda: b.execute(lock).fetchone() == (True,), 5, "A's lock to be released", interval=0.02)
        assert take(b, b_id, locked=True) == 2  # taken over at once, long before A's 15 s lease ends
    assert scalar(db_url, "SELECT holder FROM awa.maintenance_lease") == b_id


async def test_a_candidate_leaves_the_lock_alone_while_the_holder_has_not_got_it(
    make_client: MakeClient, db_url: str
) -> None:
    """A leader that took the lease without the advisory lock gets it at a renewal: candidates leave it free.

    A live holder without the lock (another session's lease row, holder_locked false) probes the
    lock 300 times while a worker holds elections every 20 ms. A candidate that took the lock at
    every election held it at some of those instants (about one in twenty): two workers whose
    elections and renewals ran in step kept the leader from ever getting it, so a failover waited
    for the lease to expire.
    """
    lock, unlock = QUERIES["try_leader_lock"].pyformat, QUERIES["leader_unlock"].pyformat
    holder = uuid4()
    with psycopg.connect(db_url, autocommit=True) as x:
        x.execute(
            "INSERT INTO awa.maintenance_lease (name, holder, expires_at, holder_locked)"
            " VALUES ('maintenance', %s, now() + interval '1 hour', false)",
            (holder,),
        )
        client = make_client(leader_election_interval=0.02)
        await client.start(["lease_q"])
        await asyncio.sleep(0.1)  # elections are running
        refused = 0
        for _ in range(300):
            if x.execute(lock).fetchone() == (True,):
                x.execute(unlock)
            else:
                refused += 1
            await asyncio.sleep(0.002)
    assert refused == 0
    assert scalar(db_url, "SELECT holder FROM awa.maintenance_lease") == holder


async def test_registry_row_is_refreshed_and_removed_at_clean_shutdown(make_client: MakeClient, db_url: str) -> None:
    client = make_client()

    @client.task("registry_job", queue="reg")
    async def handler(job: Any) -> None:
        pass

    await client.start(["reg:7"])
    instance = instance_of(client)
    row = await wait_until(
        lambda: _registry(db_url, instance) if (_registry(db_url, instance) or {}).get("is_leader") else None
    )
    assert (row["pid"], row["version"], row["jobs_held"]) == (os.getpid(), version("awa-bridge"), 0)
    assert row["queues"] == [{"name": "reg", "max_workers": 7, "running": 0}]
    first = row["heartbeat_at"]
    await wait_until(lambda: (_registry(db_url, instance) or {}).get("heartbeat_at", first) > first)
    await client.shutdown()
    assert _registry(db_url, instance) is None


async def test_leader_prunes_registry_rows_of_dead_workers(make_client: MakeClient, db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.runtime_instances (instance_id, hostname, pid, version, heartbeat_at) "
            "VALUES (gen_random_uuid(), 'gone', 1, '0', now() - interval '1 hour')"
        )
    client = make_client()
    await client.start(["prune_q"])
    await wait_until(lambda: scalar(db_url, "SELECT count(*) FROM awa.runtime_instances WHERE hostname = 'gone'") == 0)


async def test_registry_pruning_sent_long_after_the_leaders_check_prunes_nothing(
    conn: asyncpg.Connection, db_url: str
) -> None:
    """As the heartbeat rescue: a leader stuck between its check and the statement (0.8 s, the
    view's gap 0.625 s) deletes no registry row, however stale; a pass after the view's wait does."""
    await conn.execute(
        "INSERT INTO awa.runtime_instances (instance_id, hostname, pid, version, heartbeat_at) "
        "VALUES (gen_random_uuid(), 'paused', 1, '0', now() - interval '1 hour')"
    )

    class Stuck(PruneInstances):
        async def run_batch(self, db: Asyncpg) -> int:
            time.sleep(0.8)  # the maintenance thread stuck after its check
            return await super().run_batch(db)

    view = View(staleness=1.0, heartbeat_interval=0.25)
    db = as_asyncpg(conn)

    async def fresh() -> None:
        while not view.step():
            await asyncio.sleep(0.05)

    await fresh()
    assert await Stuck(0.1, staleness=1.0).run_pass(db, view) == 0
    assert scalar(db_url, "SELECT count(*) FROM awa.runtime_instances WHERE hostname = 'paused'") == 1
    await asyncio.sleep(0.1)
    await fresh()
    assert await PruneInstances(0.1, staleness=1.0).run_pass(db, view) == 1


async def test_leader_prunes_outcome_counters_past_the_chart_window(make_client: MakeClient, db_url: str) -> None:
    """awa.queue_rollups keeps two days (the longest chart window and a margin), pruned by the leader."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.queue_rollups (queue, minute, completed) VALUES "
            "('charts', date_trunc('minute', now()) - interval '3 days', 5), "
            "('charts', date_trunc('minute', now()) - interval '1 day', 7)"
        )
    client = make_client(cleanup_interval=0.1)
    await client.start(["charts"])
    await wait_until(lambda: scalar(db_url, "SELECT count(*) FROM awa.queue_rollups WHERE completed = 5") == 0)
    assert scalar(db_url, "SELECT count(*) FROM awa.queue_rollups WHERE completed = 7") == 1


def _registry(url: str, instance: object) -> dict[str, Any] | None:
    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute("SELECT * FROM awa.runtime_instances WHERE instance_id = %s", (instance,))
        names = [c.name for c in cur.description or []]
        row = cur.fetchone()
    return dict(zip(names, row, strict=True)) if row else None


# -- per-queue settings in a queue spec -------------------------------------------------------------


def test_queue_spec_takes_count_and_options() -> None:
    q = QueueConfig.parse("email:20:deadline=60,executor=process,max_tasks_per_child=50")
    assert (q.name, q.max_workers, q.deadline, q.executor, q.max_tasks_per_child) == ("email", 20, 60.0, "process", 50)
    assert QueueConfig.parse("email:deadline=1.5").deadline == 1.5
    assert QueueConfig.parse("email:3").max_workers == 3


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("email:20:dedline=60", "unknown option 'dedline'"),
        ("email:20:deadline=soon", r"queue.deadline: 'email:20:deadline=soon': 'soon' is not a float"),
        ("email:20:deadline=0", r"queues\[email\].deadline: must be a positive number"),
        ("email:20:executor=fork", r"queues\[email\].executor: must be one of thread, process"),
    ],
)
def test_bad_queue_spec_names_the_option(spec: str, message: str) -> None:
    with pytest.raises(awa_bridge.ValidationError, match=message):
        QueueConfig.parse(spec)


def test_worker_cli_rejects_a_bad_queue_option(db_url: str) -> None:
    import subprocess
    import sys

    from .procs import REPO_ROOT

    result = subprocess.run(
        [sys.executable, "-m", "awa_bridge", "worker", "tests.worker_app:client", "--queue", "q:2:deadline=-1"],
        cwd=REPO_ROOT,
        env={**os.environ, "DATABASE_URL": db_url},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2
    assert "queues[q].deadline: must be a positive number of seconds" in result.stderr


def test_leader_lease_must_outlast_two_elections() -> None:
    with pytest.raises(awa_bridge.ValidationError, match="leader_lease: must be at least 2 x"):
        WorkerConfig(leader_election_interval=5, leader_lease=6)


def test_process_executor_is_for_plain_sync_handlers(db_url: str) -> None:
    client = Client(db_url)
    with pytest.raises(awa_bridge.ValidationError, match="executor: 'process' is for plain sync handlers"):

        @client.task("proc_async", executor="process")
        async def handler(job: Any) -> None:
            pass


async def test_process_executor_refuses_a_handler_a_child_cannot_import(make_client: MakeClient) -> None:
    client = make_client()

    def make() -> Callable[[Any], None]:
        def nested(job: Any) -> None:
            pass

        return nested

    client.task("nested_kind", queue="procs")(make())
    with pytest.raises(awa_bridge.ValidationError, match=r"queues\[procs\].executor: 'process' runs handlers"):
        await client.start([QueueConfig("procs", executor="process")])


async def test_leader_prunes_job_history_past_its_retention(make_client: MakeClient, db_url: str) -> None:
    """Operator actions and attempt records older than history_retention go, in one pass of
    several batches (25,000 old actions; batch 10,000; cleanup interval 60 s); newer ones stay,
    and a finished job deleted by its own retention takes its attempt records with it."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO awa.job_actions (job_id, action, operator, prior_state, at) "
            "SELECT n, 'retry', 'cli:old', 'failed', now() - interval '40 days' FROM generate_series(1, 25000) AS n"
        )
        conn.execute(
            "INSERT INTO awa.job_actions (job_id, action, operator, prior_state, at) "
            "VALUES (1, 'delete', 'cli:recent', 'failed', now() - interval '2 days')"
        )
        done = awa_bridge.insert_job_sync(conn, {}, kind="old_done", queue="history").id
        conn.execute(
            "UPDATE awa.jobs SET state = 'completed', attempt = 1, finalized_at = now() - interval '1 hour' "
            "WHERE id = %s",
            (done,),
        )
        conn.execute(
            "INSERT INTO awa.job_attempts (job_id, run_lease, attempt, instance_id, worker, started_at) VALUES "
            "(%s, 1, 1, gen_random_uuid(), 'h/1', now() - interval '1 hour'), "
            "(900001, 1, 1, gen_random_uuid(), 'h/2', now() - interval '40 days'), "
            "(900002, 1, 1, gen_random_uuid(), 'h/3', now() - interval '2 days')",
            (done,),
        )
    client = make_client(cleanup_interval=60, completed_retention=60, history_retention=30 * 86400)
    await client.start(["history"])
    await wait_until(lambda: scalar(db_url, "SELECT count(*) FROM awa.job_actions") == 1, 10)
    await wait_until(lambda: scalar(db_url, "SELECT count(*) FROM awa.job_attempts") == 1, 10)
    assert scalar(db_url, "SELECT operator FROM awa.job_actions") == "cli:recent"
    assert scalar(db_url, "SELECT job_id FROM awa.job_attempts") == 900002
    assert scalar(db_url, "SELECT count(*) FROM awa.jobs WHERE id = %s", (done,)) == 0
