"""Every operations page in a real headless Chromium, as a superuser and as a view-only staff
user; the screenshots in docs/screenshots/ (shown in docs/howto/django.md) are taken here
(`AWA_UPDATE_SCREENSHOTS=1 python -m pytest tests/django/test_admin_browser_pages.py` rewrites them)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.db import connection

from awa_bridge.cron import upsert_schedules_sync
from awa_django.conf import build_schedule, get_settings
from awa_django.models import Job

from .conftest import job_state
from .test_admin_browser import _log_in, browser, expect, page  # noqa: F401 - fixtures
from .test_admin_dashboard import add_rollups, add_worker, minute_staleness  # noqa: F401 - fixture
from .test_admin_jobs import TRACEBACK
from .test_admin_operations import _jobs

pytestmark = [pytest.mark.django, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

# The docs' copies are rewritten only when asked (AWA_UPDATE_SCREENSHOTS=1), so an ordinary test run
# leaves the working tree clean; otherwise the same screenshots go to a scratch directory.
SCREENSHOTS = (
    Path(__file__).resolve().parents[2] / "docs" / "screenshots"
    if os.environ.get("AWA_UPDATE_SCREENSHOTS") == "1"
    else Path(tempfile.gettempdir()) / "awa-admin-screenshots"
)


def _shot(tab: Any, name: str) -> None:
    """A full-page screenshot for the docs, with Django's navigation sidebar folded away."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    tab.set_viewport_size({"width": 1600, "height": 900})
    if tab.locator("#nav-sidebar").is_visible():
        tab.click("#toggle-nav-sidebar")
    tab.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=True)


def _heartbeat() -> None:
    """What a live worker does every heartbeat."""
    with connection.cursor() as cursor:
        cursor.execute("UPDATE awa.runtime_instances SET heartbeat_at = now() WHERE hostname <> 'old-host'")


