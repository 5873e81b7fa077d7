"""How fast the awa_django admin pages are on a big jobs table.

    python benchmarks/bench_django_admin.py                  # 1,000,000 finished jobs
    python benchmarks/bench_django_admin.py --jobs 200000 --runs 3

Builds a throwaway database (on DATABASE_URL's server, else an embedded
PostgreSQL), migrates it with `manage.py migrate` (awa_django's migrations),
fills awa.jobs with finished jobs (completed, a few failed and cancelled) plus
a small live backlog and 25,000 failed jobs of one kind, an attempt record
(awa.job_attempts) for each finished job, two days of per-minute queue
rollups and 15 worker rows (3 of them gone), ANALYZEs, then requests
each admin page through Django's test client as a logged-in superuser, and
finally times "select all + Retry" over the 25,000 failed jobs. For each page it prints the median time,
the number of SQL statements, the slowest statement's time, whether any
statement was a COUNT over awa.jobs, and the plan of the page's list query
(which index serves it). The database is dropped afterwards.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import bench_procs as bp  # noqa: E402

FILL = """
INSERT INTO awa.jobs (kind, queue, args, state, priority, attempt, max_attempts, run_at,
                      attempted_at, finalized_at, created_at, errors)
SELECT 'kind_' || (g %% 20),
       (ARRAY['default', 'email', 'reports', 'billing'])[1 + g %% 4],
       jsonb_build_object('n', g, 'to', 'user' || g || '@example.com'),
       CASE WHEN g %% 5000 = 0 THEN 'failed' WHEN g %% 7919 = 0 THEN 'cancelled' ELSE 'completed' END::awa.job_state,
       2, 1, 25,
       now() - make_interval(secs => %(n)s - g),
       now() - make_interval(secs => %(n)s - g),
       now() - make_interval(secs => %(n)s - g),
       now() - make_interval(secs => %(n)s - g),
       CASE WHEN g %% 5000 = 0
            THEN ARRAY[jsonb_build_object('attempt', 1, 'type', 'SMTPError', 'error', 'mailbox full',
                                          'traceback', 'Traceback ...', 'at', now())]
            ELSE '{}'::jsonb[] END
FROM generate_series(1, %(n)s) AS g
"""
LIVE = """
INSERT INTO awa.jobs (kind, queue, args, state, run_at)
SELECT 'kind_' || (g % 20), 'email', jsonb_build_object('n', g), 'available', now()
FROM generate_series(1, 200) AS g
"""
# The overview's charts: two days of per-minute rollups for the 4 queues (what workers write).
ROLLUPS = """
INSERT INTO awa.queue_rollups (queue, minute, completed, failed, retried)
SELECT q, date_trunc('minute', now()) - make_interval(mins => m), 300 + m % 50, m % 3, m % 5
FROM unnest(ARRAY['default', 'email', 'reports', 'billing']) AS q, generate_series(0, 2879) AS m
"""
# The workers page: 12 live workers and 3 gone ones.
WORKERS = """
INSERT INTO awa.runtime_instances (instance_id, hostname, pid, version, queues, jobs_held, is_leader,
                                   started_at, heartbeat_at)
SELECT gen_random_uuid(), 'host-' || g, 1000 + g, '0.6.0',
       '[{"name": "email", "max_workers": 20, "running": 3}, {"name": "default", "max_workers": 10, "running": 1}]',
       4, g = 1, now() - interval '3 hours',
       now() - CASE WHEN g > 12 THEN interval '1 hour' ELSE interval '1 second' END
FROM generate_series(1, 15) AS g
"""
# What the workers record (the job timeline): one awa.job_claims row per claim statement, here per
# distinct attempted_at, by one of the 12 live workers; and an awa.job_attempts row of its own for
# each attempt that ended otherwise than completed (the failed jobs).
ATTEMPTS = """
INSERT INTO awa.job_claims (claimed_at, instance_id, worker, job_ids)
SELECT attempted_at, '00000000-0000-4000-8000-000000000001',
       'host-' || (1 + min(id) % 12) || '/' || (1001 + min(id) % 12), array_agg(id)
