"""The worker's pool runs generic plans: each of its statements must have a good one.

The runtime's pool sets ``plan_cache_mode = force_generic_plan`` and
``enable_sort = off`` (``drivers.connect.OWN_STATEMENT_SETTINGS``): its
statements are planned once per connection instead of at every execution. A
generic plan does not know the parameters' values, so a statement written
carelessly (a ``LIMIT`` parameter, a join on a CTE of unknown size) can get a
plan that scans the whole table where the custom plan would read a few rows.

This reads the generic plan of every statement that pool runs, on four tables:
200,000 jobs with statistics; the same as a bulk load leaves them before
autovacuum's first ANALYZE (or forever, on a server with autovacuum off),
where the planner guesses every selectivity; one queue's backlog of 50,000,
bulk-loaded and never analyzed; and 200,000 jobs whose statistics were taken
while every job was finished, the available half having come since (a burst
after a quiet ANALYZE), so the planner believes hardly any job is available.

It refuses any plan that reads ``awa.jobs`` other than through an index
condition on the index's leading column or row addresses: an index condition
on a later column (the claim's ``id = ANY(...)`` through jobs_dispatch_idx,
whose leading column is ``queue``) reads the whole index, every available job,
at every execution. And the claim must read its candidates in dispatch order,
with no sort: on the backlog it sorted every available job of the queue at
every claim until the pool set ``enable_sort = off``.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from awa_bridge.drivers.connect import OWN_STATEMENT_SETTINGS
from awa_bridge.migrations import migrate
from awa_bridge.sql import QUERIES

from .dbutil import create_database, drop_database, statistics

pytestmark = pytest.mark.slow

NOW = datetime.now(UTC)
LEASE = {"id": 1, "lease": 1}
PROGRESS = {"progress": None, "metadata": "{}"}

# Every statement the runtime's pool runs, with parameters of the kind the worker passes.
WORKER_POOL_STATEMENTS: dict[str, dict[str, Any]] = {
    "claim_jobs": {
        "queue": "q",
        "limit": 100,
        "deadline_seconds": 300.0,
        "instance_id": uuid.uuid4(),
        "worker": "host/1",
        "after_priority": 2,
        "after_run_at": NOW,
        "after_id": 1000,
    },
    "age_priorities": {"queue": "q", "aging_seconds": 60.0, "limit": 1000},
    "complete_jobs": {"ids": "{1,2,3}", "leases": "{1,1,1}"},  # array literals, as the completer sends
    "complete_job_with_progress": {**LEASE, **PROGRESS},
    "complete_job_with_result": {**LEASE, **PROGRESS, "result": "{}"},
    "finish_attempt": {
        **LEASE,
        **PROGRESS,
        "state": "retryable",
        "run_at": NOW,
        "refund": 0,
        "error": '{"error": "e"}',
    },
    "read_attempts": {"ids": [1, 2, 3]},
    "flush_progress": {**LEASE, **PROGRESS},
    "register_callback": {**LEASE, "callback_id": str(uuid.uuid4()), "timeout_seconds": 60.0},
    "raise_max_attempts": {**LEASE, "max_attempts": 30},
    "upsert_queue_rollups": {
        "queues": ["q"],
        "minutes": [NOW],
        "completed": [1],
        "failed": [0],
        "retried": [0],
        "cancelled": [0],
    },
    "release_jobs": {"ids": [1, 2, 3], "leases": [1, 1, 1]},
    # The start-up checks (Runtime.open), on the same pool (awa_schema_version_rows too, on a database
    # awa-pg migrated only: ours has no awa.schema_version to plan it against).
    "awa_pg_schema": {},
    "relation_exists": {"name": "awa.bridge_migrations"},
    "applied_migrations": {},
    # A queue to run that no handler names: is it known (else a warning of a typo)?
    "queue_known": {"queue": "q"},
}

# The modules whose statements run on the runtime's pool, and what they hold that runs elsewhere.
POOL_MODULES = ("runtime", "producer", "completer", "attempt", "rollup", "maintenance/aging")
ELSEWHERE = {"prune_queue_rollups"}  # rollup.py's retention: the leader's own connection


def test_the_list_holds_every_statement_of_the_pool() -> None:
    worker = Path(__file__).resolve().parent.parent / "awa_bridge" / "worker"
    used = set()
    for module in POOL_MODULES:
        used |= set(re.findall(r'QUERIES\["(\w+)"\]', (worker / f"{module}.py").read_text(encoding="utf-8")))
    assert used - set(WORKER_POOL_STATEMENTS) - ELSEWHERE == set()


def fill_jobs(rows: int) -> str:
    """Half available, half completed, of five kinds on three queues."""
    return (
        "INSERT INTO awa.jobs (kind, queue, args, state, priority, attempt, run_lease, finalized_at)"
        " SELECT 'k' || (g % 5), 'q' || (g % 3), '{}',"
        " CAST(CASE WHEN g % 2 = 0 THEN 'available' ELSE 'completed' END AS awa.job_state),"
        " 1 + g % 4, 1, 1, CASE WHEN g % 2 = 0 THEN NULL ELSE now() END"
        f" FROM generate_series(1, {rows}) AS g"
    )


# Statistics of a quiet moment (every job finished), then the available half arrives: stale ones.
FINISH_ALL = "UPDATE awa.jobs SET state = 'completed', finalized_at = now() WHERE state = 'available'"
REOPEN_HALF = "UPDATE awa.jobs SET state = 'available', finalized_at = NULL WHERE id % 2 = 0"


# One queue's backlog, bulk-loaded into an empty table (never analyzed): with the selectivities
# guessed, the claim's two ways to its candidates cost the same, and without enable_sort = off the
# planner sorted every available job of the queue at every claim.
LOAD_BACKLOG = "INSERT INTO awa.jobs (kind, queue, args) SELECT 'k', 'q', '{}' FROM generate_series(1, 50000)"


@pytest.fixture(
    scope="module", params=["analyzed", "never analyzed", "a backlog never analyzed", "analyzed before a burst"]
)
def big(request: pytest.FixtureRequest, server_url: str) -> Iterator[str]:
    """A throwaway database whose awa.jobs holds 200,000 jobs, with statistics or without any; or
    one queue's backlog of 50,000 without statistics; or 200,000 jobs with statistics that say no
    job is available when half of them are."""
    url = create_database(server_url, prefix="awa_plans")
    try:
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            if request.param == "a backlog never analyzed":
                with statistics(conn, ["awa.jobs"], False):
                    conn.execute(LOAD_BACKLOG)
            elif request.param == "analyzed before a burst":
                conn.execute("ALTER TABLE awa.jobs SET (autovacuum_enabled = false)")  # keep them stale
                conn.execute(fill_jobs(200_000))
                conn.execute(FINISH_ALL)
                conn.execute("ANALYZE awa.jobs")
                conn.execute(REOPEN_HALF)
            else:
                with statistics(conn, ["awa.jobs"], request.param == "analyzed"):
                    conn.execute(fill_jobs(200_000))
        yield url
    finally:
        drop_database(server_url, url)


def leading_columns(conn: psycopg.Connection[Any]) -> dict[str, str]:
    """Each index of awa.jobs by name, with its leading column (an expression's text for an expression index)."""
    rows = conn.execute(
        "SELECT c.relname, pg_get_indexdef(i.indexrelid, 1, true) FROM pg_index AS i"
        " JOIN pg_class AS c ON c.oid = i.indexrelid WHERE i.indrelid = 'awa.jobs'::regclass"
    ).fetchall()
    return {name: column for name, column in rows}


def as_the_pool_plans(conn: psycopg.Connection[Any]) -> None:
    """The session settings of the runtime's pool."""
    for setting, value in OWN_STATEMENT_SETTINGS.items():
        conn.execute(sql.SQL("SET {} = {}").format(sql.Identifier(setting), sql.Literal(value)))


def generic_plan(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> dict[str, Any]:
    query = QUERIES[name]
    conn.execute("DEALLOCATE ALL")
    conn.execute(f"PREPARE stmt AS {query.numeric}")  # trusted text: our own statements
    args = sql.SQL(", ").join(sql.Literal(value) for value in query.positional(params))
    execute = sql.SQL("EXPLAIN (FORMAT JSON) EXECUTE stmt") + (sql.SQL("({})").format(args) if params else sql.SQL(""))
    (raw,) = conn.execute(execute).fetchone()
    return dict((raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"])


def scans_of_jobs(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan] if plan.get("Relation Name") == "jobs" and plan["Node Type"] != "ModifyTable" else []
    for child in plan.get("Plans", []):
        found += scans_of_jobs(child)
    return found


def index_scans(plan: dict[str, Any]) -> list[dict[str, Any]]:
    found = [plan] if plan["Node Type"] == "Bitmap Index Scan" else []
    for child in plan.get("Plans", []):
        found += index_scans(child)
    return found


def nodes(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    yield plan
    for child in plan.get("Plans", []):
        yield from nodes(child)


def on_leading_column(scan: dict[str, Any], leading: dict[str, str]) -> bool:
    """The scan's index condition constrains the index's leading column, so it reads a range, not the index."""
    column = leading[scan["Index Name"]]
    return "Index Cond" in scan and re.search(rf"\b{re.escape(column)}\b", scan["Index Cond"]) is not None


def reads_a_few_rows(scan: dict[str, Any], leading: dict[str, str]) -> bool:
    if scan["Node Type"] in ("Index Scan", "Index Only Scan"):
        return on_leading_column(scan, leading)
    if scan["Node Type"] == "Bitmap Heap Scan":
        return all(on_leading_column(index, leading) for index in index_scans(scan))
    return scan["Node Type"] == "Tid Scan"


@pytest.mark.parametrize("name", sorted(WORKER_POOL_STATEMENTS))
def test_generic_plan_reads_jobs_through_an_index(big: str, name: str) -> None:
    with psycopg.connect(big) as conn:
        as_the_pool_plans(conn)
        leading = leading_columns(conn)
        plan = generic_plan(conn, name, WORKER_POOL_STATEMENTS[name])
        conn.rollback()
    bad = [scan["Node Type"] for scan in scans_of_jobs(plan) if not reads_a_few_rows(scan, leading)]
    assert bad == [], json.dumps(plan, indent=1)
    # The pool plans with enable_sort = off; a statement that still sorts had no other way, and
    # before PostgreSQL 18 its plan would cost 10^10 (JIT-compiled at every execution, without jit = off).
    assert [node for node in nodes(plan) if "Sort" in node["Node Type"]] == [], json.dumps(plan, indent=1)


def test_the_claim_reads_its_candidates_in_dispatch_order(big: str) -> None:
    """No sort in the claim's plan, whatever the statistics say: its candidates come from
    jobs_dispatch_idx in dispatch order, a LIMIT's worth of entries, not every available job of the
    queue sorted at every claim (what the plan was on statistics taken before a burst)."""
    with psycopg.connect(big) as conn:
        as_the_pool_plans(conn)
        plan = generic_plan(conn, "claim_jobs", WORKER_POOL_STATEMENTS["claim_jobs"])
        conn.rollback()
    assert [node for node in nodes(plan) if "Sort" in node["Node Type"]] == [], json.dumps(plan, indent=1)
    assert "jobs_dispatch_idx" in [node.get("Index Name") for node in scans_of_jobs(plan)], json.dumps(plan, indent=1)


@pytest.fixture(scope="module")
def empty(server_url: str) -> Iterator[str]:
    """A throwaway database just migrated: awa.jobs empty and never analyzed, as a fresh install's."""
    url = create_database(server_url, prefix="awa_plans")
    try:
        migrate(url)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("ALTER TABLE awa.jobs SET (autovacuum_enabled = false)")  # no ANALYZE meanwhile
        yield url
    finally:
        drop_database(server_url, url)


@pytest.mark.parametrize("name", sorted(WORKER_POOL_STATEMENTS))
def test_a_plan_made_while_jobs_was_empty_still_reads_jobs_through_an_index(empty: str, name: str) -> None:
    """A worker started on a fresh install prepares its statements while awa.jobs is empty and has
    never been analyzed; each connection keeps those generic plans until an ANALYZE invalidates
    them (on a server with autovacuum off, for the connection's life). The planner then takes the
    table for ten pages, for which reading it whole looks cheapest: the claim's UPDATE found its
    200 ids by reading every row of awa.jobs, and a sustained 16,000 jobs/s fell to 1,020-1,340
    a second until autovacuum's first ANALYZE (bench_storage.py, 2026-12-07). Planned while empty,
    executed once 20,000 jobs are there: still through an index."""
    params = WORKER_POOL_STATEMENTS[name]
    with psycopg.connect(empty, autocommit=True) as conn:
        # Empty again: the rows an earlier test's rolled-back fill wrote still take up disk, and the
        # planner would read the table's size from that instead of guessing ten pages.
        conn.execute("TRUNCATE awa.jobs")
        found = conn.execute(
            "SELECT pg_relation_size('awa.jobs'), reltuples FROM pg_class WHERE oid = 'awa.jobs'::regclass"
        ).fetchone()
        assert found == (0, -1), found  # no pages, never analyzed
    with psycopg.connect(empty) as conn:
        as_the_pool_plans(conn)
        leading = leading_columns(conn)
        query = QUERIES[name]
        conn.execute(f"PREPARE stmt AS {query.numeric}")  # trusted text: our own statements
        args = sql.SQL(", ").join(sql.Literal(value) for value in query.positional(params))
        execute = sql.SQL("EXECUTE stmt") + (sql.SQL("({})").format(args) if params else sql.SQL(""))
        conn.execute(execute)  # the generic plan is made now, on the empty table, and cached
        # Kept until an invalidation, whatever fills the table; were it made again now, 20,000 rows
        # without statistics would make an index look less worth it than 200,000 would, not more.
        conn.execute(fill_jobs(20_000))
        (raw,) = conn.execute(sql.SQL("EXPLAIN (FORMAT JSON) ") + execute).fetchone()
        conn.rollback()
    plan = dict((raw if isinstance(raw, list) else json.loads(raw))[0]["Plan"])
    bad = [scan["Node Type"] for scan in scans_of_jobs(plan) if not reads_a_few_rows(scan, leading)]
    assert bad == [], json.dumps(plan, indent=1)
