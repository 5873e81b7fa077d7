"""What every family's conformance tests share: independent reads, setup, the worker's statements."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
import pytest

import awa_bridge
from awa_bridge.errors import UnsupportedConnection, ValidationError
from awa_bridge.sql import QUERIES
from awa_bridge.worker.producer import claim_after

from ..drivers import Handle

#: Who claims, as the worker passes it to claim_jobs (recorded in awa.job_attempts).
CLAIMER = {"instance_id": uuid.uuid4(), "worker": "conformance-host/1", **claim_after()}  # the whole queue


def rows(url: str, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
    """Committed rows, read on an independent autocommit connection."""
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def states(url: str) -> dict[int, str]:
    """Every committed job's state by id."""
    return dict(rows(url, "SELECT id, state::text FROM awa.jobs ORDER BY id"))


def orders(url: str) -> list[str]:
    return [note for (note,) in rows(url, "SELECT note FROM app_orders ORDER BY id")]


def insert(url: str, args: Any = None, **opts: Any) -> int:
    """Enqueue one job in its own committed transaction (setup); returns its id."""
    opts.setdefault("kind", "conformance")
    with psycopg.connect(url) as conn:
        job = awa_bridge.insert_job_sync(conn, {} if args is None else args, **opts)
        conn.commit()
    return job.id


def force(url: str, job_id: int, state: str) -> None:
    """Put a job in a state directly (setup, not an API); a finished state gets its finalized_at."""
    finalized = ", finalized_at = now()" if state in ("completed", "failed", "cancelled") else ""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"UPDATE awa.jobs SET state = CAST(%s AS awa.job_state){finalized} WHERE id = %s", (state, job_id))


async def still_usable(handle: Handle, url: str, note: str = "after the error") -> None:
    """The caller's transaction survived the error: a row written after it commits."""
    await handle.app_row(note)
    await handle.commit()
    assert orders(url) == [note]


async def refused(field: str, call: Awaitable[Any]) -> None:
    """Awaiting ``call`` (a ``Handle.call``) raises a ValidationError naming ``field``."""
    with pytest.raises(ValidationError) as info:
        await call
    assert info.value.field == field, str(info.value)


def sync_only(handle: Handle, call: Callable[[Any], Any]) -> None:
    """A documented sync-only operation on an async connection: UnsupportedConnection saying so."""
    assert handle.is_async
    with pytest.raises(UnsupportedConnection, match="a call without an async form needs a sync connection"):
        call(handle.conn)


async def run_statement(handle: Handle, name: str, params: dict[str, Any]) -> list[dict[str, Any]]:
    """Run the named statement of awa_bridge/sql/queries.sql through the connection's driver adapter.

    The one place the suite reaches the internal adapter interface (the
    worker runs its claim / complete statements through the same one), so a
    rename of ``detect_*`` / ``fetch_all`` is adapted here only.
    """
    from awa_bridge.drivers import detect_async, detect_sync

    query = QUERIES[name]
    if handle.is_async:
        return await detect_async(handle.conn).fetch_all(query, params)
    return detect_sync(handle.conn).fetch_all(query, params)
