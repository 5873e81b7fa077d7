"""Resolving an external callback (awa_bridge.callbacks) from every connection type.

The job is parked the way the worker parks it (claim, register_callback,
finish_attempt as waiting_external, committed); the caller then completes,
fails or retries it in its own transaction.
"""

from __future__ import annotations

import uuid

import psycopg
import pytest

from awa_bridge import (
    complete_external,
    complete_external_async,
    fail_external,
    fail_external_async,
    retry_external,
    retry_external_async,
)
from awa_bridge.errors import CallbackNotFound, CallbackNotWaiting
from awa_bridge.sql import QUERIES

from ..drivers import Handle
from .support import CLAIMER, insert, refused, rows, states, still_usable


def park(url: str) -> tuple[int, str]:
    """A job waiting on a callback, as a worker leaves it: (job id, callback id)."""
    job_id = insert(url, {"order": 7}, queue="cb", max_attempts=3)
    callback_id = str(uuid.uuid4())
    with psycopg.connect(url, autocommit=True) as conn:
        lease = conn.execute(
            QUERIES["claim_jobs"].pyformat, {"queue": "cb", "limit": 1, "deadline_seconds": 60.0, **CLAIMER}
        ).fetchone()[6]  # run_lease
        params = {"callback_id": callback_id, "timeout_seconds": 3600.0, "id": job_id, "lease": lease}
        assert conn.execute(QUERIES["register_callback"].pyformat, params).fetchone() == (job_id,)
        park = {"id": job_id, "lease": lease, "state": "waiting_external", "run_at": None, "refund": 0}
        park |= {"error": None, "progress": None, "metadata": "{}"}
        assert conn.execute(QUERIES["finish_attempt"].pyformat, park).fetchone() == (job_id,)
    return job_id, callback_id


async def test_complete_commits_with_the_caller(handle: Handle, db_url: str) -> None:
    job_id, callback_id = park(db_url)
    await handle.begin()
    row = await handle.call(complete_external, complete_external_async, callback_id, {"status": "paid"})
    assert (row["id"], row["state"], row["attempt"]) == (job_id, "completed", 1)
    assert states(db_url) == {job_id: "waiting_external"}, "nothing is visible before the caller commits"
    await handle.commit()
    assert states(db_url) == {job_id: "completed"}
    assert rows(db_url, "SELECT metadata->'callback_result'->>'status' FROM awa.jobs") == [("paid",)]
    with pytest.raises(CallbackNotWaiting) as info:
        await handle.call(complete_external, complete_external_async, callback_id)
    assert (info.value.job_id, info.value.state) == (job_id, "completed")


async def test_fail_and_retry_roll_back_with_the_caller(handle: Handle, db_url: str) -> None:
    job_id, callback_id = park(db_url)
    await handle.begin()
    row = await handle.call(fail_external, fail_external_async, callback_id, "card declined")
    assert (row["id"], row["state"]) == (job_id, "failed")
    await handle.rollback()
    assert states(db_url) == {job_id: "waiting_external"}
    await handle.begin()
    row = await handle.call(retry_external, retry_external_async, callback_id)
    assert (row["id"], row["state"]) == (job_id, "available")
    await handle.commit()
    assert states(db_url) == {job_id: "available"}


async def test_refusals_leave_the_callers_transaction_usable(handle: Handle, db_url: str) -> None:
    job_id, callback_id = park(db_url)
    await handle.begin()
    await refused("callback_id", handle.call(complete_external, complete_external_async, "not-a-uuid"))
    await refused("error", handle.call(fail_external, fail_external_async, callback_id, ""))
    await refused("payload", handle.call(complete_external, complete_external_async, callback_id, {1j}))
    unknown = str(uuid.uuid4())
    with pytest.raises(CallbackNotFound) as info:
        await handle.call(retry_external, retry_external_async, unknown)
    assert info.value.callback_id == unknown and not isinstance(info.value, CallbackNotWaiting)
    await still_usable(handle, db_url)
    assert states(db_url) == {job_id: "waiting_external"}
