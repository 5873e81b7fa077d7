"""Cron schedules in the admin and in manage.py: settings own theirs (removed ones are deleted at
the next worker start), database-only ones are created, edited and deleted with validation."""

from __future__ import annotations

import signal
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.urls import reverse

from awa_bridge import cron
from awa_bridge.cron import PeriodicJob, upsert_schedules_sync

from .conftest import wait_for
from .test_admin_operations import _manage
from .test_commands import manage

pytestmark = [pytest.mark.django, pytest.mark.django_db(transaction=True)]


def _schedules() -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.name, COALESCE(s.source, 'database') FROM awa.cron_jobs c "
            "LEFT JOIN awa.cron_job_sources s USING (name) ORDER BY 1"
        )
        return dict(cursor.fetchall())


FORM = {
    "name": "weekly_export",
    "cron_expr": "0 6 * * 1",
    "timezone": "America/New_York",
    "kind": "export",
    "queue": "reports",
    "args": '{"format": "csv"}',
    "priority": "2",
    "max_attempts": "5",
    "missed_fire_policy": "coalesce",
}


def test_database_schedules_in_the_admin(awa: None, admin_client: Any) -> None:
    add = reverse("admin:awa_django_cronjob_add")
    bad = admin_client.post(add, {**FORM, "cron_expr": "99 * * * *"})
    assert bad.status_code == 200 and "cron_expr" in bad.content.decode() and _schedules() == {}
    bad = admin_client.post(add, {**FORM, "timezone": "Moon/Base"})
    assert bad.status_code == 200 and "timezone" in bad.content.decode().lower() and _schedules() == {}
    done = admin_client.post(add, FORM)
    assert done.status_code == 302 and _schedules() == {"weekly_export": "database"}
    page = admin_client.get(reverse("admin:awa_django_cronjob_changelist")).content.decode()
    assert "America/New_York" in page and ("EST" in page or "EDT" in page)  # next fire in the schedule's zone

    edit = reverse("admin:awa_django_cronjob_edit", args=["weekly_export"])
    assert admin_client.post(edit, {**FORM, "cron_expr": "30 7 * * 1"}).status_code == 302
    assert cron.get_schedule(connection, "weekly_export").cron_expr == "30 7 * * 1"
    remove = reverse("admin:awa_django_cronjob_remove", args=["weekly_export"])
    assert admin_client.post(remove).status_code == 302 and _schedules() == {}
    assert [e.action_flag for e in LogEntry.objects.order_by("id")] == [ADDITION, CHANGE, DELETION]


def test_declared_schedules_are_not_editable_and_viewers_cannot_edit(awa: None, admin_client: Any, client: Any) -> None:
    upsert_schedules_sync(connection, [PeriodicJob("from_settings", "0 * * * *", {}, kind="k")])
    detail = admin_client.get(reverse("admin:awa_django_cronjob_change", args=["from_settings"])).content.decode()
    assert "Declared in settings or code" in detail and "Delete schedule" not in detail
    refused = admin_client.post(reverse("admin:awa_django_cronjob_remove", args=["from_settings"]), follow=True)
    assert "declared in settings or code" in refused.content.decode() and "from_settings" in _schedules()

    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.set(
        Permission.objects.filter(codename__startswith="view_", content_type__app_label="awa_django")
    )
    client.force_login(viewer)
    assert client.post(reverse("admin:awa_django_cronjob_add"), FORM).status_code == 403
    assert client.post(reverse("admin:awa_django_cronjob_edit", args=["from_settings"]), FORM).status_code == 403
    assert _schedules() == {"from_settings": "declared"}


def test_manage_py_awa_cron_create_edit_delete(awa: None) -> None:
    made = _manage("awa_cron", "create", "ad_hoc", "--cron", "*/15 * * * *", "--kind", "k", "--timezone", "Asia/Tokyo")
    assert made.returncode == 0, made.stderr
    bad = _manage("awa_cron", "edit", "ad_hoc", "--cron", "not a cron")
    assert bad.returncode == 1 and "cron_expr" in bad.stderr
    assert _manage("awa_cron", "edit", "ad_hoc", "--priority", "1").returncode == 0
    info = cron.get_schedule(connection, "ad_hoc")
    assert (info.cron_expr, info.timezone, info.priority) == ("*/15 * * * *", "Asia/Tokyo", 1)
    listed = _manage("awa_cron", "list").stdout
    assert "ad_hoc" in listed and "database" in listed
    assert _manage("awa_cron", "delete", "ad_hoc").returncode == 0 and _schedules() == {}


def test_a_schedule_removed_from_settings_is_deleted_when_the_worker_starts(awa: None) -> None:
    upsert_schedules_sync(connection, [PeriodicJob("removed_from_settings", "* * * * *", {}, kind="k")])
    cron_db = PeriodicJob("operators_own", "* * * * *", {}, kind="k")
    from awa_bridge import cron_edit

    cron_edit.create_schedule(connection, cron_db)
    worker = manage("awa_worker")
    try:
        wait_for(lambda: "nightly_digest" in _schedules() and "removed_from_settings" not in _schedules(), timeout=30)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.communicate(timeout=30)
    assert _schedules() == {"nightly_digest": "declared", "operators_own": "database"}
