"""Celery time limits on a real worker subprocess (issue 13): a hard ``time_limit`` ends the
attempt even when the task is stuck where no exception reaches it (``time.sleep`` in C), as
FAILURE with ``TimeLimitExceeded`` (the ``task_failure`` signal sent in the worker), and the
worker goes on; ``soft_time_limit`` raises ``SoftTimeLimitExceeded`` inside sync and ``async def``
tasks, which may catch it and clean up. Each test runs with the worker's threads (the default)
and with ``worker_pool="prefork"`` (tasks with a hard limit in child processes, killed at it).

Celery's own behaviour, recorded: its eager mode applies no time limits (they belong to its
pool), so the outcomes are compared with Celery's rules as its worker applies them
(celery/worker/request.py ``on_timeout``, celery/app/autoretry.py): a hard limit fails the task
with ``TimeLimitExceeded`` and calls ``on_failure`` and ``task_failure`` in the worker; it is
never retried, ``autoretry_for`` included, since the task's code (where autoretry runs) is
killed; ``SoftTimeLimitExceeded`` is an ordinary exception raised in the task, so
``autoretry_for`` retries it (checked against real Celery below).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import celery
import pytest

from awa_bridge.celery import SoftTimeLimitExceeded, TimeLimitExceeded, states

from . import celery_limits_app as limits
from .procs import Worker, Workers, wait_for

POOLS = ["threads", "prefork"]

# Real Celery 5.7, eager, for the autoretry comparison (defined once: Celery warns on a second definition).
reference = celery.Celery("limits_ref", set_as_current=False)
reference.conf.task_always_eager = True
REF_RUNS: list[int] = []


@reference.task(
    name="limits_ref.soft",
    autoretry_for=(celery.exceptions.SoftTimeLimitExceeded,),
    max_retries=1,
    retry_kwargs={"countdown": 0},
)
def ref_soft() -> None:
    REF_RUNS.append(1)
    raise celery.exceptions.SoftTimeLimitExceeded()


@pytest.fixture(params=POOLS)
def worker(request: pytest.FixtureRequest, db_url: str, tmp_path: Path) -> Iterator[Worker]:
    limits.app.conf.database_url = db_url
    os.environ["AWA_TEST_DIR"] = str(tmp_path)
    started = Workers(db_url)
    env = {"AWA_TEST_DIR": str(tmp_path), "AWA_TEST_POOL": request.param}
    try:
        yield started.start("default", env=env, target="tests.celery_limits_app:client").wait_started(30)
    finally:
        started.close()
        limits.app.close()


def noted(what: str) -> list[int]:
    """The pids that noted ``what``."""
    path = Path(os.environ["AWA_TEST_DIR"]) / "events"
    lines = path.read_text().splitlines() if path.exists() else []
    return [int(pid) for pid, _, rest in (line.partition(" ") for line in lines) if rest == what]


def finished(result: Any, timeout: float) -> Any:
    wait_for(lambda: result.ready(), timeout, f"{result.id} to finish")
    return result


def test_a_task_stuck_in_c_past_time_limit_fails_with_time_limit_exceeded(worker: Worker) -> None:
    started = time.monotonic()
    result = limits.stuck.delay("a")
    finished(result, 15)
    elapsed = time.monotonic() - started
    assert result.state == states.FAILURE
    assert isinstance(result.result, TimeLimitExceeded)
    assert "TimeLimitExceeded" in (result.traceback or "")
    assert elapsed < 1 + 5  # time_limit=1: ended at the limit (+ the thread's grace), long before the hour
    # The signal is sent in the worker itself, as Celery's on_timeout sends it in its main process.
    wait_for(lambda: noted("task_failure limits.stuck TimeLimitExceeded"), 5, "task_failure")
    assert noted("task_failure limits.stuck TimeLimitExceeded") == [worker.pid]
    assert noted("task_postrun limits.stuck FAILURE") == []  # as Celery's on_timeout: the run never returned
    ran_in = noted("start a")
    assert ran_in and not noted("woke a")
    # threads: in the worker; prefork: in a child process, killed at the limit.
    assert (ran_in == [worker.pid]) == (worker.env["AWA_TEST_POOL"] == "threads")
    # The worker goes on: the next job runs, and the failed one never runs again.
    assert limits.add.delay(2, 3).get(timeout=15, interval=0.02) == 5
    assert len(noted("start a")) == 1 and worker.alive()


def test_the_slot_of_a_stuck_task_is_freed(worker: Worker) -> None:
    """More stuck tasks than the queue has slots (awa's default, 10): all end, then others run."""
    results = [limits.stuck.delay(f"s{i}") for i in range(12)]
    for result in results:
        assert isinstance(finished(result, 30).result, TimeLimitExceeded)
    assert limits.add.delay(1, 1).get(timeout=15, interval=0.02) == 2


def test_a_sync_task_catching_soft_time_limit_exceeded_cleans_up(worker: Worker) -> None:
    result = limits.soft_cleanup.delay("b")
    assert result.get(timeout=15, interval=0.02) == "cleaned up"
    assert len(noted("cleanup b")) == 1


def test_a_soft_limit_interrupts_a_blocking_call_only_in_a_child_process(worker: Worker) -> None:
    """prefork: SIGALRM interrupts ``time.sleep``, as Celery's soft limit does. Threads: nothing
    reaches a thread blocked in C, so the hard limit ends it."""
    result = finished(limits.soft_in_c.delay("i"), 15)
    if worker.env["AWA_TEST_POOL"] == "prefork":
        assert result.get() == "interrupted" and len(noted("interrupted i")) == 1
    else:
        assert isinstance(result.result, TimeLimitExceeded) and not noted("interrupted i")


def test_an_async_task_catching_soft_time_limit_exceeded_cleans_up_and_returns(worker: Worker) -> None:
    result = limits.async_soft_cleanup.delay("c")
    assert result.get(timeout=15, interval=0.02) == "cleaned up"  # its return value is the result
    assert len(noted("async cleanup c")) == 1


def test_an_async_task_past_its_hard_limit_fails_with_time_limit_exceeded(worker: Worker) -> None:
    for task, tag in ((limits.async_stuck, "d"), (limits.async_blocking, "e")):
        result = finished(task.delay(tag), 15)
        assert result.state == states.FAILURE and isinstance(result.result, TimeLimitExceeded), tag
        signal = f"task_failure {task.name} TimeLimitExceeded"
        wait_for(lambda: noted(signal), 5, "task_failure")  # noqa: B023 (called in this iteration)
    assert limits.add.delay(2, 2).get(timeout=15, interval=0.02) == 4


def test_time_limit_exceeded_is_not_retried_even_in_autoretry_for(worker: Worker) -> None:
    result = finished(limits.stuck_autoretry.delay("f"), 15)
    assert result.state == states.FAILURE and isinstance(result.result, TimeLimitExceeded)
    assert limits.add.delay(3, 3).get(timeout=15, interval=0.02) == 6  # a later job ran: no retry is pending
    assert len(noted("start f")) == 1


def test_soft_time_limit_exceeded_is_retried_by_autoretry_for_as_celery_does(worker: Worker) -> None:
    # Real Celery, eager: the same exception from the same task options is retried once, then fails.
    REF_RUNS.clear()
    theirs = ref_soft.apply()
    assert theirs.state == "FAILURE" and len(REF_RUNS) == 2
    result = finished(limits.soft_autoretry.delay("g"), 20)
    assert result.state == states.FAILURE and isinstance(result.result, SoftTimeLimitExceeded)
    assert str(result.result) == "soft time limit of 0.3 s exceeded"
    assert len(noted("start g")) == len(REF_RUNS) == 2


def test_a_failed_task_is_logged_once_by_the_worker(worker: Worker) -> None:
    result = finished(limits.boom.delay("j"), 15)
    assert result.state == states.FAILURE
    worker.wait_log("failed for good")
    lines = [line for line in worker.lines if "boom j" in line]
    assert len(lines) == 1 and " ERROR " in lines[0] and "failed for good: ValueError: boom j" in lines[0], lines


def test_a_time_limit_given_at_the_call_applies_to_that_call(worker: Worker) -> None:
    result = finished(limits.nap.apply_async((3600,), time_limit=0.5), 15)
    assert result.state == states.FAILURE and isinstance(result.result, TimeLimitExceeded)
    assert limits.nap.delay(0).get(timeout=15, interval=0.02) == "rested"


def test_update_state_shows_while_a_limited_task_runs(worker: Worker) -> None:
    """With prefork the task runs in a child, which writes its state at once."""
    result = limits.progress.delay("h")
    wait_for(lambda: result.state == "PROGRESS", 15, "the PROGRESS state")
    assert result.info["step"] == 1
    (Path(os.environ["AWA_TEST_DIR"]) / "go-h").touch()
    assert result.get(timeout=15, interval=0.02) == "done"
