"""The django.tasks backend (Django 6) / django_tasks backport (Django 5.2): AwaBackend."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from awa_django.backends import FRAMEWORK, awa_priority
from awa_django.models import Job

from .conftest import running_worker, wait_for
from .testapp import tasks
from .testapp.models import Note

if FRAMEWORK == "django.tasks":
    from django.tasks import TaskResultStatus, default_task_backend
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_finished, task_started
else:
    from django_tasks import TaskResultStatus, default_task_backend
    from django_tasks.exceptions import InvalidTaskError as InvalidTask
    from django_tasks.exceptions import TaskResultDoesNotExist
    from django_tasks.signals import task_finished, task_started

pytestmark = [pytest.mark.django, pytest.mark.django_db(transaction=True)]


def test_capabilities_and_priority_mapping() -> None:
    backend = default_task_backend
    assert backend.supports_defer and backend.supports_get_result and backend.supports_priority
    assert [awa_priority(p) for p in (100, 1, 0, -1, -50, -51, -100)] == [1, 1, 2, 3, 3, 4, 4]


def test_enqueue_joins_the_current_transaction(awa: None) -> None:
    with transaction.atomic():
        kept = tasks.add.enqueue(1, 2)
    with pytest.raises(RuntimeError), transaction.atomic():
        dropped = tasks.add.enqueue(3, 4)
        raise RuntimeError("rolled back")
    assert kept.status == TaskResultStatus.READY
    assert default_task_backend.get_result(kept.id).status == TaskResultStatus.READY
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(dropped.id)
    job = Job.objects.get(id=int(kept.id))
    assert (job.kind, job.queue, job.priority, job.args) == (
        "tests.django.testapp.tasks.add",
        "default",
        2,
        {"args": [1, 2], "kwargs": {}},
    )


def test_priority_queue_and_run_after_are_honoured(awa: None) -> None:
    later = timezone.now() + timedelta(hours=2)
    shouted = tasks.shout.enqueue("hi")
    deferred = tasks.add.using(run_after=later, priority=-80).enqueue(5, 6)
    assert (shouted.task.queue_name, shouted.task.priority) == ("email", 50)
    job = Job.objects.get(id=int(shouted.id))
    assert (job.queue, job.priority, job.state) == ("email", 1, "available")
    job = Job.objects.get(id=int(deferred.id))
    assert (job.priority, job.state, job.run_at) == (4, "scheduled", later)
    result = default_task_backend.get_result(deferred.id)
    assert result.task.priority == -80 and result.status == TaskResultStatus.READY
    with pytest.raises(InvalidTask):
        tasks.add.using(queue_name="nowhere").enqueue(1, 1)


def test_the_worker_runs_tasks_and_get_result_reports_them(awa: None) -> None:
    events: list[tuple[str, str]] = []

    def started(sender, task_result, **kwargs):  # type: ignore[no-untyped-def]
        events.append(("started", task_result.id))

    def finished(sender, task_result, **kwargs):  # type: ignore[no-untyped-def]
        events.append((f"finished:{task_result.status}", task_result.id))

    task_started.connect(started)
    task_finished.connect(finished)
    try:
        added = tasks.add.enqueue(2, 3)
        shouted = tasks.shout.enqueue("quiet")
        context = tasks.with_context.enqueue(label="ctx")
        exploded = tasks.explode.enqueue("kaboom")
        with running_worker():
            wait_for(
                lambda: all(
                    default_task_backend.get_result(r.id).is_finished for r in (added, shouted, context, exploded)
                )
            )
    finally:
        task_started.disconnect(started)
        task_finished.disconnect(finished)

    added.refresh()
    assert added.status == TaskResultStatus.SUCCESSFUL and added.return_value == 5
    assert added.finished_at is not None and added.attempts == 1 and added.enqueued_at is not None
    # The value lives in awa.job_results, the store every result uses, not in the job's metadata.
    with connection.cursor() as cursor:
        cursor.execute("SELECT result::text FROM awa.job_results WHERE job_id = %s", [int(added.id)])
        assert cursor.fetchall() == [("5",)]
    assert "return_value" not in Job.objects.get(id=int(added.id)).metadata["django_task"]
    assert tasks.shout.get_result(shouted.id).return_value == {"shouted": "QUIET"}
    assert Note.objects.filter(text="QUIET").exists()
    got = tasks.with_context.get_result(context.id)
    assert got.return_value == {"label": "ctx", "attempt": 1, "id": context.id}
    failed = default_task_backend.get_result(exploded.id)
    assert failed.status == TaskResultStatus.FAILED
    assert failed.errors[0].exception_class_path == "tests.django.testapp.tasks.TaskBoom"
    assert failed.errors[0].exception_class is tasks.TaskBoom
    assert "kaboom" in failed.errors[0].traceback
    with pytest.raises(ValueError, match="failed"):
        _ = failed.return_value
    assert ("started", added.id) in events and ("finished:SUCCESSFUL", added.id) in events
    assert ("finished:FAILED", exploded.id) in events


def test_get_result_of_something_else(awa: None) -> None:
    import awa_django

    job = awa_django.insert_job({}, kind="not_a_task")
    for bad in (str(job.id), "999999", "abc"):
        with pytest.raises(TaskResultDoesNotExist):
            default_task_backend.get_result(bad)
