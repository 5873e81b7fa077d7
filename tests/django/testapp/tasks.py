"""Tasks of the test project: @awa_django.task functions and Django Tasks-framework tasks."""

from __future__ import annotations

import threading

from django.db import connection

import awa_django
from awa_bridge.worker import RetryAfter, Snooze, TerminalError
from awa_django.backends import FRAMEWORK

from .models import Note, Order

if FRAMEWORK == "django.tasks":
    from django.tasks import task
else:
    from django_tasks import task

#: Thread idents the sync handlers ran on, and whether a connection was open when they started.
SEEN: list[dict[str, object]] = []


@awa_django.task(queue="email")
def send_confirmation(order_id: int, note: str = "confirmed") -> None:
    SEEN.append({"thread": threading.get_ident(), "connection_open": connection.connection is not None})
    Order.objects.filter(id=order_id).update(confirmed=True)
    Note.objects.create(text=f"{note}:{order_id}")


@awa_django.task(transactional=True)
def confirm_transactionally(order_id: int, fail: bool = False) -> None:
    Order.objects.filter(id=order_id).update(confirmations=models_f("confirmations") + 1, confirmed=True)
    Note.objects.create(text=f"tx:{order_id}")
    if fail:
        raise TerminalError("the handler failed after writing")


@awa_django.task(takes_job=True, max_attempts=3)
def flaky(job, fail_times: int) -> None:
    if job.attempt <= fail_times:
        raise RetryAfter(0.05, f"attempt {job.attempt} fails")
    Note.objects.create(text=f"flaky done on attempt {job.attempt}")


@awa_django.task(takes_job=True)
def snooze_then_retry(job, label: str) -> None:
    """Snoozes its first run (the attempt is not spent), fails attempt 1, completes attempt 2."""
    if not Note.objects.filter(text=f"snoozed:{label}").exists():
        Note.objects.create(text=f"snoozed:{label}")
        raise Snooze(0.05)
    if job.attempt == 1:
        raise RetryAfter(0.05, "attempt 1 fails")
    Note.objects.create(text=f"done:{label}")


#: Set by the test to let slow_transactional finish.
RELEASE = threading.Event()
STARTED = threading.Event()


@awa_django.task(transactional=True)
def slow_transactional(order_id: int) -> None:
    Note.objects.create(text=f"slow:{order_id}")
    STARTED.set()
    RELEASE.wait(10)


@awa_django.task(kind="send_digest", queue="default")
def send_digest(audience: str) -> None:
    Note.objects.create(text=f"digest for {audience}")


@awa_django.task
def always_fails(reason: str) -> None:
    raise ValueError(reason)


@awa_django.task
async def async_note(text: str) -> None:
    from asgiref.sync import sync_to_async

    await sync_to_async(Note.objects.create)(text=f"async:{text}")


def models_f(name: str):
    from django.db.models import F

    return F(name)


# -- Django's Tasks framework ------------------------------------------------------------


@task()
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="email", priority=50)
def shout(text: str) -> dict[str, str]:
    Note.objects.create(text=text.upper())
    return {"shouted": text.upper()}


@task(takes_context=True)
def with_context(context, label: str) -> dict[str, object]:
    return {"label": label, "attempt": context.attempt, "id": context.task_result.id}


class TaskBoom(Exception):
    pass


@task()
def explode(message: str) -> None:
    raise TaskBoom(message)
