"""Queue statistics on a table with a million finished jobs: timing and plan.

    python benchmarks/bench_admin_stats.py --database-url postgresql://postgres@127.0.0.1:5432/postgres

Creates a throwaway database on that server (dropped at the end), applies the
migrations, and fills ``awa.jobs`` with ``--rows`` completed jobs spread over
8 queues, their ``finalized_at`` spread at random over the last 48 hours, plus a
realistic live set (available with a backlog, running, scheduled, retryable,
waiting_external, failed). Two ways to load (``--load``):

* ``copy`` (default): ``awa_bridge.insert_many_sync`` (COPY) in batches of
  100,000 available jobs, then one UPDATE per batch marking them completed;
* ``sql``: ``INSERT ... SELECT generate_series`` straight into completed.

It then times ``awa_bridge.admin.queue_stats`` (all queues, and one queue)
and, for comparison, a naive ``GROUP BY queue, state``, twice: right
after the load (only ANALYZE, the visibility map still empty: the worst case
for index-only scans) and after VACUUM (what autovacuum leaves). It prints
p50 / p95 / max over ``--runs`` calls and the EXPLAIN (ANALYZE, BUFFERS) plan
of the stats statement. Next to the client-side timings it prints the
server-side execution time and the buffers (8 kB pages) each statement
touches, a measure that does not depend on how busy the machine is, and a
naive ``GROUP BY queue, state`` as the baseline an unindexed stats query
would pay. Without ``--database-url`` it uses ``$DATABASE_URL``,
else an embedded PostgreSQL.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_procs as bp
import psycopg

from awa_bridge import admin, insert_many_sync, migrate
from awa_bridge.sql import QUERIES

QUEUES = [f"q{i}" for i in range(8)]
BATCH = 100_000


def with_dbname(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


def load_copy(conn: psycopg.Connection[Any], rows: int) -> None:
    done = 0
    while done < rows:
        n = min(BATCH, rows - done)
        with conn.transaction():
            for index, queue in enumerate(QUEUES):
                count = n // len(QUEUES) + (1 if index < n % len(QUEUES) else 0)
                insert_many_sync(conn, [{"n": done + i} for i in range(count)], kind="bench_job", queue=queue)
            # finalized_at spread at random over the last 48 h, as a steady stream of completions leaves it.
            conn.execute(
                """
                UPDATE awa.jobs
                SET state = 'completed', attempt = 1, run_lease = 1,
                    finalized_at = now() - random() * interval '48 hours',
                    attempted_at = now() - interval '48 hours'
                WHERE state = 'available' AND kind = 'bench_job'
                """
            )
        done += n
        print(f"  loaded {done:,} completed jobs", flush=True)


def load_sql(conn: psycopg.Connection[Any], rows: int) -> None:
    with conn.transaction():
        conn.execute(
            """
            INSERT INTO awa.jobs (kind, queue, args, state, attempt, run_lease, run_at, attempted_at, finalized_at,
                                  created_at)
            SELECT 'bench_job', 'q' || (g %% 8), jsonb_build_object('n', g), 'completed', 1, 1,
                   now() - make_interval(secs => (%(total)s - g) * 172800.0 / %(total)s) - interval '2 s',
                   now() - make_interval(secs => (%(total)s - g) * 172800.0 / %(total)s) - interval '1 s',
                   now() - make_interval(secs => (%(total)s - g) * 172800.0 / %(total)s),
                   now() - make_interval(secs => (%(total)s - g) * 172800.0 / %(total)s) - interval '3 s'
            FROM generate_series(1, %(total)s) AS g
            """,
            {"total": rows},
        )
    print(f"  loaded {rows:,} completed jobs", flush=True)


LIVE = """
INSERT INTO awa.jobs (kind, queue, state, run_at, attempt, heartbeat_at, deadline_at, finalized_at)
SELECT 'live_job', 'q' || (g % 8), s.state::awa.job_state,
       CASE s.state WHEN 'available' THEN now() - make_interval(secs => g % 600)
                    WHEN 'scheduled' THEN now() + interval '1 hour'
                    WHEN 'retryable' THEN now() + interval '10 minutes' ELSE now() END,
       CASE WHEN s.state IN ('running', 'retryable', 'failed', 'waiting_external') THEN 1 ELSE 0 END,
       CASE WHEN s.state = 'running' THEN now() END,
       CASE WHEN s.state = 'running' THEN now() + interval '5 minutes' END,
       CASE WHEN s.state = 'failed' THEN now() END
FROM (VALUES ('available', 2000), ('running', 80), ('scheduled', 500), ('retryable', 300),
             ('waiting_external', 40), ('failed', 200)) AS s(state, n),
     generate_series(1, s.n) AS g
