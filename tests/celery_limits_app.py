"""Tasks for the time-limit tests (tests/test_celery_limits.py), run by a real worker subprocess:
``DATABASE_URL=... AWA_TEST_DIR=... python -m awa_bridge worker tests.celery_limits_app:client``
(``AWA_TEST_POOL=prefork`` sets ``worker_pool``).

Each task notes what it did in ``$AWA_TEST_DIR/events`` (one line: pid, what), so the test sees
cleanup code that ran in the worker, or in its child processes, and the worker's signals.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from awa_bridge.celery import Celery, SoftTimeLimitExceeded, TimeLimitExceeded, signals

app = Celery("limits", database_url=os.environ.get("DATABASE_URL"), set_as_current=False)
if os.environ.get("AWA_TEST_POOL"):
    app.conf.worker_pool = os.environ["AWA_TEST_POOL"]


def note(what: str) -> None:
    with open(os.path.join(os.environ["AWA_TEST_DIR"], "events"), "a") as events:
        events.write(f"{os.getpid()} {what}\n")


@app.task(name="limits.add")
def add(x: int, y: int) -> int:
    return x + y


@app.task(name="limits.stuck", time_limit=1)
def stuck(tag: str) -> None:
    """Blocked inside C for an hour: the exception raised in its thread cannot reach it."""
    note(f"start {tag}")
    time.sleep(3600)
    note(f"woke {tag}")


@app.task(name="limits.soft_cleanup", soft_time_limit=0.5, time_limit=20)
def soft_cleanup(tag: str) -> str:
    try:
        while True:
            time.sleep(0.02)
    except SoftTimeLimitExceeded:
        note(f"cleanup {tag}")
        return "cleaned up"


@app.task(name="limits.soft_in_c", soft_time_limit=0.5, time_limit=2)
def soft_in_c(tag: str) -> str:
    try:
        time.sleep(3600)
    except SoftTimeLimitExceeded:
        note(f"interrupted {tag}")
        return "interrupted"
    return "slept"


@app.task(name="limits.async_soft_cleanup", soft_time_limit=0.5, time_limit=20)
async def async_soft_cleanup(tag: str) -> str:
    try:
        await asyncio.sleep(3600)
    except SoftTimeLimitExceeded:
        await asyncio.sleep(0.01)  # the coroutine goes on awaiting after the limit
        note(f"async cleanup {tag}")
        return "cleaned up"
    return "slept"


@app.task(name="limits.async_stuck", time_limit=0.5)
async def async_stuck(tag: str) -> None:
    note(f"start {tag}")
    try:
        await asyncio.sleep(3600)
    finally:
        note(f"unwound {tag}")


@app.task(name="limits.async_blocking", time_limit=0.5)
async def async_blocking(tag: str) -> None:
    """Blocks its own event loop: no cancellation reaches it."""
    note(f"start {tag}")
    time.sleep(3600)


@app.task(name="limits.stuck_autoretry", time_limit=0.5, autoretry_for=(TimeLimitExceeded,), max_retries=3)
def stuck_autoretry(tag: str) -> None:
    note(f"start {tag}")
    time.sleep(3600)


@app.task(
    name="limits.soft_autoretry",
    soft_time_limit=0.3,
    time_limit=20,
    autoretry_for=(SoftTimeLimitExceeded,),
    max_retries=1,
    retry_kwargs={"countdown": 0},
)
def soft_autoretry(tag: str) -> None:
    note(f"start {tag}")
    while True:
        time.sleep(0.02)


@app.task(name="limits.boom")
def boom(tag: str) -> None:
    raise ValueError(f"boom {tag}")


@app.task(name="limits.nap")
def nap(seconds: float) -> str:
    """No limit of its own: the caller gives one (``apply_async(time_limit=...)``)."""
    time.sleep(seconds)
    return "rested"


@app.task(name="limits.progress", bind=True, time_limit=30)
def progress(self: Any, tag: str) -> str:
    """Publishes a state, then waits for the test to have read it (the file ``go-<tag>``)."""
    self.update_state(state="PROGRESS", meta={"step": 1, "pid": os.getpid()})
    gate = os.path.join(os.environ["AWA_TEST_DIR"], f"go-{tag}")
    give_up = time.monotonic() + 20
    while not os.path.exists(gate) and time.monotonic() < give_up:
        time.sleep(0.02)
    return "done"


# Receivers are process-wide (as in Celery): tests that import this module beside other apps'
# tasks run those in the same process, so only this app's tasks are noted.
def ours(sender: Any) -> bool:
    return sender is not None and getattr(sender, "name", "").startswith("limits.")


@signals.task_failure.connect
def on_failure(sender: Any = None, exception: BaseException | None = None, **_: Any) -> None:
    if ours(sender):
        note(f"task_failure {sender.name} {type(exception).__name__}")


@signals.task_postrun.connect
def on_postrun(sender: Any = None, state: str | None = None, **_: Any) -> None:
    if ours(sender):
        note(f"task_postrun {sender.name} {state}")


if os.environ.get("DATABASE_URL"):
    client = app.client(heartbeat_interval=0.05, heartbeat_staleness=0.5, rescue_interval=0.1, promote_interval=0.05)
