"""Tasks for the deep Celery tests (tests/test_celery_canvas.py), defined twice from the same functions:

* ``app``: on awa (``awa_bridge.celery``), run by the real worker, in process or as
  ``DATABASE_URL=... python -m awa_bridge worker tests.celery_canvas_app:client``;
* ``reference``: on real Celery 5.7 in eager mode (``task_always_eager``), whose
  outcomes the tests record side by side.

The functions are plain: only the decorator differs, as in a migrated project.
"""

from __future__ import annotations

import os
import random
import threading
import time
from datetime import date, datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from awa_bridge.celery import Celery, SoftTimeLimitExceeded, signals

app = Celery("canvas", database_url=os.environ.get("DATABASE_URL"), set_as_current=False)

#: Released by the progress test once it has read the custom state.
progress_gate = threading.Event()


def add(x: int, y: int) -> int:
    return x + y


def mul(x: int, y: int) -> int:
    return x * y


def tsum(values: list[int]) -> int:
    return sum(values)


def fail(x: Any) -> None:
    raise ValueError(f"boom {x}")


def slow_add(x: int, y: int) -> int:
    """Takes a random few milliseconds, so kills land in the middle of attempts."""
    time.sleep(random.uniform(0.0, 0.03))
    return x + y


def echo(*args: Any, **kwargs: Any) -> dict[str, Any]:
    """Return what arrived, with the Python types of the values (Celery's JSON round-trip)."""
    return {"args": list(args), "kwargs": kwargs, "types": [type(a).__name__ for a in args]}


def kinds() -> dict[str, Any]:
    return {
        "when": datetime(2026, 5, 1, 12, 30),
        "day": date(2026, 5, 1),
        "id": UUID("12345678-1234-5678-1234-567812345678"),
        "price": Decimal("19.99"),
    }


def on_error(request: Any, exc: BaseException, traceback: Any) -> str:
    """A new-style errback: Celery calls it inline with the failed task's request."""
    ERRBACKS.append((request.id, type(exc).__name__, str(exc)))
    return "handled"


def progress(self: Any, steps: int) -> str:
    for step in range(steps):
        self.update_state(state="PROGRESS", meta={"current": step + 1, "total": steps})
    progress_gate.wait(10)
    return "done"


def soft_limited(self: Any) -> str:
    try:
        while True:
            time.sleep(0.01)
    except SoftTimeLimitExceeded:
        return "cleaned up"


def hard_limited() -> str:
    while True:
        time.sleep(0.01)


def once_only() -> str:
    """max_retries=0 and killed in the middle of its first run: Celery redelivers it (not a retry)."""
    marker = os.environ.get("AWA_TEST_MARKER")
    if marker and not os.path.exists(marker):
        with open(marker, "w") as handle:
            handle.write(str(os.getpid()))
        os._exit(1)  # the worker dies mid-task
    return "ran again"


def dies() -> None:
    """In a worker subprocess started with AWA_TEST_DIE=1, the worker dies in the middle of it."""
    if os.environ.get("AWA_TEST_DIE") == "1":
        os._exit(1)
    time.sleep(60)


ERRBACKS: list[tuple[str, str, str]] = []

PLAIN = (add, mul, tsum, fail, slow_add, echo, kinds, on_error, hard_limited, dies)
BOUND = (progress, soft_limited)

for fun in PLAIN:
    app.task(name=f"canvas.{fun.__name__}")(fun)
for fun in BOUND:
    app.task(name=f"canvas.{fun.__name__}", bind=True)(fun)
app.task(name="canvas.once_only", max_retries=0)(once_only)


def fail_slowly(x: Any) -> None:
    """Fails as ``fail`` does, but the worker writes its failure a second late (the receiver below
    sleeps in its ``task_failure``, after its chord has been failed, before the handler returns)."""
    raise ValueError(f"boom {x}")


app.task(name="canvas.fail_slowly")(fail_slowly)


@signals.task_failure.connect(sender="canvas.fail_slowly")
def _slow_to_write(**_: Any) -> None:
    time.sleep(1.0)


def reference_app() -> Any:
    """The same tasks on real Celery 5.7, eager."""
    import celery

    ref = celery.Celery("canvas_ref", set_as_current=False)
    ref.conf.task_always_eager = True
    for fun in PLAIN:
        ref.task(name=f"canvas.{fun.__name__}")(fun)
    for fun in BOUND:
        ref.task(name=f"canvas.{fun.__name__}", bind=True)(fun)
    return ref


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


if os.environ.get("DATABASE_URL"):
    client = app.client(
        heartbeat_interval=_env_float("AWA_HEARTBEAT_INTERVAL", 0.05),
        heartbeat_staleness=_env_float("AWA_HEARTBEAT_STALENESS", 0.25),
        rescue_interval=_env_float("AWA_RESCUE_INTERVAL", 0.1),
        promote_interval=_env_float("AWA_PROMOTE_INTERVAL", 0.05),
        leader_election_interval=_env_float("AWA_LEADER_ELECTION_INTERVAL", 0.2),
    )
