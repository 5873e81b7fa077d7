"""External callbacks: park, resolve from any process, time out (issue 4 item 2)."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

import awa_bridge
from awa_bridge import CallbackNotFound, CallbackNotWaiting, StaleAttempt, ValidationError, WaitForCallback
from awa_bridge.callbacks import callback_url, sign_callback, verify_callback
from awa_bridge.worker.config import QueueConfig

from .waiting import insert, job_row, job_state, wait_until


async def park(make_client, db_url: str, kind: str = "charge", timeout: float = 60, **opts: Any):
    """Start a worker whose handler registers a callback and parks; return (job id, callback id, ids handed out)."""
    client = make_client()
    handed_out: dict[int, str] = {}

    @client.task(kind)
    async def handler(job):
        callback_id = await job.register_callback(timeout=timeout)
        # The id is in the database before the handler can hand it out.
        assert job_row(db_url, job.id)["callback_id"] == uuid.UUID(callback_id)
        handed_out[job.id] = callback_id
        return WaitForCallback(callback_id)

    job_id = insert(db_url, {"order": 7}, kind=kind, **opts)
    await client.start([QueueConfig("default", max_workers=1, poll_interval=0.05)])
    await wait_until(lambda: job_state(db_url, job_id) == "waiting_external")
    return job_id, handed_out[job_id], handed_out


async def test_waiting_job_frees_the_slot_and_completes_from_outside(make_client, db_url: str) -> None:
    job_id, callback_id, _ = await park(make_client, db_url)
    row = job_row(db_url, job_id)
    assert row["callback_timeout_at"] is not None and row["heartbeat_at"] is None
    # The only worker slot is free again: another job runs while the first one waits.
    other = insert(db_url, {"order": 8}, kind="charge")
    await wait_until(lambda: job_state(db_url, other) == "waiting_external")

    result = awa_bridge.complete_external(db_url, callback_id, {"status": "paid", "amount": 12.5})
    assert result["id"] == job_id and result["state"] == "completed"
    done = job_row(db_url, job_id)
    assert done["state"] == "completed" and done["finalized_at"] is not None
    assert done["metadata"]["callback_result"] == {"status": "paid", "amount": 12.5}


async def test_fail_and_retry_external(make_client, db_url: str) -> None:
    job_id, callback_id, handed_out = await park(make_client, db_url, max_attempts=3)
    awa_bridge.retry_external(db_url, callback_id)
    # It runs again (attempt 2) and parks on a new callback.
    await wait_until(
        lambda: job_row(db_url, job_id)["attempt"] == 2 and job_state(db_url, job_id) == "waiting_external"
    )
    second = handed_out[job_id]
    assert second != callback_id
    with pytest.raises(CallbackNotFound):
        awa_bridge.complete_external(db_url, callback_id)  # the first id was replaced
    awa_bridge.fail_external(db_url, second, "card declined")
    row = job_row(db_url, job_id)
    assert row["state"] == "failed"
    assert row["errors"][-1]["error"] == "card declined" and row["errors"][-1]["type"] == "CallbackFailed"


async def test_resolution_of_unknown_resolved_or_timed_out_ids_changes_nothing(make_client, db_url: str) -> None:
    job_id, callback_id, _ = await park(make_client, db_url, timeout=0.3, max_attempts=1)
    with pytest.raises(CallbackNotFound, match="no job is waiting"):
        awa_bridge.complete_external(db_url, str(uuid.uuid4()))
    with pytest.raises(ValidationError, match="callback_id"):
        awa_bridge.complete_external(db_url, "not-a-uuid")
    # The wait times out: the leader rescues it, spending the (only) attempt.
    await wait_until(lambda: job_state(db_url, job_id) == "failed")
    before = job_row(db_url, job_id)
    assert before["errors"][-1]["type"] == "CallbackTimeout"
    for resolve in (
        lambda: awa_bridge.complete_external(db_url, callback_id, {"late": True}),
        lambda: awa_bridge.fail_external(db_url, callback_id, "late"),
        lambda: awa_bridge.retry_external(db_url, callback_id),
    ):
        with pytest.raises(CallbackNotWaiting) as info:
            resolve()
        assert info.value.job_id == job_id and info.value.state == "failed"
    assert job_row(db_url, job_id) == before


async def test_already_resolved_callback_is_rejected(make_client, db_url: str) -> None:
    job_id, callback_id, _ = await park(make_client, db_url)
    await awa_bridge.complete_external_async(db_url, callback_id, None)
    before = job_row(db_url, job_id)
    with pytest.raises(CallbackNotWaiting, match="already resolved"):
        await awa_bridge.complete_external_async(db_url, callback_id, {"again": 1})
    assert job_row(db_url, job_id) == before


async def test_timed_out_wait_is_retried_when_attempts_remain(make_client, db_url: str) -> None:
    job_id, _, _ = await park(make_client, db_url, timeout=0.3, max_attempts=2)
    await wait_until(
        lambda: job_row(db_url, job_id)["attempt"] == 2 and job_state(db_url, job_id) == "waiting_external"
    )
    row = job_row(db_url, job_id)
    assert row["errors"][0]["type"] == "CallbackTimeout" and row["errors"][0]["attempt"] == 1


async def test_concurrent_resolutions_exactly_one_wins(make_client, db_url: str) -> None:
    """R9 for callbacks: complete and fail race on one id; one succeeds, the other is told why."""
    job_id, callback_id, _ = await park(make_client, db_url)
    barrier = threading.Barrier(2)
    results: list[object] = []

    def resolve(fn: Callable[[], Any]) -> None:
        barrier.wait()
        try:
            results.append(fn())
        except CallbackNotWaiting as exc:
            results.append(exc)

    threads = [
        threading.Thread(target=resolve, args=(lambda: awa_bridge.complete_external(db_url, callback_id),)),
        threading.Thread(target=resolve, args=(lambda: awa_bridge.fail_external(db_url, callback_id, "x"),)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    wins = [r for r in results if isinstance(r, dict)]
    losses = [r for r in results if isinstance(r, CallbackNotWaiting)]
    assert len(wins) == 1 and len(losses) == 1
    assert job_state(db_url, job_id) == wins[0]["state"]


async def test_wait_without_registering_fails_the_job(make_client, db_url: str) -> None:
    client = make_client()

    @client.task("bad_wait")
    async def bad_wait(job):
        return WaitForCallback(str(uuid.uuid4()))

    job_id = insert(db_url, {}, kind="bad_wait")
    await client.start(["default:1"])
    await wait_until(lambda: job_state(db_url, job_id) == "failed")
    assert "registered no callback" in job_row(db_url, job_id)["errors"][0]["error"]


async def test_sync_handler_registers_and_a_superseded_attempt_cannot(make_client, db_url: str) -> None:
    client = make_client()
    outcomes: list[Any] = []

    @client.task("sync_wait")
    def sync_wait(job):
        if job.attempt == 1:
            with psycopg.connect(db_url, autocommit=True) as conn:  # an operator cancels it meanwhile
                conn.execute("UPDATE awa.jobs SET state = 'cancelled' WHERE id = %s", (job.id,))
            try:
                job.register_callback(timeout=10)
            except StaleAttempt as exc:
                outcomes.append(exc)
                raise
        return None

    job_id = insert(db_url, {}, kind="sync_wait")
    await client.start(["default:1"])
    await wait_until(lambda: outcomes)
    assert isinstance(outcomes[0], StaleAttempt)
    await wait_until(lambda: not client.runtime.inflight)  # the worker wrote the outcome (fenced) or let go
    assert job_state(db_url, job_id) == "cancelled"
    assert job_row(db_url, job_id)["callback_id"] is None


def test_timeout_validation() -> None:
    from awa_bridge.callbacks import check_timeout

    for bad in (0, -1, "10", True, 10**9):
        with pytest.raises(ValidationError, match="timeout"):
            check_timeout(bad)


def test_signatures_match_awa_pg_and_compare_in_constant_time() -> None:
    secret = bytes(range(32))
    callback_id = "6f1c2a3e-1111-4222-8333-944455556666"
    signature = sign_callback(secret, callback_id)
    assert verify_callback(secret, callback_id, signature)
    assert verify_callback(secret, callback_id, signature.upper())
    assert not verify_callback(secret, callback_id, signature[:-1] + ("0" if signature[-1] != "0" else "1"))
    assert not verify_callback(bytes(32), callback_id, signature)
    with pytest.raises(ValidationError, match="32 bytes"):
        sign_callback(b"short", callback_id)
    assert callback_url("https://app.test/", callback_id, "complete") == (
        f"https://app.test/api/callbacks/{callback_id}/complete"
    )
    awa = pytest.importorskip("awa")
    from awa import callback_contract

    assert callback_contract.sign(secret, callback_id) == signature
    assert callback_contract.SIGNATURE_HEADER == "X-Awa-Signature"
    assert callback_contract.build_callback_url("https://app.test/", "/api/callbacks", callback_id, "complete") == (
        callback_url("https://app.test/", callback_id, "complete")
    )
    del awa


async def test_http_receiver_over_real_http(make_client, db_url: str) -> None:
    import http.client
    import json
    from wsgiref.simple_server import WSGIRequestHandler, make_server

    from awa_bridge.callback_http import callback_receiver

    class Quiet(WSGIRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    secret = bytes(range(32))
    server = make_server("127.0.0.1", 0, callback_receiver(db_url, secret), handler_class=Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    port = server.server_address[1]

    def post(path: str, body: Any = None, signature: str | None = None) -> tuple[int, dict[str, Any]]:
        def call() -> tuple[int, dict[str, Any]]:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
            headers = {"Content-Type": "application/json"}
            if signature is not None:
                headers["X-Awa-Signature"] = signature
            conn.request("POST", path, body=json.dumps(body) if body is not None else None, headers=headers)
            response = conn.getresponse()
            result = response.status, json.loads(response.read())
            conn.close()
            return result

        return await_in_thread(call)

    try:
        job_id, callback_id, _ = await park(make_client, db_url)
        path = f"/api/callbacks/{callback_id}/complete"
        status, body = await post(path, {"paid": True}, signature="00" * 32)
        assert status == 401 and job_state(db_url, job_id) == "waiting_external"
        status, body = await post(
            f"/api/callbacks/{uuid.uuid4()}/complete", None, sign_callback(secret, str(uuid.uuid4()))
        )
        assert status == 401
        unknown = str(uuid.uuid4())
        status, body = await post(f"/api/callbacks/{unknown}/complete", None, sign_callback(secret, unknown))
        assert status == 404
        status, body = await post(path, {"paid": True}, sign_callback(secret, callback_id))
        assert (status, body) == (200, {"job_id": job_id, "state": "completed"})
        assert job_row(db_url, job_id)["metadata"]["callback_result"] == {"paid": True}
        status, body = await post(path, {"paid": True}, sign_callback(secret, callback_id))
        assert status == 409 and body["state"] == "completed"
    finally:
        server.shutdown()
        server.server_close()


def await_in_thread(fn: Callable[[], Any]) -> Any:
    return asyncio.get_running_loop().run_in_executor(None, fn)
