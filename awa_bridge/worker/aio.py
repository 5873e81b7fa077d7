"""Small asyncio helpers shared by the worker's loops."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import sys
from collections.abc import Callable, Coroutine
from typing import Any

log = logging.getLogger("awa_bridge.worker")


async def sleep_unless(stopping: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` or until ``stopping`` is set, whichever comes first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), timeout=seconds)


def loop_factory(choice: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The factory of the loop ``WorkerConfig.event_loop`` names, or None for asyncio's own.

    uvloop runs the loop's own work (scheduling each attempt's task, its
    handles and timers, the sockets' reads and writes) in compiled code where
    asyncio's default loop runs Python: about a tenth fewer instructions per
    drained job (``benchmarks/count_drain_instructions.py``), but no drain
    measurably faster and a less even pickup p95 in the 30-minute soaks, so
    asyncio's own loop ("asyncio") is the default. "auto" takes uvloop when it
    is installed (the ``awa-bridge[uvloop]`` extra; no Windows build); for
    "uvloop" a missing uvloop gives None too, which ``WorkerConfig`` refuses
    up front.
    """
    if choice == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        return None
    return uvloop.new_event_loop


def run_to_the_end(
    main: Coroutine[Any, Any, None], factory: Callable[[], asyncio.AbstractEventLoop] | None, grace: float
) -> None:
    """``asyncio.run(main)`` on the loop ``factory`` makes, with a teardown that cannot hang.

    asyncio's own teardown (``asyncio.run``, ``asyncio.Runner``) cancels the
    tasks still there when ``main`` ends and waits for every one of them: an
    async handler that catches its cancellation and goes on, left running by
    the worker's shutdown (``runtime.CANCEL_GRACE``), would keep the process
    alive as long as it runs. Here such tasks get ``grace`` seconds after
    their cancellation; then the loop is closed without them.
    """
    loop = factory() if factory is not None else asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        loop.run_until_complete(main)
    finally:
        try:
            left = asyncio.all_tasks(loop)
            for task in left:
                task.cancel()
            if left:
                _, still = loop.run_until_complete(asyncio.wait(left, timeout=grace))
                if still:
                    log.warning(
                        "%d task(s) still running %.1f s after their cancellation (%s); the loop closes without them",
                        len(still),
                        grace,
                        ", ".join(sorted(task.get_name() for task in still)),
                    )
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.run_until_complete(loop.shutdown_default_executor())
        finally:
            asyncio.set_event_loop(None)
            loop.close()


def call_from_thread(loop: asyncio.AbstractEventLoop, fn: Callable[..., Any], *args: Any) -> None:
    """``loop.call_soon_threadsafe`` for a handler thread that may outlive its worker.

    A sync handler past its deadline or the drain timeout keeps running after
    the worker stopped and closed its loop; what it reports then has no one to
    hear it (its attempt was handed back or will be rescued), so it is dropped
    rather than raised in that orphaned thread.
    """
    try:
        loop.call_soon_threadsafe(fn, *args)
    except RuntimeError:
        if not loop.is_closed():
            raise
        log.info("a handler thread finished after its worker stopped; its report is dropped")


TaskStarter = Callable[[Coroutine[Any, Any, Any]], "asyncio.Task[Any]"]


def task_starter(loop: asyncio.AbstractEventLoop) -> TaskStarter:
    """How the runtime starts one task per attempt, as cheaply as the loop allows.

    ``asyncio.Task(coro, loop=loop)`` rather than ``asyncio.create_task``
    (two Python calls less per job). On Python 3.12+ the task starts eagerly:
    a handler that finishes without waiting for anything (a fast job) runs to
    its end at once, inside the call, and is never scheduled on the loop; one
    that waits continues as an ordinary task. Either way it runs as its own
    task (``asyncio.current_task()`` is the attempt's). A loop with a task
    factory of its own (uvloop, a user's) gets its tasks from it.
    """
    if loop.get_task_factory() is not None:
        return loop.create_task
    if sys.version_info >= (3, 12):
        return functools.partial(asyncio.Task, loop=loop, eager_start=True)
    return functools.partial(asyncio.Task, loop=loop)