"""


NAIVE = "SELECT queue, state, count(*) FROM awa.jobs GROUP BY queue, state"


def timed(fn: Callable[[], Any], runs: int) -> tuple[list[float], Any]:
    fn()  # warm the cache and the plan
    samples = []
    result = None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()
        samples.append((time.perf_counter() - start) * 1000)
    return samples, result


def percentiles(samples: list[float]) -> tuple[float, float, float]:
    ordered = sorted(samples)
    return statistics.median(ordered), ordered[max(0, int(len(ordered) * 0.95) - 1)], ordered[-1]


def server_side(conn: psycopg.Connection[Any], sql: str, params: dict[str, Any], runs: int = 5) -> tuple[float, int]:
    """Median server execution time (ms) and buffers touched, from EXPLAIN (ANALYZE, BUFFERS).

    Buffers (shared hit + read, cumulative over the plan) do not depend on
    how busy the machine is: they show how much of the table a statement reads.
    """
    times, buffers = [], 0
    for _ in range(runs):
        plan = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", params).fetchone()[0][0]
        times.append(plan["Execution Time"])
        buffers = plan["Plan"]["Shared Hit Blocks"] + plan["Plan"]["Shared Read Blocks"]
    return statistics.median(times), buffers


def explain(conn: psycopg.Connection[Any], name: str, params: dict[str, Any]) -> str:
    rows = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {QUERIES[name].pyformat}", params).fetchall()
    return "\n".join(row[0] for row in rows)


def measure(conn: psycopg.Connection[Any], label: str, runs: int, show_plan: bool) -> None:
    load = " ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"\n== {label} (load average {load}) ==")
    print(f"{'statement':<40} {'p50 ms':>8} {'p95 ms':>8} {'max ms':>8} {'server ms':>10} {'buffers':>9}")
    stats_sql = QUERIES["queue_stats"].pyformat
    cases: list[tuple[str, Callable[[], Any], str, dict[str, Any]]] = [
        ("admin.queue_stats() (all 8 queues)", lambda: admin.queue_stats(conn), stats_sql, {"queue": None}),
        ("admin.queue_stats('q3')", lambda: admin.queue_stats(conn, "q3"), stats_sql, {"queue": "q3"}),
        ("naive GROUP BY queue, state (baseline)", lambda: conn.execute(NAIVE).fetchall(), NAIVE, {}),
    ]
    results = {}
    for name, fn, sql, params in cases:
        samples, results[name] = timed(fn, runs)
        p50, p95, top = percentiles(samples)
        server_ms, buffers = server_side(conn, sql, params)
        print(f"{name:<40} {p50:8.2f} {p95:8.2f} {top:8.2f} {server_ms:10.2f} {buffers:9d}")
    stats = results["admin.queue_stats() (all 8 queues)"]
    total_recent = sum(s.completed_last_hour for s in stats)
    print(
        f"check: {len(stats)} queues; available {sum(s.available for s in stats)}, running "
        f"{sum(s.running for s in stats)}, failed {sum(s.failed for s in stats)}, completed in the last hour "
        f"{total_recent}, max lag {max((s.lag_seconds or 0) for s in stats):.0f} s"
    )
    jit = conn.execute(f"EXPLAIN (FORMAT JSON) {stats_sql}", {"queue": None}).fetchone()[0][0]
    print(f"planner's cost estimate for queue_stats: {jit['Plan']['Total Cost']:.0f}", end="")
    print(f" (jit_above_cost {conn.execute('SHOW jit_above_cost').fetchone()[0]}; JIT used: {'JIT' in jit})")
    if show_plan:
        print("\nEXPLAIN (ANALYZE, BUFFERS) queue_stats, all queues:")
        print(explain(conn, "queue_stats", {"queue": None}))
        print("\nEXPLAIN (ANALYZE, BUFFERS) queue_stats, queue 'q3':")
        print(explain(conn, "queue_stats", {"queue": "q3"}))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--database-url", default=os.environ.get("DATABASE_URL"))
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--load", choices=["copy", "sql"], default="copy")
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--no-plan", action="store_true", help="skip the EXPLAIN output")
    ns = parser.parse_args()
    bp.require_positive(parser, ns, "--rows", "--runs")

    url, embedded, _ = bp.server(ns.database_url)
    name = f"awa_bench_stats_{uuid.uuid4().hex[:8]}"
    db = with_dbname(url, name)
    try:
        with psycopg.connect(url, autocommit=True) as conn:
            version = conn.execute("SHOW server_version").fetchone()[0]
            conn.execute(f'CREATE DATABASE "{name}"')
        migrate(db)
        print(f"PostgreSQL {version}; {ns.rows:,} completed jobs over 48 h in 8 queues, loaded with {ns.load}")
        with psycopg.connect(db, autocommit=True) as conn:
            started = time.perf_counter()
            (load_copy if ns.load == "copy" else load_sql)(conn, ns.rows)
            conn.execute(LIVE)
            print(f"  load took {time.perf_counter() - started:.1f} s")
            conn.execute("ANALYZE awa.jobs")
            size, pages = conn.execute(
                "SELECT pg_size_pretty(pg_total_relation_size('awa.jobs')), "
                "pg_relation_size('awa.jobs') / current_setting('block_size')::int"
            ).fetchone()
            print(f"  awa.jobs with its indexes: {size}; the table alone is {pages:,} pages (buffers)")
            measure(conn, "after the load (ANALYZE only, visibility map empty)", ns.runs, show_plan=False)
            conn.execute("VACUUM (ANALYZE) awa.jobs")
            measure(conn, "after VACUUM", ns.runs, show_plan=not ns.no_plan)
    finally:
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if embedded is not None:
            embedded.cleanup()
    return 0


if __name__ == "__main__":
    bp.run_main(main, "interrupted: database dropped")
