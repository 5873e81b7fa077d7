"""The leader's batch statements stay O(batch) on a big table: how PostgreSQL plans them.

A retention batch used to be ``DELETE ... WHERE id IN (SELECT id ... LIMIT n)``,
which the planner turned into a hash join over a sequential scan of the whole
table: every batch of 10,000 read every row, and cleanup fell behind any
worker that finished jobs faster than it could scan. These tests fill a table
the way a busy system looks (finished jobs in and out of retention, a few
failed ones inside their longer window, running jobs), let ANALYZE see it or
not (a bulk load before autovacuum's first ANALYZE, a server with autovacuum
off), and read the real plans of the statements the leader runs: each batch
must come from an index range and be deleted by row address, never by a scan
of the table. They also check what each statement does.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from psycopg import sql as psql

from awa_bridge.drivers.connect import LEADER_SETTINGS
from awa_bridge.migrations import migrate
from awa_bridge.sql import QUERIES
from awa_bridge.worker.maintenance.services import Cleanup, PruneClaims, PruneHistory, View

from .dbutil import statistics
from .test_contract import _index_names, _node_types

pytestmark = pytest.mark.slow

OLD, FRESH, FAILED, RUNNING = 30_000, 30_000, 3_000, 200
DAY = 86_400.0


HISTORY_TABLES = ["awa.jobs", "awa.job_actions", "awa.job_attempts", "awa.job_claims"]


@pytest.fixture(params=["analyzed", "never analyzed"])
def busy(request: pytest.FixtureRequest, make_database: Callable[[], str]) -> str:
    """Completed jobs past the completed retention (a day) and inside it; failed ones inside the
    failed retention (three days) but past the completed one; running ones, half past their deadline."""
    db_url = make_database()
    migrate(db_url)
    fill = (
        "INSERT INTO awa.jobs (kind, queue, args, state, attempt, run_lease, attempted_at, finalized_at,"
        " heartbeat_at, deadline_at)"
        " SELECT 'k' || (g %% 7), 'q' || (g %% 3), '{}', CAST(%s AS awa.job_state), 1, 1, now(),"
        " now() - make_interval(secs => %s + g %% 600), %s, %s FROM generate_series(1, %s) AS g"
    )
    with (
        psycopg.connect(db_url, autocommit=True) as conn,
        statistics(conn, HISTORY_TABLES, request.param == "analyzed"),
    ):
        conn.execute(fill, ("completed", 2 * DAY, None, None, OLD))
        conn.execute(fill, ("completed", 60.0, None, None, FRESH))
        conn.execute(fill, ("failed", 1.5 * DAY, None, None, FAILED))
        conn.execute(
            "INSERT INTO awa.jobs (kind, queue, state, attempt, run_lease, attempted_at, heartbeat_at, deadline_at)"
            " SELECT 'k', 'q0', 'running', 1, 1, now(), now(),"
            " now() + CASE WHEN g %% 2 = 0 THEN interval '-1 minute' ELSE interval '5 minutes' END"
            " FROM generate_series(1, %s) AS g",
            (RUNNING,),
        )
        # History: operator actions, attempt records and claim records, half of them past a day.
        at = "now() - make_interval(secs => CASE WHEN g %% 2 = 0 THEN 2 * 86400 ELSE 60 END)"
        conn.execute(
            "INSERT INTO awa.job_actions (job_id, action, operator, prior_state, at)"
            f" SELECT g, 'retry', 'op', 'failed', {at} FROM generate_series(1, %s) AS g",
            (OLD,),
        )
        conn.execute(
            "INSERT INTO awa.job_attempts (job_id, run_lease, attempt, instance_id, worker, started_at)"
            f" SELECT g, 1, 1, gen_random_uuid(), 'h/1', {at} FROM generate_series(1, %s) AS g",
            (OLD,),
        )
        conn.execute(
            "INSERT INTO awa.job_claims (claimed_at, instance_id, worker, job_ids)"
            f" SELECT {at}, gen_random_uuid(), 'h/1', ARRAY[-g] FROM generate_series(1, %s) AS g",
            (OLD,),
        )
    return db_url


def plan_of(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> dict[str, Any]:
    (raw,) = conn.execute("EXPLAIN (FORMAT JSON) " + QUERIES[name].pyformat, params).fetchone()
    return dict((raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"])


def seq_scanned(plan: dict[str, Any]) -> list[str]:
    found = [plan.get("Relation Name", "?")] if plan["Node Type"] == "Seq Scan" else []
    for child in plan.get("Plans", []):
        found += seq_scanned(child)
    return found


def test_retention_deletes_an_index_range_by_row_address(busy: str) -> None:
    assert Cleanup.batch == OLD // 3
    params = {"completed_seconds": DAY, "failed_seconds": 3 * DAY, "limit": Cleanup.batch}
    with psycopg.connect(busy, autocommit=True) as conn:
        plan = plan_of(conn, "delete_finished", params)
        assert "jobs" not in seq_scanned(plan), plan
        assert "jobs_finalized_idx" in _index_names(plan), plan
        assert "Tid Scan" in _node_types(plan), plan
        deleted = [conn.execute(QUERIES["delete_finished"].pyformat, params).fetchone()[0] for _ in range(4)]
        assert deleted == [10_000, 10_000, 10_000, 0]  # then a short batch ends the pass
        left = dict(conn.execute("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1").fetchall())
    assert left == {"completed": FRESH, "failed": FAILED, "running": RUNNING}


def test_deadline_rescue_reads_the_running_jobs_not_the_table(busy: str) -> None:
    """No index on deadline_at (v011): the running jobs come from jobs_heartbeat_idx."""
    with psycopg.connect(busy) as conn:
        plan = plan_of(conn, "rescue_expired_deadlines", {"limit": 1000})
        assert "jobs" not in seq_scanned(plan), plan
        assert "jobs_heartbeat_idx" in _index_names(plan), plan
        rescued = conn.execute(QUERIES["rescue_expired_deadlines"].pyformat, {"limit": 1000}).fetchall()
        assert len(rescued) == RUNNING // 2
        conn.rollback()


def test_heartbeat_rescue_reads_the_running_jobs_and_leaves_the_held_ones(busy: str) -> None:
    """The running jobs come from jobs_heartbeat_idx; the rescuer's own attempts (here 50) are left."""
    with psycopg.connect(busy) as conn:
        conn.execute("UPDATE awa.jobs SET heartbeat_at = now() - interval '1 hour' WHERE state = 'running'")
        held = conn.execute("SELECT id, run_lease FROM awa.jobs WHERE state = 'running' LIMIT 50").fetchall()
        (viewed_at,) = conn.execute(QUERIES["server_clock"].pyformat).fetchone()
        params = {
            "staleness_seconds": 90.0,
            "limit": 1000,
            "held_ids": [i for i, _ in held],
            "held_leases": [lease for _, lease in held],
            **View(90.0, 30.0).guard(),
            "viewed_at": viewed_at,  # as View.check reads it
        }
        plan = plan_of(conn, "rescue_stale_heartbeats", params)
        assert "jobs" not in seq_scanned(plan), plan
        assert "jobs_heartbeat_idx" in _index_names(plan), plan
        rescued = {row[0] for row in conn.execute(QUERIES["rescue_stale_heartbeats"].pyformat, params).fetchall()}
        assert len(rescued) == RUNNING - 50 and rescued.isdisjoint(i for i, _ in held)
        conn.rollback()


