"""The admin through Django's test client: pages render, counts stay cheap, permissions hold."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

import awa_django
from awa_bridge import admin as ops
from awa_django.admin import EstimatedCountPaginator
from awa_django.models import Job

from .conftest import job_state

pytestmark = [pytest.mark.django, pytest.mark.django_db(transaction=True)]


def _failed_job(reason: str = "smtp down") -> int:
    job = awa_django.insert_job({"to": "ada@example.com"}, kind="send_email", queue="email", max_attempts=1)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE awa.jobs SET state = 'failed', attempt = 1, finalized_at = now(), "
            "errors = ARRAY[jsonb_build_object('attempt', 1, 'type', 'SMTPError', 'error', %s::text, "
            "'traceback', 'Traceback (most recent call last): ...', 'at', now())] WHERE id = %s",
            [reason, job.id],
        )
    return job.id


def results(html: str) -> str:
    """The rows of a changelist page (not its filters)."""
    return html.split('id="result_list"', 1)[-1].split("</table>", 1)[0]


@pytest.fixture
def viewer(db: None) -> User:
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(content_type__app_label="awa_django", codename__startswith="view_")
    )
    return user


def test_superuser_pages_filters_and_detail(awa: None, admin_client, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    failed = _failed_job()
    awa_django.insert_job({}, kind="report", queue="reports")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE awa.jobs")
    # As on a big table: the unfiltered list must use the planner's estimate.
    monkeypatch.setattr(EstimatedCountPaginator, "exact_below", 1)
    changelist = reverse("admin:awa_django_job_changelist")
    with CaptureQueriesContext(connection) as queries:
        page = admin_client.get(changelist)
    assert page.status_code == 200
    text = page.content.decode()
    assert "send_email" in text and "report" in text and "Retry selected jobs" in text
    counts = [q["sql"] for q in queries.captured_queries if "COUNT(" in q["sql"].upper() and "awa" in q["sql"]]
    assert counts == [], counts  # never a count of the whole table
    # Django's facet counts ("Show counts") stay off: they would count the table per filter choice.
    assert "Show counts" not in text
    with CaptureQueriesContext(connection) as queries:
        admin_client.get(changelist, {"_facets": "True"})
    assert not [q for q in queries.captured_queries if "COUNT(" in q["sql"].upper() and "awa" in q["sql"]]
    monkeypatch.setattr(EstimatedCountPaginator, "exact_below", 10_000)
    filtered = results(admin_client.get(changelist, {"state": "failed", "queue": "email"}).content.decode())
    assert f'href="/admin/awa_django/job/{failed}/change/' in filtered and "report" not in filtered
    by_kind = results(admin_client.get(changelist, {"kind": "report"}).content.decode())
    assert "report" in by_kind and "send_email" not in by_kind
    assert str(failed) in admin_client.get(changelist, {"q": str(failed)}).content.decode()
    detail = admin_client.get(reverse("admin:awa_django_job_change", args=[failed])).content.decode()
    assert "smtp down" in detail and "SMTPError" in detail and "ada@example.com" in detail
    assert 'value="Retry"' in detail
    response = admin_client.post(reverse("admin:awa_django_job_action", args=[failed, "retry"]))
    assert response.status_code == 302 and job_state(failed) == "available"
    for url in (reverse("admin:awa_django_queuemeta_changelist"), reverse("admin:awa_django_cronjob_changelist")):
        assert admin_client.get(url).status_code == 200


def test_a_staff_user_without_permissions_sees_and_does_nothing(awa: None, client, viewer: User) -> None:  # type: ignore[no-untyped-def]
    failed = _failed_job()
    client.force_login(viewer)
    changelist = reverse("admin:awa_django_job_changelist")
    page = client.get(changelist).content.decode()
    assert "send_email" in page and "Retry selected jobs" not in page and "Delete selected" not in page
    detail = client.get(reverse("admin:awa_django_job_change", args=[failed])).content.decode()
    assert "smtp down" in detail and 'value="Retry"' not in detail
    client.post(changelist, {"action": "retry_jobs", "_selected_action": [failed]})
    assert client.post(reverse("admin:awa_django_job_action", args=[failed, "retry"])).status_code == 403
    assert client.post(reverse("admin:awa_django_job_delete", args=[failed]), {"post": "yes"}).status_code == 403
    assert client.post(reverse("admin:awa_django_queuemeta_pause", args=["pause", "email"])).status_code == 403
    assert job_state(failed) == "failed"
    assert not ops.queue_stats(connection, "email")[0].paused
    nobody = User.objects.create_user("nobody", password="pw", is_staff=True)
    client.force_login(nobody)
    assert client.get(changelist).status_code == 403


def test_delete_goes_through_the_bridge(awa: None, admin_client) -> None:  # type: ignore[no-untyped-def]
    failed = _failed_job()
    response = admin_client.post(reverse("admin:awa_django_job_delete", args=[failed]), {"post": "yes"})
    assert response.status_code == 302
    assert not Job.objects.filter(id=failed).exists()


def test_the_paginator_estimates_big_results(awa: None) -> None:
    awa_django.insert_many([{"n": i} for i in range(30)], kind="k")
    small = EstimatedCountPaginator(Job.objects.all(), 10)
    assert small.count == 30 and not small.estimated
    EstimatedCountPaginator.exact_below = 1
    try:
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE awa.jobs")
        big = EstimatedCountPaginator(Job.objects.all(), 10)
        with CaptureQueriesContext(connection) as queries:
            assert big.count > 0 and big.estimated
        assert not any("COUNT(" in q["sql"].upper() for q in queries.captured_queries)
    finally:
        EstimatedCountPaginator.exact_below = 10_000


def test_the_job_list_never_loads_full_args(awa: None, admin_client) -> None:  # type: ignore[no-untyped-def]
    """Issue 15 item 5: 20 jobs of 10 MB made one page view take 457 MiB."""
    import tracemalloc

    big = "x" * 2_000_000
    for n in range(5):
        awa_django.insert_job({"blob": big, "n": n}, kind="bulky", metadata={"also": big})
    changelist = reverse("admin:awa_django_job_changelist")
    tracemalloc.start()
    try:
        with CaptureQueriesContext(connection) as queries:
            page = admin_client.get(changelist)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert page.status_code == 200
    rows = results(page.content.decode())
    assert rows.count('class="field-args_preview"') == 5 and big not in rows
    assert "{&quot;n&quot;: 0, &quot;blob&quot;: &quot;xxxxxxxx" in rows
    listing = [q["sql"] for q in queries.captured_queries if q["sql"].startswith('SELECT "awa"."jobs"."id"')]
    assert listing, [q["sql"] for q in queries.captured_queries]
    for sql in listing:
        assert '"jobs"."metadata"' not in sql and '"jobs"."errors"' not in sql and '"jobs"."progress"' not in sql
        assert sql.count('"jobs"."args"') == sql.count('LEFT(("awa"."jobs"."args")::text'), sql
    assert peak < 8_000_000, f"the page view allocated {peak} bytes at its peak"
    # The detail page still shows everything.
    one = Job.objects.filter(kind="bulky").order_by("id").values_list("id", flat=True)[0]
    assert big in admin_client.get(reverse("admin:awa_django_job_change", args=[one])).content.decode()
