"""External callbacks: park, resolve from any process, time out (issue 4 item 2)."""

from __future__ import annotations

import asyncio
import contextlib
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


async def test_a_callback_id_is_valid_only_for_the_attempt_that_registered_it(make_client, db_url: str) -> None:
    """Attempt 1 registers a callback and raises; its id must not resolve the job afterwards.

    Between the attempts (retryable) it is refused as no longer waiting; once
    attempt 2 runs it is unknown, and attempt 2's own outcome stands.
    """
    client = make_client()
    first_ids: list[str] = []
    release = asyncio.Event()

    @client.task("two_attempts")
    async def handler(job):
        if job.attempt == 1:
            first_ids.append(await job.register_callback(timeout=60))
            raise awa_bridge.RetryAfter(1.5)
        await release.wait()
        return None

    job_id = insert(db_url, {}, kind="two_attempts", max_attempts=3)
    await client.start([QueueConfig("default", max_workers=1, poll_interval=0.05)])
    await wait_until(lambda: first_ids and job_state(db_url, job_id) == "retryable")
    stale = first_ids[0]
    before = job_row(db_url, job_id)
    with pytest.raises(CallbackNotWaiting) as info:
        awa_bridge.complete_external(db_url, stale, {"late": True})
    assert info.value.state == "retryable"
    assert job_row(db_url, job_id) == before

    await wait_until(lambda: job_row(db_url, job_id)["attempt"] == 2 and job_state(db_url, job_id) == "running")
    running = job_row(db_url, job_id)
    assert running["callback_id"] is None and running["callback_timeout_at"] is None
    for resolve in (
        lambda: awa_bridge.complete_external(db_url, stale, {"late": True}),
        lambda: awa_bridge.fail_external(db_url, stale, "late"),
        lambda: awa_bridge.retry_external(db_url, stale),
    ):
        with pytest.raises(CallbackNotFound) as not_found:
            resolve()
        assert not isinstance(not_found.value, CallbackNotWaiting)
    assert job_row(db_url, job_id)["state"] == "running"

    release.set()
    await wait_until(lambda: job_state(db_url, job_id) == "completed")
    assert "callback_result" not in job_row(db_url, job_id)["metadata"]


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


# -- the receiver under hostile framing, slow clients and the request scheme ----------


class _Receiver:
    """``serve_callbacks`` on a free port, spoken to over raw sockets."""

    def __init__(self, app: Any, socket_timeout: float = 1.0) -> None:
        from awa_bridge.callback_http import serve_callbacks

        self.server = serve_callbacks(app, "127.0.0.1", 0, socket_timeout=socket_timeout)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def raw(self, head: str, body: bytes = b"", pause: float = 0.0) -> tuple[int, dict[str, Any]]:
        """Send a request as given (head without the blank line); return status and JSON answer."""
        import json
        import socket
        import time

        with socket.create_connection(("127.0.0.1", self.port), timeout=15) as sock:
            sock.sendall(head.replace("\n", "\r\n").encode() + b"\r\n\r\n")
            if pause:
                time.sleep(pause)  # a client that stalls mid-request
            with contextlib.suppress(OSError):  # the receiver may already have answered and closed
                sock.sendall(body)
            data = b""
            while chunk := sock.recv(65536):
                data += chunk
        status_line, _, rest = data.partition(b"\r\n")
        return int(status_line.split()[1]), json.loads(rest.partition(b"\r\n\r\n")[2])

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _chunked(data: bytes, size: int = 7) -> bytes:
    pieces = [data[i : i + size] for i in range(0, len(data), size)]
    return b"".join(f"{len(p):x}\r\n".encode() + p + b"\r\n" for p in pieces) + b"0\r\n\r\n"