def _a_busy_system() -> dict[str, Any]:
    """Jobs in every state, a failing kind with tracebacks, rollups, workers and schedules."""
    failed = _jobs(60, "failed", kind="billing.charge_card", queue="billing")
    completed = _jobs(40, "completed", kind="email.send_receipt", queue="email")
    running = _jobs(2, "running", kind="reports.build_monthly_pdf", queue="reports")
    _jobs(5, "scheduled", kind="email.send_reminder", queue="email")
    _jobs(1, "completed", kind="imports." + "very_long_kind_name_" * 9, queue="imports")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE awa.jobs SET errors = ARRAY[jsonb_build_object('attempt', 1, 'type', 'CardError', "
            "'error', 'card declined', 'traceback', %s::text, 'at', now() - interval '1 min')], "
            "created_at = now() - interval '20 min', attempted_at = now() - interval '2 min' WHERE state = 'failed'",
            [TRACEBACK],
        )
        cursor.execute(
            "UPDATE awa.jobs SET created_at = now() - interval '30 min', attempted_at = now() - interval '5 min', "
            "finalized_at = now() - interval '5 min' + interval '1.4 seconds' WHERE state = 'completed'"
        )
        cursor.execute("UPDATE awa.jobs SET run_at = now() + interval '1 hour' WHERE state = 'scheduled'")
        cursor.execute(
            "INSERT INTO awa.jobs (kind, queue, state, run_at, created_at) "
            "VALUES ('email.send_receipt', 'email', 'available', now() - interval '95 seconds', "
            "now() - interval '100 seconds')"
        )
    add_rollups()
    add_worker("web-1", [{"name": "email", "max_workers": 20, "running": 3}], leader=True)
    add_worker(
        "batch-7",
        [{"name": "reports", "max_workers": 4, "running": 2}, {"name": "billing", "max_workers": 8, "running": 0}],
    )
    add_worker("old-host", [{"name": "imports", "max_workers": 2, "running": 1}], age_seconds=7200)
    upsert_schedules_sync(connection, [build_schedule(n, o) for n, o in get_settings().periodic.items()])
    return {"failed": failed, "completed": completed, "running": running}


def _attempts(job: int) -> None:
    """What the workers record when they claim a job (awa.job_attempts): web-1 claimed it and
    snoozed it for 30 s (the attempt not spent), then batch-7 ran attempt 1 again, which failed."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO awa.job_attempts (job_id, run_lease, attempt, instance_id, worker, started_at, "
            "snoozed_at, snoozed_until) "
            "SELECT j.id, 1, 1, r.instance_id, r.hostname || '/' || r.pid, j.attempted_at - interval '1 min', "
            "j.attempted_at - interval '58 s', j.attempted_at - interval '28 s' "
            "FROM awa.jobs AS j, awa.runtime_instances AS r WHERE j.id = %s AND r.hostname = 'web-1' "
            "UNION ALL SELECT j.id, 2, 1, r.instance_id, r.hostname || '/' || r.pid, j.attempted_at, NULL, NULL "
            "FROM awa.jobs AS j, awa.runtime_instances AS r WHERE j.id = %s AND r.hostname = 'batch-7'",
            [job, job],
        )


def _check_attempts(timeline: str) -> None:
    """Each attempt with its worker, and the snooze between them, in order."""
    first = timeline.index("attempt 1 started on web-1/4005")
    snoozed = timeline.index("attempt 1 snoozed for 30 s")
    again = timeline.index("attempt 1 started on batch-7/4007")
    assert first < snoozed < again < timeline.index("attempt 1 failed: CardError"), timeline


def test_a_superuser_runs_the_operations_pages(awa: None, live_server: Any, page: Any) -> None:  # noqa: F811
    User.objects.create_superuser("operator", "op@example.com", "pw")
    made = _a_busy_system()
    base = live_server.url
    _log_in(page, base, "operator")

    # Overview: charts, humanized lag, who serves each queue.
    _heartbeat()
    page.goto(f"{base}/admin/awa_django/queuemeta/")
    email = page.locator('tr[data-queue="email"]')
    expect(email.locator(".awa-workers")).to_contain_text("1 live")
    assert email.locator(".awa-lag").inner_text().endswith(" s") and "min" in email.locator(".awa-lag").inner_text()
    expect(page.locator('tr[data-queue="imports"] .awa-queue-status')).to_have_text("not served")
    expect(page.locator('tr[data-queue-charts="email"] svg.awa-chart')).to_have_count(2)
    _shot(page, "overview")

    # Workers: live ones and a gone one.
    _heartbeat()
    page.goto(f"{base}/admin/awa_django/workerinstance/")
    expect(page.locator('[data-awa-worker="live"]')).to_have_count(2)
    gone = page.locator("#result_list tbody tr", has_text="old-host")
    expect(gone).to_contain_text("gone")
    _shot(page, "workers")

    # Jobs: the columns, an honest count, a long kind truncated.
    page.goto(f"{base}/admin/awa_django/job/")
    header = page.locator("#result_list thead").inner_text().lower()
    for column in ("state", "kind", "queue", "priority", "attempt", "run at", "started", "finished", "duration", "age"):
        assert column in header
    long_kind = page.locator("#result_list .awa-trunc[title^='imports.very_long']")
    assert long_kind.inner_text().endswith("…") and len(long_kind.inner_text()) <= 40
    expect(page.locator(".awa-count")).to_contain_text("109 jobs")
    _shot(page, "jobs")

    # Retry every failed billing job at once: select all matching the filter, one summary.
    page.goto(f"{base}/admin/awa_django/job/?state=failed&queue=billing")
    page.check("#action-toggle")
    page.locator(".actions .question a").click()
    page.select_option("select[name=action]", "retry_jobs")
    page.click("button[name=index]")
    messages = page.locator("ul.messagelist li")
    expect(messages).to_have_count(1)
    expect(messages.first).to_have_text("60 retried")
    assert Job.objects.filter(id__in=made["failed"], state="available").count() == 60

    # Delete a selection that holds a running job: one message, never "deleted successfully" too.
    page.goto(f"{base}/admin/awa_django/job/?queue=reports")
    page.check("#action-toggle")
    page.select_option("select[name=action]", "delete_jobs")
    page.click("button[name=index]")
    expect(page.locator("#awa-delete-scope")).to_contain_text("Delete the 2 selected jobs?")
    page.click('input[value="Yes, delete"]')
    messages = page.locator("ul.messagelist li")
    expect(messages).to_have_count(1)
    expect(messages.first).to_have_text("0 deleted; 2 skipped: running (cancel first)")
    assert all(job_state(i) == "running" for i in made["running"])

    # A job's page: the timeline with each attempt's worker, the snooze and the operator, the user's
    # frames first, the full traceback a click away.
    job = made["failed"][0]
    _attempts(job)
    page.goto(f"{base}/admin/awa_django/job/{job}/change/")
    timeline = page.locator(".awa-timeline").inner_text()
    assert "enqueued" in timeline and "CardError" in timeline and "retry by an operator" in timeline
    assert "admin:operator" in timeline
    _check_attempts(timeline)
    expect(page.locator(".awa-timeline li.awa-ev-snoozed")).to_have_count(1)
    frames = page.locator(".awa-user-frames").first.inner_text()
    assert frames.startswith('File "/srv/shop/billing/tasks.py"') or frames.lstrip().startswith(
        'File "/srv/shop/billing/tasks.py"'
    )
    full = page.locator(".awa-traceback pre").first
    expect(full).to_be_hidden()
    page.locator(".awa-traceback summary").first.click()
    expect(full).to_be_visible()
    expect(full).to_contain_text("executor.py")
    _shot(page, "job-detail")

    # Cron: create a database-only schedule (bad input refused), edit it, see it, delete it.
    page.goto(f"{base}/admin/awa_django/cronjob/add/")
    page.fill("#id_name", "weekly_export")
    page.fill("#id_cron_expr", "0 6 * * 9")
    page.fill("#id_timezone", "America/New_York")
    page.fill("#id_kind", "export")
    page.click('input[value="Save"]')
    expect(page.locator(".field-cron_expr .errorlist")).not_to_be_empty()  # waits for the page
    assert (
        "cron" in page.locator(".field-cron_expr .errorlist").inner_text().lower()
        or page.locator(".field-cron_expr .errorlist").inner_text()
    )
    page.fill("#id_cron_expr", "0 6 * * 1")
    page.click('input[value="Save"]')
    expect(page.locator("ul.messagelist")).to_contain_text("Schedule weekly_export created.")
    row = page.locator("#result_list tbody tr", has_text="weekly_export")
    expect(row).to_contain_text("database")  # waits for the page
    assert "database" in row.inner_text() and ("EST" in row.inner_text() or "EDT" in row.inner_text())
    expect(row).to_contain_text("your browser")  # added by the page's script once the DOM is loaded
    settings_row = page.locator("#result_list tbody tr", has_text="nightly_digest")
    expect(settings_row).to_contain_text("settings / code")
    _shot(page, "cron")
    row.get_by_role("link", name="weekly_export").click()
    page.get_by_role("link", name="Edit").click()
    page.fill("#id_cron_expr", "30 7 * * 1")
    page.click('input[value="Save"]')
    expect(page.locator("ul.messagelist")).to_contain_text("Schedule weekly_export updated.")
    page.once("dialog", lambda dialog: dialog.accept())
    page.click('input[value="Delete schedule"]')
    expect(page.locator("ul.messagelist")).to_contain_text("Schedule weekly_export deleted.")

    # Every action above is in Django's history.
    messages = list(LogEntry.objects.order_by("id").values_list("change_message", flat=True))
    assert any(m.startswith("retry: 60 retried") for m in messages)
    assert any(m.startswith("delete: 0 deleted") for m in messages)
    assert sum(1 for m in messages if m.startswith(("created", "edited", "deleted"))) == 3


def test_a_view_only_staff_user_sees_every_page_and_can_change_nothing(
    awa: None,
    live_server: Any,
    page: Any,  # noqa: F811
) -> None:
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.set(
        Permission.objects.filter(content_type__app_label="awa_django", codename__startswith="view_")
    )
    made = _a_busy_system()
    base = live_server.url
    _log_in(page, base, "viewer")

    _heartbeat()
    page.goto(f"{base}/admin/awa_django/queuemeta/")
    expect(page.locator('tr[data-queue="email"]')).to_have_count(1)
    expect(page.locator('input[value="Pause"]')).to_have_count(0)
    _heartbeat()
    page.goto(f"{base}/admin/awa_django/workerinstance/")
    expect(page.locator('[data-awa-worker="live"]')).to_have_count(2)
    page.goto(f"{base}/admin/awa_django/job/")
    expect(page.locator("select[name=action]")).to_have_count(0)
    _attempts(made["failed"][0])
    page.goto(f"{base}/admin/awa_django/job/{made['failed'][0]}/change/")
    expect(page.locator(".awa-timeline")).to_have_count(1)
    _check_attempts(page.locator(".awa-timeline").inner_text())
    expect(page.locator('input[value="Retry"]')).to_have_count(0)
    page.goto(f"{base}/admin/awa_django/cronjob/")
    expect(page.get_by_role("link", name="Add cron schedule")).to_have_count(0)

    def forged(url: str, form: dict[str, str]) -> int:
        return int(
            page.evaluate(
                """async ([url, form]) => {
                    const token = document.cookie.split('; ').find(c => c.startsWith('csrftoken=')).split('=')[1];
                    const body = new URLSearchParams(form);
                    const response = await fetch(url, {method: 'POST', headers: {'X-CSRFToken': token}, body});
                    return response.status;
                }""",
                [url, form],
            )
        )

    failed = made["failed"][0]
    forged("/admin/awa_django/job/?state=failed", {"action": "retry_jobs", "select_across": "1", "index": "0"})
    assert forged(f"/admin/awa_django/job/{failed}/do/retry/", {}) == 403
    assert forged("/admin/awa_django/cronjob/add/", {"name": "x", "cron_expr": "* * * * *", "kind": "k"}) == 403
    assert job_state(failed) == "failed" and Job.objects.filter(state="failed").count() == 60
    assert not LogEntry.objects.exists()