FROM awa.jobs WHERE attempted_at IS NOT NULL
GROUP BY attempted_at;
INSERT INTO awa.job_attempts (job_id, run_lease, attempt, instance_id, worker, started_at)
SELECT id, run_lease, attempt, '00000000-0000-4000-8000-000000000001',
       'host-' || (1 + id % 12) || '/' || (1001 + id % 12), attempted_at
FROM awa.jobs WHERE attempted_at IS NOT NULL AND state <> 'completed'
"""
# A failing kind to retry all at once from the list ("select all matching this filter").
BULK_FAILED = """
INSERT INTO awa.jobs (kind, queue, state, attempt, max_attempts, attempted_at, finalized_at, created_at)
SELECT 'bulk_import', 'billing', 'failed', 1, 1, now(), now(), now() FROM generate_series(1, 25000)
"""


def configure(url: str) -> None:
    import django
    from django.conf import settings

    from awa_django.db import database_settings

    settings.configure(
        SECRET_KEY="bench",
        DEBUG=True,  # the query log
        ALLOWED_HOSTS=["*"],
        USE_TZ=True,
        ROOT_URLCONF="tests.django.project.urls",
        INSTALLED_APPS=[
            "django.contrib.admin",
            "django.contrib.auth",
            "django.contrib.contenttypes",
            "django.contrib.sessions",
            "django.contrib.messages",
            "awa_django",
        ],
        MIDDLEWARE=[
            "django.contrib.sessions.middleware.SessionMiddleware",
            "django.contrib.auth.middleware.AuthenticationMiddleware",
            "django.contrib.messages.middleware.MessageMiddleware",
        ],
        TEMPLATES=[
            {
                "BACKEND": "django.template.backends.django.DjangoTemplates",
                "APP_DIRS": True,
                "OPTIONS": {
                    "context_processors": [
                        "django.template.context_processors.request",
                        "django.contrib.auth.context_processors.auth",
                        "django.contrib.messages.context_processors.messages",
                    ]
                },
            }
        ],
        DATABASES={"default": database_settings(url)},
        DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        STATIC_URL="/static/",
    )
    django.setup()


def plan_of(sql: str, params: Any) -> str:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) " + sql, params)
        lines = [row[0] for row in cursor.fetchall()]
    scans = [line.strip().removeprefix("-> ").strip() for line in lines if "Scan" in line]
    return "; ".join(s.split("  (")[0] for s in scans[:3])


def measure(client: Any, path: str, runs: int) -> dict[str, Any]:
    from django.db import connection, reset_queries

    client.get(path)  # warm
    times, statements = [], []
    for _ in range(runs):
        reset_queries()
        start = time.perf_counter()
        response = client.get(path)
        times.append(time.perf_counter() - start)
        assert response.status_code == 200, (path, response.status_code)
        statements = list(connection.queries)
    awa = [q for q in statements if "awa" in q["sql"]]
    listing = [q for q in awa if "LIMIT" in q["sql"] and '"awa"."jobs"' in q["sql"] and "EXPLAIN" not in q["sql"]]
    counts = [q for q in awa if "COUNT(" in q["sql"].upper()]
    return {
        "path": path,
        "median_ms": statistics.median(times) * 1000,
        "statements": len(statements),
        "slowest_ms": max((float(q["time"]) for q in statements), default=0.0) * 1000,
        "counts": len(counts),
        "list_sql": listing[0]["sql"] if listing else None,
    }


def bulk_retry(client: Any) -> None:
    """'Select all' + Retry over the 25,000 failed jobs of a kind: one request, one summary."""
    from django.contrib.messages import get_messages

    start = time.perf_counter()
    response = client.post(
        "/admin/awa_django/job/?state=failed&kind=bulk_import",
        {"action": "retry_jobs", "select_across": "1", "index": "0", "_selected_action": ["1"]},
    )
    elapsed = time.perf_counter() - start
    summary = [str(m) for m in get_messages(response.wsgi_request)]
    print(f"\nselect all + Retry over 25,000 failed jobs: {elapsed * 1000:.0f} ms, messages: {summary}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--runs", type=int, default=5)
    ns = parser.parse_args()
    bp.require_positive(parser, ns, "--jobs", "--runs")

    import psycopg

    from awa_bridge.embedded import database_url_or_embedded

    if os.environ.get("DATABASE_URL"):
        bp.check_server(os.environ["DATABASE_URL"])
    server_url, server = database_url_or_embedded()
    name = f"awa_bench_admin_{uuid.uuid4().hex[:8]}"
    from urllib.parse import urlsplit, urlunsplit

    url = urlunsplit(urlsplit(server_url)._replace(path="/" + name))
    try:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        configure(url)
        from django.contrib.auth.models import User
        from django.core.management import call_command
        from django.db import connection
        from django.test import Client

        call_command("migrate", verbosity=0)
        start = time.perf_counter()
        with connection.cursor() as cursor:
            cursor.execute(FILL, {"n": ns.jobs})
            cursor.execute(LIVE)
            cursor.execute(ROLLUPS)
            cursor.execute(WORKERS)
            cursor.execute(BULK_FAILED)
            cursor.execute(ATTEMPTS)
            cursor.execute("ANALYZE awa.jobs")
            cursor.execute("ANALYZE awa.job_attempts")
            cursor.execute("ANALYZE awa.queue_rollups")
            cursor.execute("SELECT pg_size_pretty(pg_total_relation_size('awa.jobs')), version()")
            size, version = cursor.fetchone()
            cursor.execute("SELECT id FROM awa.jobs WHERE state = 'failed' ORDER BY id DESC LIMIT 1")
            failed_id = cursor.fetchone()[0]
        print(
            f"{ns.jobs:,} finished jobs + 200 available + 25,000 failed in {time.perf_counter() - start:.1f} s; "
            f"awa.jobs is {size}"
        )
        print(version.split(",")[0])
        User.objects.create_superuser("bench", "bench@example.com", "pw")
        client = Client()
        client.force_login(User.objects.get(username="bench"))
        pages = [
            "/admin/awa_django/job/",
            "/admin/awa_django/job/?state=failed",
            "/admin/awa_django/job/?state=cancelled",
            "/admin/awa_django/job/?state=available",
            "/admin/awa_django/job/?state=completed",
            "/admin/awa_django/job/?queue=email",
            "/admin/awa_django/job/?kind=kind_7",
            "/admin/awa_django/job/?kind=kind_0&state=failed",
            "/admin/awa_django/job/?p=100",
            f"/admin/awa_django/job/?before={ns.jobs // 2}",
            "/admin/awa_django/job/?oldest=1",
            "/admin/awa_django/job/?state=completed&oldest=1",
            "/admin/awa_django/job/?state=failed&queue=billing&oldest=1",
            "/admin/awa_django/job/?q=ind_1",
            f"/admin/awa_django/job/?q={failed_id}",
            f"/admin/awa_django/job/{failed_id}/change/",
            "/admin/awa_django/queuemeta/",
            "/admin/awa_django/workerinstance/",
            "/admin/awa_django/cronjob/",
        ]
        results = [measure(client, page, ns.runs) for page in pages]
        width = max(len(r["path"]) for r in results)
        print(f"\n{'page'.ljust(width)}  median ms  statements  slowest ms  COUNTs  list query plan")
        for r in results:
            plan = "-"
            if r["list_sql"]:
                plan = plan_of(r["list_sql"], None)
            print(
                f"{r['path'].ljust(width)}  {r['median_ms']:9.1f}  {r['statements']:10d}  {r['slowest_ms']:10.1f}"
                f"  {r['counts']:6d}  {plan}"
            )
        bulk_retry(client)
        connection.close()
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if server is not None:
            server.cleanup()
    return 0


if __name__ == "__main__":
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    bp.run_main(main, "interrupted: database dropped")