@pytest.mark.parametrize(
    ("name", "batch"),
    [
        ("prune_job_actions", PruneHistory.batch),
        ("prune_job_attempts", PruneHistory.batch),
        ("prune_job_claims", PruneClaims.batch),
    ],
)
def test_history_pruning_is_by_row_address(busy: str, name: str, batch: int) -> None:
    """Each with the batch size its leader service uses."""
    params = {"retention_seconds": DAY, "limit": batch}
    with psycopg.connect(busy) as conn:
        plan = plan_of(conn, name, params)
        assert "Tid Scan" in _node_types(plan), plan
        assert seq_scanned(plan) == [], plan
        assert conn.execute(QUERIES[name].pyformat, params).fetchone()[0] == batch
        conn.rollback()


# The leader's batches over awa.jobs, with parameters of the kind its services pass.
LEADER_BATCHES: dict[str, dict[str, Any]] = {
    "delete_finished": {"completed_seconds": DAY, "failed_seconds": 3 * DAY, "limit": 1000},
    "promote_due": {"limit": 1000},
    "rescue_callback_timeouts": {"limit": 1000},
    "rescue_expired_deadlines": {"limit": 1000},
    "rescue_stale_heartbeats": {
        "staleness_seconds": 90.0,
        "limit": 1000,
        "held_ids": [1],
        "held_leases": [1],
        # The leader's view, checked now; a day's gap so that the guard holds however late the test runs.
        "viewed_at": datetime.now(UTC),
        "max_gap_seconds": float(DAY),
    },
}


