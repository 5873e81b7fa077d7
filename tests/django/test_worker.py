"""The worker runs Django tasks: threads with Django's connection handling, transactional handlers in atomic()."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

import awa_django
from awa_bridge import admin
from awa_django.models import CronJob, Job

from .conftest import job_state, running_worker, wait_for
from .testapp import tasks
from .testapp.models import Note, Order

pytestmark = [pytest.mark.django, pytest.mark.django_db(transaction=True)]


def _backends() -> int:
    """Connections to the test database other than this one."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def test_sync_tasks_run_in_threads_with_fresh_connections_and_leave_none_open(awa: None) -> None:
    tasks.SEEN.clear()
    with transaction.atomic():
        orders = [Order.objects.create(customer=f"c{i}@example.com") for i in range(6)]
        jobs = [tasks.send_confirmation.enqueue(order.id) for order in orders]
    with running_worker():
        wait_for(lambda: all(job_state(j.id) == "completed" for j in jobs))
    assert Order.objects.filter(confirmed=True).count() == 6
    assert Note.objects.count() == 6
    # close_old_connections() ran before each attempt: none found a connection left open.
    assert [seen["connection_open"] for seen in tasks.SEEN] == [False] * 6
    wait_for(lambda: _backends() == 0, timeout=5)


def test_a_transactional_task_commits_its_writes_with_the_completion(awa: None) -> None:
    order = Order.objects.create(customer="ada@example.com")
    ok = tasks.confirm_transactionally.enqueue(order.id)
    bad = tasks.confirm_transactionally.enqueue(order.id, fail=True)
    with running_worker():
        wait_for(lambda: job_state(ok.id) == "completed" and job_state(bad.id) == "failed")
    order.refresh_from_db()
    assert order.confirmations == 1  # the failed attempt's update rolled back with it
    assert list(Note.objects.values_list("text", flat=True)) == [f"tx:{order.id}"]
    failed = Job.objects.get(id=bad.id)
    assert failed.errors[0]["type"] == "TerminalError"


def test_a_superseded_transactional_attempt_rolls_back_its_writes(awa: None) -> None:
    tasks.RELEASE.clear()
    tasks.STARTED.clear()
    job = tasks.slow_transactional.enqueue(7)
    with running_worker():
        assert tasks.STARTED.wait(10)
        admin.cancel_job(connection, job.id)  # the run_lease-guarded completion will now match nothing
        tasks.RELEASE.set()
        wait_for(lambda: not Job.objects.filter(id=job.id, state="running").exists())
    assert job_state(job.id) == "cancelled"
    assert not Note.objects.filter(text="slow:7").exists()


def test_retries_unknown_kinds_and_periodic_schedules(awa: None) -> None:
    flaky = tasks.flaky.enqueue(fail_times=1)
    coroutine = tasks.async_note.enqueue("hello")
    unknown = awa_django.insert_job({}, kind="tests.django.testapp.tasks.does_not_exist")
    failing = tasks.always_fails.enqueue("broken")
    with running_worker():
        wait_for(lambda: job_state(flaky.id) == "completed")
        wait_for(lambda: job_state(coroutine.id) == "completed")
        wait_for(lambda: job_state(unknown.id) == "failed")
        wait_for(lambda: job_state(failing.id) in ("retryable", "failed"))
        schedule = CronJob.objects.get(name="nightly_digest")
    assert Note.objects.filter(text="flaky done on attempt 2").exists()
    assert Note.objects.filter(text="async:hello").exists()  # async def tasks run on the worker's loop
    assert "unknown job kind" in Job.objects.get(id=unknown.id).errors[0]["error"]
    error = Job.objects.get(id=failing.id).errors[0]
    assert error["type"] == "ValueError" and error["error"] == "broken" and "Traceback" in error["traceback"]
    assert (schedule.kind, schedule.timezone, schedule.args) == ("send_digest", "Europe/London", {"audience": "staff"})


def test_run_queued_jobs_runs_everything_due_and_returns(awa: None) -> None:
    from awa_django.testing import pending_jobs, run_queued_jobs

    order = Order.objects.create(customer="ada@example.com")
    tasks.send_confirmation.enqueue(order.id)
    tasks.flaky.enqueue(fail_times=1)  # its retry falls due during the run
    later = awa_django.insert_job({}, kind="later", run_at="2099-01-01T00:00:00Z")
    run_queued_jobs()
    assert pending_jobs() == 0
    assert Order.objects.get(id=order.id).confirmed
    assert Note.objects.filter(text="flaky done on attempt 2").exists()
    assert job_state(later.id) == "scheduled"