async def test_receiver_reads_chunked_bodies_and_limits_every_framing(make_client, db_url: str) -> None:
    import json

    from awa_bridge.callback_http import MAX_BODY_BYTES, callback_receiver

    secret = bytes(range(32))
    receiver = _Receiver(callback_receiver(db_url, secret))
    try:
        job_id, callback_id, _ = await park(make_client, db_url)
        sig = sign_callback(secret, callback_id)
        head = f"POST /api/callbacks/{callback_id}/complete HTTP/1.1\nHost: x\nX-Awa-Signature: {sig}"

        status, body = await await_in_thread(lambda: receiver.raw(head + "\nContent-Length: -1", b"{}"))
        assert status == 400 and "Content-Length" in body["error"]
        too_big = MAX_BODY_BYTES + 1
        status, body = await await_in_thread(lambda: receiver.raw(head + f"\nContent-Length: {too_big}"))
        assert status == 413
        huge = _chunked(b"[" + b"0," * (MAX_BODY_BYTES // 2) + b"0]", size=65536)
        status, body = await await_in_thread(lambda: receiver.raw(head + "\nTransfer-Encoding: chunked", huge))
        assert status == 413
        status, body = await await_in_thread(
            lambda: receiver.raw(head + "\nTransfer-Encoding: chunked", b"zz\r\n{}\r\n0\r\n\r\n")
        )
        assert status == 400
        deep = b"[" * 100_000 + b"]" * 100_000
        status, body = await await_in_thread(lambda: receiver.raw(head + f"\nContent-Length: {len(deep)}", deep))
        assert status == 400
        assert job_state(db_url, job_id) == "waiting_external"

        payload = json.dumps({"paid": True, "note": "chunked"}).encode()
        status, body = await await_in_thread(
            lambda: receiver.raw(head + "\nTransfer-Encoding: chunked", _chunked(payload))
        )
        assert (status, body) == (200, {"job_id": job_id, "state": "completed"})
        assert job_row(db_url, job_id)["metadata"]["callback_result"] == {"paid": True, "note": "chunked"}
    finally:
        receiver.close()


def test_receiver_reads_a_body_the_server_already_dechunked(db_url: str) -> None:
    """gunicorn decodes chunked bodies itself and says so with wsgi.input_terminated."""
    import io

    from awa_bridge.callback_http import MAX_BODY_BYTES, read_body

    environ = {"HTTP_TRANSFER_ENCODING": "chunked", "wsgi.input_terminated": True, "wsgi.input": io.BytesIO(b"{}")}
    assert read_body(environ) == b"{}"
    environ["wsgi.input"] = io.BytesIO(b"x" * (MAX_BODY_BYTES + 1))
    with pytest.raises(Exception, match="limit"):
        read_body(environ)


async def test_receiver_times_out_a_slow_client(make_client, db_url: str) -> None:
    from awa_bridge.callback_http import callback_receiver

    secret = bytes(range(32))
    receiver = _Receiver(callback_receiver(db_url, secret), socket_timeout=0.5)
    try:
        job_id, callback_id, _ = await park(make_client, db_url)
        head = (
            f"POST /api/callbacks/{callback_id}/complete HTTP/1.1\nHost: x\n"
            f"X-Awa-Signature: {sign_callback(secret, callback_id)}\nContent-Length: 20"
        )
        status, answer = await await_in_thread(lambda: receiver.raw(head, b'{"a": 1}', pause=2.0))
        assert status == 408, answer
        assert job_state(db_url, job_id) == "waiting_external"
    finally:
        receiver.close()


async def test_request_signature_scheme_binds_action_body_and_time(make_client, db_url: str) -> None:
    import time

    from awa_bridge.callback_http import callback_receiver
    from awa_bridge.callbacks import sign_request, verify_request

    secret = bytes(range(32))
    receiver = _Receiver(callback_receiver(db_url, secret, scheme="request", max_age=60))
    try:
        job_id, callback_id, _ = await park(make_client, db_url, max_attempts=3)
        body = b'{"error": "declined"}'
        now = int(time.time())
        signed_fail = sign_request(secret, callback_id, "fail", now, body)
        assert verify_request(secret, callback_id, "fail", now, body, signed_fail)

        def post(action: str, stamp: int, signature: str, payload: bytes = body) -> tuple[int, dict[str, Any]]:
            head = (
                f"POST /api/callbacks/{callback_id}/{action} HTTP/1.1\nHost: x\nX-Awa-Signature: {signature}\n"
                f"X-Awa-Timestamp: {stamp}\nContent-Length: {len(payload)}"
            )
            return receiver.raw(head, payload)

        # Awa's id-only signature is not enough under this scheme.
        assert (await await_in_thread(lambda: post("fail", now, sign_callback(secret, callback_id))))[0] == 401
        # A captured fail request replayed as complete, with another body, or too late: refused.
        assert (await await_in_thread(lambda: post("complete", now, signed_fail)))[0] == 401
        assert (await await_in_thread(lambda: post("fail", now, signed_fail, b'{"error": "other"}')))[0] == 401
        stale = now - 3600
        assert (
            await await_in_thread(lambda: post("fail", stale, sign_request(secret, callback_id, "fail", stale, body)))
        )[0] == 401
        assert job_state(db_url, job_id) == "waiting_external"

        status, answer = await await_in_thread(lambda: post("fail", now, signed_fail))
        assert (status, answer) == (200, {"job_id": job_id, "state": "failed"})
        # The same request again: nothing left to resolve.
        assert (await await_in_thread(lambda: post("fail", now, signed_fail)))[0] == 409
    finally:
        receiver.close()
