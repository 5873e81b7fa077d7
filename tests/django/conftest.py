"""Fixtures of the Django tests: a clean awa schema on the test database; the worker comes from awa_django.testing."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from awa_django.testing import running_worker

__all__ = ["job_state", "running_worker", "wait_for"]

TIMEOUT = 15.0


@pytest.fixture
def awa(transactional_db: None) -> Iterator[None]:
    """The test database (committed writes, as a worker sees them) with empty awa tables."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "TRUNCATE awa.jobs, awa.queue_meta, awa.cron_jobs, awa.runtime_instances, awa.maintenance_lease, "
            "awa.queue_rollups, awa.job_actions RESTART IDENTITY CASCADE"
        )
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


def job_state(job_id: int) -> str | None:
    from awa_django.models import Job

    return Job.objects.filter(id=job_id).values_list("state", flat=True).first()
