"""Fixtures of the Django tests: a clean awa schema on the test database, an in-process worker."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

TIMEOUT = 15.0


@pytest.fixture
def awa(transactional_db: None) -> Iterator[None]:
    """The test database (committed writes, as a worker sees them) with empty awa tables."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE awa.jobs, awa.queue_meta, awa.cron_jobs RESTART IDENTITY CASCADE")
    yield
    connection.close()


def wait_for(predicate: Callable[[], Any], timeout: float = TIMEOUT, interval: float = 0.05) -> Any:
    """Poll ``predicate`` until it returns something truthy (never sleep blindly)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout} s")
        time.sleep(interval)


@contextmanager
def running_worker(queues: Any = None, **changes: Any) -> Iterator[Any]:
    """``awa_django.worker.build_client()`` started in a background thread (its own event loop)."""
    import dataclasses

    from awa_django.conf import get_settings
    from awa_django.worker import build_client

    settings = get_settings()
    if changes:
        settings = dataclasses.replace(settings, worker=dataclasses.replace(settings.worker, **changes))
    client = build_client(settings)
    started = threading.Event()
    failure: list[BaseException] = []
    state: dict[str, Any] = {}

    def main() -> None:
        async def run() -> None:
            state["loop"] = asyncio.get_running_loop()
            state["stop"] = asyncio.Event()
            try:
                await client.start(queues if queues is not None else settings.queues)
            except BaseException as exc:
                failure.append(exc)
                started.set()
                return
            started.set()
            await state["stop"].wait()
            await client.shutdown()

        asyncio.run(run())

    thread = threading.Thread(target=main, name="awa-test-worker", daemon=True)
    thread.start()
    started.wait(TIMEOUT)
    if failure:
        raise failure[0]
    try:
        yield client
    finally:
        state["loop"].call_soon_threadsafe(state["stop"].set)
        thread.join(TIMEOUT)
        assert not thread.is_alive(), "the worker did not stop"


def job_state(job_id: int) -> str | None:
    from awa_django.models import Job

    return Job.objects.filter(id=job_id).values_list("state", flat=True).first()
