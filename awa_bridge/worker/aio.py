"""Small asyncio helpers shared by the worker's loops."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

log = logging.getLogger("awa_bridge.worker")


async def sleep_unless(stopping: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` or until ``stopping`` is set, whichever comes first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), timeout=seconds)


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
