"""The queues overview (charts from the rollups, humanized lag, oldest waiting job, who serves each
queue) and the workers page (live and gone workers), through Django's test client."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import awa_django

pytestmark = [pytest.mark.django, pytest.mark.django_db(transaction=True)]
OVERVIEW = "admin:awa_django_queuemeta_changelist"
WORKERS = "admin:awa_django_workerinstance_changelist"


@pytest.fixture(autouse=True)
def minute_staleness(monkeypatch: pytest.MonkeyPatch) -> None:
    """A staleness window of a minute (the test settings' 1 s would race a loaded machine)."""
    import awa_django.admin_overview
    import awa_django.admin_workers

    monkeypatch.setattr(awa_django.admin_overview, "staleness", lambda: 60.0)
    monkeypatch.setattr(awa_django.admin_workers, "staleness", lambda: 60.0)


def add_worker(hostname: str, queues: list[dict[str, Any]], *, age_seconds: float = 0, leader: bool = False) -> None:
    """A row of awa.runtime_instances, in the shape the workers write it."""
    import json

    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO awa.runtime_instances (instance_id, hostname, pid, version, queues, jobs_held, is_leader, "
            "started_at, heartbeat_at) VALUES (%s, %s, %s, '0.6.0', CAST(%s AS jsonb), %s, %s, "
            "now() - interval '2 hours', now() - make_interval(secs => %s))",
            [
                str(uuid.uuid4()),
                hostname,
                4000 + len(hostname),
                json.dumps(queues),
                sum(q["running"] for q in queues),
                leader,
                age_seconds,
            ],
        )


def add_rollups() -> None:
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO awa.queue_rollups (queue, minute, completed, failed, retried) "
            "SELECT 'email', date_trunc('minute', now()) - make_interval(mins => m), 10 + m, mod(m, 3), 1 "
            "FROM generate_series(0, 59) AS m"
        )
        cursor.execute(
            "INSERT INTO awa.queue_rollups (queue, minute, completed) "
            "VALUES ('reports', date_trunc('minute', now()) - interval '5 hours', 42)"
        )


def test_the_overview_charts_rollups_and_says_who_serves_each_queue(awa: None, admin_client: Any) -> None:
    old = awa_django.insert_job({}, kind="send_email", queue="email")
    awa_django.insert_job({}, kind="report", queue="reports")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE awa.jobs SET run_at = now() - interval '3 days 4 hours', "
            "created_at = now() - interval '3 days 5 hours' WHERE id = %s",
            [old.id],
        )
    add_rollups()
    add_worker("web-1", [{"name": "email", "max_workers": 20, "running": 3}], leader=True)
    add_worker("dead-1", [{"name": "reports", "max_workers": 5, "running": 1}], age_seconds=3600)

    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(reverse(OVERVIEW)).content.decode()
    assert not any("awa.jobs" in q["sql"] and "queue_rollups" in q["sql"] for q in queries.captured_queries)
    email = page.split('data-queue="email"', 1)[1].split("</tr>", 1)[0]
    assert "3 d 4 h" in email and "273602" not in email  # humanized lag
    assert "1 live" in email and "3/20 slots busy" in email and ">running<" in email
    reports = page.split('data-queue="reports"', 1)[1].split("</tr>", 1)[0]
    assert "no live worker" in reports and "not served" in reports  # its only worker is gone
    charts = page.split('data-queue-charts="email"', 1)[1].split("</tr>", 1)[0]
    assert (
        charts.count("<svg") == 2
        and "<rect" in charts
        and "http" not in charts.replace('xmlns="http://www.w3.org/2000/svg"', "")
    )
    hour_total = sum(10 + m for m in range(60))
    assert f"{hour_total} completed" in charts
    assert 'data-window="day"' in page.split('data-queue-charts="reports"', 1)[1]
    assert 'src="http' not in page and "cdn" not in page.lower()  # nothing loaded from elsewhere


def test_the_workers_page_shows_live_and_gone_workers(awa: None, admin_client: Any) -> None:
    add_worker("web-1", [{"name": "email", "max_workers": 20, "running": 3}], leader=True)
    add_worker(
        "batch-7",
        [{"name": "reports", "max_workers": 5, "running": 5}, {"name": "default", "max_workers": 2, "running": 0}],
    )
    add_worker("dead-1", [{"name": "reports", "max_workers": 5, "running": 1}], age_seconds=3600, leader=True)
    page = admin_client.get(reverse(WORKERS)).content.decode()
    rows = {line.split("</tr>")[0] for line in page.split("<tr")[1:]}
    web = next(r for r in rows if "web-1" in r)
    assert 'data-awa-worker="live"' in web and "email 3/20" in web and "0.6.0" in web and "icon-yes" in web
    batch = next(r for r in rows if "batch-7" in r)
    assert "reports 5/5, default 0/2" in batch and "icon-no" in batch
    dead = next(r for r in rows if "dead-1" in r)
    assert 'data-awa-worker="gone"' in dead and "icon-no" in dead  # a gone leader is no leader
    assert "1 h ago" in dead


def test_a_view_only_user_sees_both_pages_and_no_buttons(awa: None, client: Any) -> None:
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.set(
        Permission.objects.filter(content_type__app_label="awa_django", codename__startswith="view_")
    )
    awa_django.insert_job({}, kind="send_email", queue="email")
    client.force_login(viewer)
    overview = client.get(reverse(OVERVIEW)).content.decode()
    assert 'data-queue="email"' in overview and 'value="Pause"' not in overview
    assert client.get(reverse(WORKERS)).status_code == 200
    nobody = User.objects.create_user("nobody", password="pw", is_staff=True)
    client.force_login(nobody)
    assert client.get(reverse(OVERVIEW)).status_code == 403
    assert client.get(reverse(WORKERS)).status_code == 403


class _Rollback(Exception):
    pass


def test_the_pages_still_render_without_this_packages_bookkeeping_tables(awa: None, admin_client: Any) -> None:
    """As on a database the real Awa migrated: the shared tables only."""
    from django.db import transaction

    from awa_bridge.cron import PeriodicJob, upsert_schedules_sync

    job = awa_django.insert_job({}, kind="send_email", queue="email")
    upsert_schedules_sync(connection, [PeriodicJob("nightly", "0 3 * * *", {}, kind="k")])
    with pytest.raises(_Rollback), transaction.atomic():
        with connection.cursor() as cursor:
            for table in ("queue_rollups", "runtime_instances", "job_actions", "cron_job_sources"):
                cursor.execute(f"ALTER TABLE awa.{table} RENAME TO {table}_hidden")
        overview = admin_client.get(reverse(OVERVIEW))
        assert overview.status_code == 200 and "unknown (no worker registry)" in overview.content.decode()
        assert admin_client.get(reverse(WORKERS)).status_code == 200
        detail = admin_client.get(reverse("admin:awa_django_job_change", args=[job.id]))
        assert detail.status_code == 200 and "enqueued" in detail.content.decode()
        assert "nightly" in admin_client.get(reverse("admin:awa_django_cronjob_changelist")).content.decode()
        raise _Rollback
