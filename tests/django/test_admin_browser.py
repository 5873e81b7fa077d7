"""The admin in a real headless Chromium, used the way a person would.

Needs Debian's chromium (/usr/bin/chromium; `.ci/run` installs it) and
playwright from PyPI, which drives it (playwright's own browser download is
not used). Without them the tests are skipped, saying why; under CI they fail.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection

import awa_django
from awa_bridge.cron import upsert_schedules_sync
from awa_django.conf import build_schedule, get_settings
from awa_django.models import Job

from .conftest import job_state

pytestmark = [pytest.mark.django, pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CHROMIUM = os.environ.get("AWA_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def _unavailable() -> str | None:
    if not Path(CHROMIUM).exists():
        return f"no Chromium at {CHROMIUM} (apt-get install chromium; .ci/run does)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed (pip install -e '.[dev]')"
    return None


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    reason = _unavailable()
    if reason:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the browser tests: {reason}")
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    # Playwright's sync API keeps an event loop running on this thread; the
    # test's own ORM calls are plain sync code all the same.
    patch = pytest.MonkeyPatch()
    patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    try:
        with sync_playwright() as p:
            chromium = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS, headless=True)
            try:
                yield chromium
            finally:
                chromium.close()
    finally:
        patch.undo()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1440, "height": 900})
    context.set_default_timeout(15_000)
    page = context.new_page()
    try:
        yield page
    finally:
        context.close()


def _failed_job(reason: str) -> int:
    job = awa_django.insert_job({"to": "ada@example.com"}, kind="send_email", queue="email", max_attempts=1)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE awa.jobs SET state = 'failed', attempt = 1, finalized_at = now(), "
            "errors = ARRAY[jsonb_build_object('attempt', 1, 'type', 'SMTPError', 'error', %s::text, "
            "'traceback', 'Traceback (most recent call last):\n  File \"mail.py\"\nSMTPError: ' || %s, "
            "'at', now())] WHERE id = %s",
            [reason, reason, job.id],
        )
    return job.id


def expect(locator: Any) -> Any:
    from playwright.sync_api import expect as playwright_expect

    return playwright_expect(locator)


def _log_in(page: Any, base: str, username: str) -> None:
    page.goto(f"{base}/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    page.wait_for_selector("#site-name")


def test_an_operator_works_through_the_admin(awa: None, live_server: Any, page: Any) -> None:
    User.objects.create_superuser("operator", "op@example.com", "pw")
    failed = _failed_job("mailbox unavailable")
    awa_django.insert_job({"to": "bob@example.com"}, kind="send_email", queue="email")
    awa_django.insert_job({"day": 1}, kind="daily_report", queue="reports")
    upsert_schedules_sync(connection, [build_schedule(n, o) for n, o in get_settings().periodic.items()])
    base = live_server.url

    _log_in(page, base, "operator")
    page.get_by_role("link", name="Jobs").first.click()
    expect(page.locator("#result_list tbody tr")).to_have_count(3)

    # Filter by state: only the failed job is left.
    page.locator("#changelist-filter details", has_text="By state").get_by_role("link", name="failed").click()
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("send_email")

    # A state misspelt in the address bar is said, not shown as an empty list.
    page.goto(page.url.replace("state=failed", "state=faild"))
    expect(page.locator("ul.messagelist")).to_contain_text("Filter state: 'faild' is not a job state")
    expect(page.locator("ul.messagelist")).to_contain_text("did you mean 'failed'?")
    page.go_back()
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(1)

    # Open it and read its error.
    rows.first.get_by_role("link", name=str(failed)).click()
    errors = page.locator(".awa-error")
    expect(errors).to_contain_text("mailbox unavailable")
    expect(errors).to_contain_text("SMTPError")
    expect(page.locator(".awa-json").first).to_contain_text("ada@example.com")

    # Retry it.
    page.locator('input[value="Retry"]').click()
    expect(page.locator("ul.messagelist")).to_contain_text(f"Job {failed} made available again")
    assert job_state(failed) == "available"
    expect(page.locator('input[value="Retry"]')).to_have_count(0)  # available: nothing to retry any more

    # Pause a queue.
    page.goto(f"{base}/admin/")
    page.get_by_role("link", name="Queues").click()
    email = page.locator('tr[data-queue="email"]')
    expect(email.locator(".awa-queue-status")).to_have_text("not served")  # no worker runs it
    email.locator('input[value="Pause"]').click()
    expect(page.locator("ul.messagelist")).to_contain_text("Queue email paused")
    expect(page.locator('tr[data-queue="email"] .awa-queue-status')).to_have_text("paused")

    # Trigger a cron schedule.
    page.goto(f"{base}/admin/")
    page.get_by_role("link", name="Cron schedules").click()
    row = page.locator("#result_list tbody tr", has_text="nightly_digest")
    expect(row).to_contain_text("Europe/London")
    expect(row).to_contain_text("30 2 * * *")
    row.locator("input.action-select").check()
    page.select_option("select[name=action]", label="Trigger selected schedules now")
    page.click("button[name=index]")
    expect(page.locator("ul.messagelist")).to_contain_text("1 schedule(s) triggered")
    assert Job.objects.filter(kind="send_digest", metadata__triggered_manually=True).count() == 1


def test_a_staff_user_without_permissions_is_refused(awa: None, live_server: Any, page: Any) -> None:
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.set(
        Permission.objects.filter(content_type__app_label="awa_django", codename__startswith="view_")
    )
    failed = _failed_job("quota exceeded")
    base = live_server.url

    _log_in(page, base, "viewer")
    page.get_by_role("link", name="Jobs").first.click()
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    # No actions offered at all.
    expect(page.locator("select[name=action]")).to_have_count(0)
    page.get_by_role("link", name=str(failed)).click()
    expect(page.locator(".awa-error")).to_contain_text("quota exceeded")
    expect(page.locator('input[value="Retry"]')).to_have_count(0)
    expect(page.get_by_role("link", name="Delete")).to_have_count(0)

    # A forged retry (the form the superuser gets) is refused.
    status = page.evaluate(
        """async (url) => {
            const token = document.cookie.split('; ').find(c => c.startsWith('csrftoken=')).split('=')[1];
            const response = await fetch(url, {method: 'POST', headers: {'X-CSRFToken': token}});
            return response.status;
        }""",
        f"/admin/awa_django/job/{failed}/do/retry/",
    )
    assert status == 403
    assert job_state(failed) == "failed"

    page.goto(f"{base}/admin/awa_django/queuemeta/")
    expect(page.locator('tr[data-queue="email"]')).to_have_count(1)
    expect(page.locator('input[value="Pause"]')).to_have_count(0)