@pytest.mark.parametrize("name", sorted(LEADER_BATCHES))
def test_a_batch_first_run_on_an_empty_table_is_planned_again_once_it_fills(
    make_database: Callable[[], str], name: str
) -> None:
    """On a fresh install the leader runs its batches every tick while awa.jobs is still empty and
    never analyzed. Under PostgreSQL's default plan_cache_mode a prepared statement (asyncpg prepares
    every one) switches after five executions to a generic plan made then, for a table the planner
    takes for ten pages, and keeps it until an ANALYZE: retention then read the whole table at every
    batch. The leader's session (``LEADER_SETTINGS``: ``enable_seqscan = off``) keeps such a plan on
    its indexes and row addresses."""
    db_url = make_database()
    migrate(db_url)
    params = LEADER_BATCHES[name]
    query = QUERIES[name]
    args = psql.SQL(", ").join(psql.Literal(value) for value in query.positional(params))
    execute = psql.SQL("EXECUTE stmt({})").format(args)
    with psycopg.connect(db_url) as conn:
        for setting, value in LEADER_SETTINGS.items():
            conn.execute(psql.SQL("SET {} = {}").format(psql.Identifier(setting), psql.Literal(value)))
        conn.execute(f"PREPARE stmt AS {query.numeric}")  # trusted text: our own statements
        for _ in range(6):  # five custom plans, then PostgreSQL's choice
            conn.execute(execute)
        conn.execute(
            "INSERT INTO awa.jobs (kind, queue, args, state, attempt, run_lease, run_at, attempted_at,"
            " heartbeat_at, deadline_at, finalized_at, callback_timeout_at)"
            " SELECT 'k', 'q', '{}', CAST(s AS awa.job_state), 1, 1, now(), now(), now(), now() + interval '1 hour',"
            " CASE WHEN s = 'completed' THEN now() END, CASE WHEN s = 'waiting_external' THEN now() END"
            " FROM generate_series(1, 200000) AS g,"
            " LATERAL (SELECT (ARRAY['completed', 'running', 'scheduled', 'waiting_external'])[1 + g % 4] AS s) AS x"
        )
        (raw,) = conn.execute(psql.SQL("EXPLAIN (FORMAT JSON) ") + execute).fetchone()
        conn.rollback()
    plan = dict((raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"])
    assert "jobs" not in seq_scanned(plan), json.dumps(plan, indent=1)


async def test_the_leader_and_the_worker_pool_connect_with_their_settings(make_database: Callable[[], str]) -> None:
    """The settings the plan tests assume are the ones the real connections carry."""
    import uuid

    from awa_bridge.drivers.connect import OWN_STATEMENT_SETTINGS, create_pool
    from awa_bridge.worker.config import WorkerConfig
    from awa_bridge.worker.maintenance.leader import Maintenance

    db_url = make_database()
    leader = Maintenance(db_url, WorkerConfig(), uuid.uuid4(), lambda rows: None, None)  # type: ignore[arg-type]
    db = await leader._connect()
    try:
        for setting, value in LEADER_SETTINGS.items():
            assert await db.conn.fetchval(f"SHOW {setting}") == value
    finally:
        await db.close()
    pool = await create_pool(db_url, min_size=1, max_size=1, own_statements=True)
    try:
        async with pool.acquire() as conn:
            for setting, value in OWN_STATEMENT_SETTINGS.items():
                assert await conn.conn.fetchval(f"SHOW {setting}") == value
    finally:
        await pool.close()
