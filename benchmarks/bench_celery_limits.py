"""What a Celery time limit costs per task, without the database: the task's function called
inline (no limits), under a soft limit only (the watchdog), with a hard limit in the worker's
threads (a thread of its own per run) and with ``worker_pool="prefork"`` (a round trip to a
child process).

    .venv/bin/python benchmarks/bench_celery_limits.py --tasks 2000
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import bench_procs as bp

from awa_bridge.celery.child import run_in_child, shutdown
from awa_bridge.celery.limits import limited_call, run_bounded
from awa_bridge.worker.context import JobContext


def job(i: int) -> JobContext:
    return JobContext(
        id=i,
        kind="limits.add",
        queue="bench",
        args=None,
        raw_args={"args": [1, 2], "kwargs": {}},
        attempt=1,
        max_attempts=3,
        priority=2,
        metadata={},
        tags=[],
        run_lease=1,
        progress=None,
        deadline_at=None,
    )


def per_task(fn: Callable[[int], Any], n: int) -> float:
    """Microseconds per call, after one warm-up call."""
    fn(0)
    started = time.perf_counter()
    for i in range(n):
        fn(i)
    return (time.perf_counter() - started) / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=2000)
    args = parser.parse_args()
    bp.require_positive(parser, args, "--tasks")
    n = args.tasks
    os.environ.setdefault("AWA_TEST_DIR", "/tmp")
    from tests.celery_limits_app import add

    def inline(i: int) -> Any:
        return add.invoke([1, 2], {})

    def soft(i: int) -> Any:
        return limited_call(lambda: add.invoke([1, 2], {}), 60, None, None)

    def threads(i: int) -> Any:
        return run_bounded(lambda: limited_call(lambda: add.invoke([1, 2], {}), 60, 300, None), 300, "bench")

    def prefork(i: int) -> Any:
        return run_in_child(add, job(i), "tests.celery_limits_app", 60, 300)

    rows = [("inline, no limits", inline), ("soft_time_limit only", soft), ("time_limit, threads", threads)]
    rows.append(("time_limit, worker_pool='prefork'", prefork))
    try:
        for label, fn in rows:
            print(f"{label:36s} {per_task(fn, n):9.1f} us/task")
    finally:
        shutdown()  # the prefork children


if __name__ == "__main__":
    bp.run_main(main, "interrupted: child processes stopped")
