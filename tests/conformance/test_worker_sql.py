"""The worker's statements (claim, complete, finish, heartbeat, register a callback, release) on every driver.

The worker runs the named blocks of awa_bridge/sql/queries.sql through a
driver adapter (runtime.py's producer claims, completer.py finalizes). Run
through each connection type's adapter on the same starting rows, every
statement returns the same rows, values and Python types alike, and writes
the same end state: the SQL does not depend on the driver.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from awa_bridge.worker.completer import int_array
from awa_bridge.worker.producer import CLAIM_COLUMNS

from ..drivers import Handle
from .support import CLAIMER, insert, rows, run_statement, states


def three_jobs(url: str) -> list[int]:
    """Three available jobs on queue ``w``, of priorities 2, 1 and 3."""
    return [
        insert(url, {"n": 1, "s": "é"}, kind="work", queue="w", priority=2, tags=["t"]),
        insert(url, {"n": 2}, kind="work", queue="w", priority=1, metadata={"m": 1}),
        insert(url, {"n": 3}, kind="work", queue="w", priority=3),
    ]


def comparable(row: dict[str, Any]) -> dict[str, Any]:
    """A claimed row with its clock-dependent values (seconds since the epoch) replaced by their types."""
    clock = ("deadline_epoch", "run_at_epoch")
    return {k: type(v).__name__ if k in clock else v for k, v in row.items()}


def claimed(first: int, second: int) -> list[dict[str, Any]]:
    """What ``claim_jobs`` with limit 2 returns on the three jobs (by id), whatever the driver."""
    common = {"kind": "work", "attempt": 1, "max_attempts": 25, "run_lease": 1, "progress": None}
    common |= {"deadline_epoch": "float", "run_at_epoch": "float"}
    return [
        {**common, "id": first, "args": '{"n": 1, "s": "é"}', "priority": 2, "metadata": "{}", "tags": ["t"]},
        {**common, "id": second, "args": '{"n": 2}', "priority": 1, "metadata": '{"m": 1}', "tags": []},
    ]


async def test_claim_and_complete_give_identical_results(handle: Handle, db_url: str) -> None:
    low, high, last = three_jobs(db_url)
    await handle.begin()
    got = await run_statement(handle, "claim_jobs", {"queue": "w", "limit": 2, "deadline_seconds": 30.0, **CLAIMER})
    assert sorted((comparable(row) for row in got), key=lambda row: row["id"]) == claimed(low, high)
    assert all(tuple(row) == CLAIM_COLUMNS for row in got), "the runtime unpacks a claimed row by position"
    # The claim's now() plus its deadline of 30 s, the same for both rows; each job's own run_at, before it.
    assert len({row["deadline_epoch"] for row in got}) == 1
    assert all(row["run_at_epoch"] <= row["deadline_epoch"] - 30 <= time.time() + 1 for row in got)
    await handle.commit()
    assert states(db_url) == {low: "running", high: "running", last: "available"}
    await handle.begin()
    beat = await run_statement(handle, "heartbeat_jobs", {"ids": [low, high, last], "leases": [1, 1, 1]})
    assert sorted(row["id"] for row in beat) == [low, high]
    done = await run_statement(handle, "complete_jobs", {"ids": int_array([low, high]), "leases": "{1,0}"})
    assert done == [{"ids": [low]}], "a stale lease completes nothing"
    stale = await run_statement(handle, "complete_jobs", {"ids": int_array([low]), "leases": "{1}"})
    assert stale == [{"ids": None}], "a completed job is not completed twice"
    progress = {"id": high, "lease": 1, "progress": '{"done": 2}', "metadata": '{"k": "v"}'}
    assert await run_statement(handle, "complete_job_with_progress", progress) == [{"id": high}]
    [row] = await run_statement(handle, "claim_jobs", {"queue": "w", "limit": 5, "deadline_seconds": 30.0, **CLAIMER})
    assert (row["id"], row["args"], row["run_lease"]) == (last, '{"n": 3}', 1)
    result = {"id": last, "lease": 1, "progress": None, "metadata": "{}", "result": '{"total": 3}'}
    assert await run_statement(handle, "complete_job_with_result", result) == [{"id": last}]
    await handle.commit()
    assert states(db_url) == dict.fromkeys((low, high, last), "completed")
    assert rows(db_url, "SELECT progress::text, metadata::text FROM awa.jobs WHERE id = %s", (high,)) == [
        ('{"done": 2}', '{"k": "v", "m": 1}')
    ]
    assert rows(db_url, "SELECT job_id, result::text FROM awa.job_results") == [(last, '{"total": 3}')]


def finish(job_id: int, state: str, **overrides: Any) -> dict[str, Any]:
    """``finish_attempt`` parameters as completer.finish_params builds them."""
    params = {"id": job_id, "lease": 1, "state": state, "run_at": None, "refund": 0, "error": None}
    return params | {"progress": None, "metadata": "{}"} | overrides


async def test_finish_register_callback_and_release_give_identical_results(handle: Handle, db_url: str) -> None:
    jobs = three_jobs(db_url)
    await handle.begin()
    await run_statement(handle, "claim_jobs", {"queue": "w", "limit": 3, "deadline_seconds": 30.0, **CLAIMER})
    error = json.dumps({"error": "boom", "attempt": 1})
    retry_at = datetime(2030, 1, 1, tzinfo=UTC)
    failed = finish(jobs[0], "retryable", run_at=retry_at, error=error, progress='{"p": 1}')
    assert await run_statement(handle, "finish_attempt", failed) == [{"id": jobs[0]}]
    callback_id = str(uuid.uuid4())
    register = {"callback_id": callback_id, "timeout_seconds": 60.0, "id": jobs[1], "lease": 1}
    assert await run_statement(handle, "register_callback", register) == [{"id": jobs[1]}]
    assert await run_statement(handle, "register_callback", {**register, "lease": 2}) == []
    assert await run_statement(handle, "finish_attempt", finish(jobs[1], "waiting_external")) == [{"id": jobs[1]}]
    released = await run_statement(handle, "release_jobs", {"ids": [jobs[2]], "leases": [1]})
    assert released == [{"id": jobs[2]}]
    assert states(db_url) == dict.fromkeys(jobs, "available"), "the caller has not committed yet"
    await handle.commit()
    assert states(db_url) == {jobs[0]: "retryable", jobs[1]: "waiting_external", jobs[2]: "available"}
    [(run_at, errors, progress)] = rows(
        db_url, "SELECT run_at, to_jsonb(errors)::text, progress::text FROM awa.jobs WHERE id = %s", (jobs[0],)
    )
    assert (run_at, json.loads(errors), progress) == (retry_at, [{"error": "boom", "attempt": 1}], '{"p": 1}')
    assert rows(db_url, "SELECT callback_id::text, attempt FROM awa.jobs WHERE id = %s", (jobs[1],)) == [
        (callback_id, 1)
    ]
    assert rows(db_url, "SELECT attempt FROM awa.jobs WHERE id = %s", (jobs[2],)) == [(0,)]


async def test_a_rolled_back_claim_claims_nothing(handle: Handle, db_url: str) -> None:
    jobs = three_jobs(db_url)
    await handle.begin()
    got = await run_statement(handle, "claim_jobs", {"queue": "w", "limit": 10, "deadline_seconds": 30.0, **CLAIMER})
    assert len(got) == 3
    await handle.rollback()
    assert states(db_url) == dict.fromkeys(jobs, "available")
    assert rows(db_url, "SELECT max(run_lease), max(attempt) FROM awa.jobs") == [(0, 0)]
