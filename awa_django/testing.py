"""Test helpers: run the real worker inside a test.

::

    from awa_django.testing import run_queued_jobs

    def test_checkout(transactional_db):          # pytest-django; or a TransactionTestCase
        place_order("ada@example.com")
        run_queued_jobs()                          # every due job, with the real worker; returns when idle
        assert Order.objects.get().confirmation_sent

The worker has its own connections, so it sees committed rows only: use
``transactional_db`` / ``TransactionTestCase``, not a test wrapped in a
transaction. ``running_worker()`` keeps a worker running for the body of a
``with`` block (for tests that enqueue while it runs). With pytest,
``pytest_plugins = ["awa_django.testing"]`` adds an ``awa_worker`` fixture
(a started worker, stopped after the test).
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from awa_bridge.worker import Client, QueueConfig

from .conf import get_settings
from .worker import build_client, parse_queue_overrides

START_TIMEOUT = 15.0
#: States in which a job still has work ahead of it (scheduled and retryable only once due).
PENDING = ("available", "running")
DUE_LATER = ("scheduled", "retryable")


@contextmanager
def running_worker(queues: Iterable[str | QueueConfig] | None = None, **worker_options: Any) -> Iterator[Client]:
    """A worker (``awa_django.worker.build_client()``) running in a background thread.

    ``queues``: names (``"email"``, ``"email:4"``) or ``QueueConfig``s (default:
    ``AWA['QUEUES']``); ``worker_options`` override ``AWA['WORKER']`` (for
    example ``maintenance=False``). Stopped (drained) when the block exits.
    """
    settings = get_settings()
    if worker_options:
        settings = dataclasses.replace(settings, worker=dataclasses.replace(settings.worker, **worker_options))
    if queues is None:
        configs: tuple[QueueConfig, ...] = settings.queues
    else:
        names = [q for q in queues if isinstance(q, str)]
        configs = parse_queue_overrides(names, settings) + tuple(q for q in queues if isinstance(q, QueueConfig))
    client = build_client(settings)
    started = threading.Event()
    failure: list[BaseException] = []
    state: dict[str, Any] = {}

    async def run() -> None:
        state["loop"] = asyncio.get_running_loop()
        state["stop"] = asyncio.Event()
        try:
            await client.start(configs)
        except BaseException as exc:
            failure.append(exc)
            return
        finally:
            started.set()
        await state["stop"].wait()
        await client.shutdown()

    thread = threading.Thread(target=asyncio.run, args=(run(),), name="awa-test-worker", daemon=True)
    thread.start()
    if not started.wait(START_TIMEOUT):
        raise TimeoutError("the worker did not start")
    if failure:
        thread.join(START_TIMEOUT)
        raise failure[0]
    try:
        yield client
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(START_TIMEOUT + settings.worker.drain_timeout)
        if thread.is_alive():
            raise TimeoutError("the worker did not stop")


def pending_jobs(queues: Iterable[str] | None = None, using: str | None = None, within: float = 0.0) -> int:
    """Jobs with work ahead of them: available, running, or scheduled / retryable and due within ``within`` s."""
    from datetime import timedelta

    from django.db.models import Q

    from .db import awa_alias
    from .models import Job

    jobs = Job.objects.using(using or awa_alias())
    if queues is not None:
        jobs = jobs.filter(queue__in=list(queues))
    due = Q(state__in=PENDING) | Q(state__in=DUE_LATER, run_at__lte=datetime.now(UTC) + timedelta(seconds=within))
    return jobs.filter(due).count()


def run_queued_jobs(
    queues: Iterable[str] | None = None, *, timeout: float = 30.0, settle: float = 1.0, **worker_options: Any
) -> None:
    """Run the worker until no job of ``queues`` (default: ``AWA['QUEUES']``) is due, then stop it.

    Jobs that fall due within ``settle`` seconds (a ``RetryAfter(0.1)``, a
    short ``Snooze``) are waited for and run too; jobs scheduled for later,
    and retries with awa's backoff (2 s and more), are left alone. Raises
    ``TimeoutError`` after ``timeout`` seconds.
    """
    names = [q.name for q in get_settings().queues] if queues is None else list(queues)
    worker_options.setdefault("promote_interval", 0.05)
    with running_worker(names, **worker_options):
        deadline = time.monotonic() + timeout
        while pending_jobs(names, within=settle):
            if time.monotonic() > deadline:
                raise TimeoutError(f"jobs still pending after {timeout} s: {pending_jobs(names)}")
            time.sleep(0.05)


try:  # pragma: no cover - pytest is optional
    import pytest
except ImportError:  # pragma: no cover
    pytest = None  # type: ignore[assignment]

if pytest is not None:

    @pytest.fixture
    def awa_worker(transactional_db: None) -> Iterator[Client]:
        """A worker on ``AWA['QUEUES']`` for the duration of the test (needs pytest-django)."""
        with running_worker() as client:
            yield client
