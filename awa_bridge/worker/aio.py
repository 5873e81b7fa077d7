"""Small asyncio helpers shared by the worker's loops."""

from __future__ import annotations

import asyncio
import contextlib


async def sleep_unless(stopping: asyncio.Event, seconds: float) -> None:
    """Sleep ``seconds`` or until ``stopping`` is set, whichever comes first."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stopping.wait(), timeout=seconds)
