"""Maintenance services that keep up, the leader's lease, the worker registry, per-queue settings on the CLI.

In-process workers (``Client.start``) on the test database; the chaos tests
with real subprocesses are in tests/test_worker_stuck.py.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from importlib.metadata import version
from typing import Any
from uuid import uuid4

import psycopg
import pytest

import awa_bridge
from awa_bridge.sql import QUERIES
from awa_bridge.worker import Client, QueueConfig, WorkerConfig

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


async def test_cleanup_repeats_its_batch_until_short_and_keeps_up(make_client: MakeClient, db_url: str) -> None:
    """5,000 completed jobs past retention go in one pass, not 1,000 per cleanup interval (60 s)."""
    with psycopg.connect(db_url) as conn:
        awa_bridge.insert_many_sync(conn, [{"n": i} for i in range(5000)], kind="old", queue="retention")
        conn.execute(
            "UPDATE awa.jobs SET state = 'completed', attempt = 1, finalized_at = now() - interval '1 hour' "
            "WHERE queue = 'retention'"
        )
        conn.commit()
    client = make_client(completed_retention=60, cleanup_interval=60)
    await client.start(["retention"])
    await wait_until(lambda: scalar(db_url, "SELECT count(*) FROM awa.jobs WHERE queue = 'retention'") == 0, 10)


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
