"""Set-based actions in the job list, through Django's test client: one summary message per
action (never one per row), "all matching this filter", delete that never contradicts itself,
and a LogEntry plus a timeline record for every operator action."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.messages import get_messages
from django.db import connection
from django.urls import reverse

from awa_django.models import Job

from .conftest import job_state

pytestmark = [pytest.mark.django, pytest.mark.django_db(transaction=True)]
CHANGELIST = "admin:awa_django_job_changelist"
REPO = Path(__file__).resolve().parents[2]


def _jobs(count: int, state: str, kind: str = "send_email", queue: str = "email") -> list[int]:
    finalized = "now()" if state in ("completed", "failed", "cancelled") else "NULL"
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO awa.jobs (kind, queue, state, attempt, max_attempts, finalized_at, attempted_at) "
            f"SELECT %s, %s, CAST(%s AS awa.job_state), 1, 1, {finalized}, now() FROM generate_series(1, %s) "
            "RETURNING id",
            [kind, queue, state, count],
        )
        return [row[0] for row in cursor.fetchall()]


def _messages(response: Any) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


def _timeline(job_id: int) -> list[tuple[str, str]]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT action, operator FROM awa.job_actions WHERE job_id = %s ORDER BY id", [job_id])
        return list(cursor.fetchall())


def test_a_selection_gets_one_summary_message(awa: None, admin_client: Any, admin_user: Any) -> None:
    failed = _jobs(24, "failed")
    completed = _jobs(3, "completed")
    response = admin_client.post(
        reverse(CHANGELIST), {"action": "retry_jobs", "_selected_action": failed + completed}, follow=True
    )
    assert _messages(response) == ["24 retried; 3 skipped: completed"]
    assert all(job_state(i) == "available" for i in failed)
    assert _timeline(failed[0]) == [("retry", f"admin:{admin_user.username}")]
    entry = LogEntry.objects.get()
    assert entry.action_flag == CHANGE and entry.user == admin_user
    assert "24 retried; 3 skipped: completed" in entry.change_message


def test_all_matching_a_filter_is_one_set_operation(awa: None, admin_client: Any) -> None:
    failed = _jobs(2600, "failed")
    other = _jobs(5, "failed", queue="reports")
    url = reverse(CHANGELIST) + "?state=failed&queue=email"
    response = admin_client.post(
        url, {"action": "retry_jobs", "select_across": "1", "_selected_action": failed[:50]}, follow=True
    )
    assert _messages(response) == ["2,600 retried"]
    assert Job.objects.filter(id__in=failed, state="available").count() == 2600
    assert all(job_state(i) == "failed" for i in other)
    assert "all jobs matching queue=email, state=failed" in LogEntry.objects.get().change_message


def test_a_filter_the_action_cannot_apply_to_says_so(awa: None, admin_client: Any) -> None:
    done = _jobs(3, "completed")
    url = reverse(CHANGELIST) + "?state=completed"
    response = admin_client.post(
        url, {"action": "retry_jobs", "select_across": "1", "_selected_action": done}, follow=True
    )
    assert len(_messages(response)) == 1 and "retry applies to jobs in" in _messages(response)[0]
    assert all(job_state(i) == "completed" for i in done)


def test_deleting_asks_first_and_never_says_both_refused_and_deleted(awa: None, admin_client: Any) -> None:
    running = _jobs(1, "running")[0]
    done = _jobs(2, "completed")
    data = {"action": "delete_jobs", "_selected_action": [running, *done]}
    confirm = admin_client.post(reverse(CHANGELIST), data)
    assert confirm.status_code == 200 and "Delete the 3 selected jobs?" in confirm.content.decode()
    assert Job.objects.count() == 3
    response = admin_client.post(reverse(CHANGELIST), {**data, "awa_confirm": "yes"}, follow=True)
    assert _messages(response) == ["2 deleted; 1 skipped: running (cancel first)"]
    assert list(Job.objects.values_list("id", flat=True)) == [running]
    assert LogEntry.objects.get().action_flag == DELETION

    # On the detail page a running job offers no Delete, and a forged delete says only why not.
    detail = admin_client.get(reverse("admin:awa_django_job_change", args=[running])).content.decode()
    assert "deletelink" not in detail
    forged = admin_client.post(reverse("admin:awa_django_job_delete", args=[running]), {"post": "yes"}, follow=True)
    assert forged.status_code == 403 or "deleted successfully" not in forged.content.decode()
    assert job_state(running) == "running"


def test_deleting_one_job_from_its_page_is_logged_once(awa: None, admin_client: Any) -> None:
    done = _jobs(1, "completed")[0]
    response = admin_client.post(reverse("admin:awa_django_job_delete", args=[done]), {"post": "yes"}, follow=True)
    assert [m for m in _messages(response) if "deleted" in m] != []
    assert job_state(done) is None
    assert LogEntry.objects.filter(object_id=str(done), action_flag=DELETION).count() == 1
    assert _timeline(done) == [("delete", "admin:admin")]


def test_detail_buttons_are_logged_and_on_the_timeline(awa: None, admin_client: Any) -> None:
    failed = _jobs(1, "failed")[0]
    response = admin_client.post(reverse("admin:awa_django_job_action", args=[failed, "retry"]), follow=True)
    assert _messages(response) == [f"Job {failed} made available again."]
    assert _timeline(failed) == [("retry", "admin:admin")]
    assert LogEntry.objects.get(object_id=str(failed)).change_message.startswith("retry:")


def _manage(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m django awa_jobs ...`` (manage.py) with the settings in the environment, as a shell has them."""
    from awa_django.db import database_url

    env = {
        **os.environ,
        "AWA_TEST_DATABASE_URL": database_url("default"),
        "PYTHONPATH": str(REPO),
        "DJANGO_SETTINGS_MODULE": "tests.django.project.settings",
    }
    return subprocess.run(
        [sys.executable, "-m", "django", *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=60
    )


def test_manage_py_awa_jobs_acts_on_a_filter_with_an_operator(awa: None) -> None:
    failed = _jobs(30, "failed", kind="K")
    _jobs(2, "failed", kind="other")
    done = _manage("awa_jobs", "retry", "--state", "failed", "--kind", "K", "--operator", "ops:ada")
    assert (done.returncode, done.stdout) == (0, "30 retried\n"), done.stderr
    assert _timeline(failed[0]) == [("retry", "ops:ada")]
    refused = _manage("awa_jobs", "retry")
    assert refused.returncode == 1 and "needs job ids or a filter" in refused.stderr


def test_pausing_and_resuming_a_queue_is_in_the_history(awa: None, admin_client: Any) -> None:
    _jobs(1, "available", queue="email")
    assert admin_client.post(reverse("admin:awa_django_queuemeta_pause", args=["pause", "email"])).status_code == 302
    assert admin_client.post(reverse("admin:awa_django_queuemeta_pause", args=["resume", "email"])).status_code == 302
    entries = list(LogEntry.objects.order_by("id").values_list("object_id", "change_message"))
    assert entries == [
        ("email", "pause: queue email paused (queue email)"),
        ("email", "resume: queue email resumed (queue email)"),
    ]
