"""``external_effect``: an external request guarded by a receipt, on every driver (issue 14 item 2).

The provider is the lab's real HTTP mail provider (examples/receipts_lab_provider.py)
in its own process on loopback; a request that "dies after sending" is a
``send`` that posts and then raises, leaving the claim committed and the
outcome unrecorded, which is exactly what a SIGKILL there leaves (the lab,
tests/test_receipts.py, does it with real kills).
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

import awa_bridge
from awa_bridge.errors import OutcomeUnknown, ReceiptConflict, ReceiptNotFound, UnsupportedConnection, ValidationError
from awa_bridge.receipts import (
    ExternalEffect,
    external_effect,
    external_effect_async,
    get_receipt,
    idempotency_key,
    park_for_reconciliation,
    park_for_reconciliation_async,
    release_receipt,
    resolve_receipt,
)

from .conftest import count_rows
from .drivers import Handle
from .waiting import insert, job_row, job_state, wait_until

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session")
def provider(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The lab's mail provider, a real HTTP server in its own process on 127.0.0.1."""
    port_file = tmp_path_factory.mktemp("provider") / "port"
    proc = subprocess.Popen(
        [sys.executable, str(REPO / "examples" / "receipts_lab_provider.py"), "--port-file", str(port_file)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        asyncio.run(wait_until(lambda: port_file.exists() or proc.poll() is not None))
        assert proc.poll() is None, "the provider did not start"
        yield f"http://127.0.0.1:{int(port_file.read_text())}"
    finally:
        proc.terminate()
        proc.wait(10)


class Mail:
    """One test's view of the provider: its own X-Lab-Case, so its counts are its own."""

    def __init__(self, url: str, account: str) -> None:
        self.url = url
        self.account = account
        self.case = uuid.uuid4().hex
        # The provider outlives a test and remembers keys: each test's keys are its own.
        self.tenant = f"acme-{self.case[:12]}"

    def post(self, key: str, message: dict[str, Any]) -> dict[str, Any]:
        headers = {"Content-Type": "application/json", "X-Lab-Case": self.case, "Idempotency-Key": key}
        request = urllib.request.Request(
            f"{self.url}/{self.account}/v1/messages", json.dumps(message).encode(), headers, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                answer: dict[str, Any] = json.loads(response.read())
        except urllib.error.HTTPError as error:
            with error:
                raise RuntimeError(f"provider answered {error.code}: {error.read().decode()}") from None
        return {"message_id": answer["message_id"], "replayed": answer["replayed"]}

    def counts(self) -> tuple[int, int]:
        """(requests, delivered) the provider saw from this test."""
        with urllib.request.urlopen(f"{self.url}/stats", timeout=5) as response:
            stats = json.loads(response.read())["cases"].get(self.case, {})
        return stats.get("requests", 0), stats.get("delivered", 0)


class DiedAfterSending(Exception):
    """Stands for a process stopped after the provider acted and before the outcome was saved."""


def finish(value: Any) -> Any:
    """Run a coroutine that never suspends (the sync handles' async facade) to its end."""
    if not asyncio.iscoroutine(value):
        return value
    try:
        value.send(None)
    except StopIteration as stop:
        return stop.value
    raise RuntimeError("the coroutine suspended")


async def call(h: Handle, *args: Any, **kwargs: Any) -> ExternalEffect:
    """external_effect (sync drivers) or external_effect_async, on the handle's connection."""
    if not h.is_async:
        record = kwargs.pop("record", None)
        wrapped = None if record is None else (lambda outcome: finish(record(outcome)))
        return external_effect(h.conn, *args, record=wrapped, **kwargs)
    return await external_effect_async(h.conn, *args, **kwargs)


def orders(url: str) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        return [note for (note,) in conn.execute("SELECT note FROM app_orders ORDER BY id")]


async def test_idempotent_provider_is_resent_the_same_key_and_the_outcome_recorded_once(
    handle: Handle, db_url: str, provider: str
) -> None:
    mail = Mail(provider, "idempotent")
    message = {"to": "a@customer.example", "subject": "Receipt", "amount_cents": 4999}
    keys: list[str] = []

    def dies_after_sending(key: str) -> Any:
        keys.append(key)
        mail.post(key, message)
        raise DiedAfterSending

    def send(key: str) -> Any:
        keys.append(key)
        return mail.post(key, message)

    def record(outcome: Any) -> Any:
        return handle.app_row(f"emailed {outcome['message_id']}")

    with pytest.raises(DiedAfterSending):
        await call(handle, mail.tenant, "email:inv-1", message, dies_after_sending, idempotent=True, record=record)
    with psycopg.connect(db_url, autocommit=True) as conn:
        assert get_receipt(conn, mail.tenant, "email:inv-1").pending  # the claim was committed before the request
    assert orders(db_url) == [] and mail.counts() == (1, 1)

    again = await call(handle, mail.tenant, "email:inv-1", message, send, idempotent=True, record=record)
    assert again.status == "resent" and again.requested
    assert again.outcome == {"message_id": again.outcome["message_id"], "replayed": True}  # the provider replayed
    assert mail.counts() == (2, 1) and orders(db_url) == [f"emailed {again.outcome['message_id']}"]

    third = await call(handle, mail.tenant, "email:inv-1", message, send, idempotent=True, record=record)
    assert (third.status, third.outcome, third.requested) == ("reused", again.outcome, False)
    assert mail.counts() == (2, 1) and len(orders(db_url)) == 1
    assert keys == [idempotency_key(mail.tenant, "email:inv-1")] * 2 == [third.idempotency_key] * 2


async def test_provider_not_idempotent_is_reported_never_resent(handle: Handle, db_url: str, provider: str) -> None:
    mail = Mail(provider, "plain")
    message = {"to": "b@customer.example", "amount_cents": 100}

    def dies_after_sending(key: str) -> Any:
        mail.post(key, message)
        raise DiedAfterSending

    first = await call(
        handle, mail.tenant, "email:first", message, lambda key: mail.post(key, message), idempotent=False
    )
    assert first.status == "sent" and mail.counts() == (1, 1)
    with pytest.raises(DiedAfterSending):
        await call(handle, mail.tenant, "email:inv-2", message, dies_after_sending, idempotent=False)
    with pytest.raises(OutcomeUnknown) as info:
        await call(handle, mail.tenant, "email:inv-2", message, lambda key: mail.post(key, message), idempotent=False)
    assert (info.value.tenant, info.value.operation_key) == (mail.tenant, "email:inv-2")
    assert mail.counts() == (2, 2), "an unknown outcome on a plain provider must not be sent again"
    # The handle's connection is still usable: no transaction was left open.
    done = await call(
        handle, mail.tenant, "email:other", message, lambda key: mail.post(key, message), idempotent=False
    )
    assert done.status == "sent"


async def test_changed_payload_under_the_same_key_is_refused_before_any_request(
    handle: Handle, db_url: str, provider: str
) -> None:
    mail = Mail(provider, "idempotent")
    sent = await call(
        handle, mail.tenant, "email:inv-3", {"amount_cents": 1}, lambda k: mail.post(k, {"to": "x"}), idempotent=True
    )
    assert sent.status == "sent"
    with pytest.raises(ReceiptConflict):
        await call(
            handle,
            mail.tenant,
            "email:inv-3",
            {"amount_cents": 2},
            lambda k: mail.post(k, {"to": "y"}),
            idempotent=True,
        )
    assert mail.counts() == (1, 1)
    # The provider refuses the same key with a changed payload on its own side too.
    with pytest.raises(RuntimeError, match=r"422.*operation_conflict"):
        mail.post(sent.idempotency_key, {"to": "y"})
    assert mail.counts() == (2, 1)


async def test_inside_a_transaction_is_refused_before_writing_and_leaves_it_usable(handle: Handle, db_url: str) -> None:
    await handle.begin()
    await handle.app_row("kept")
    with pytest.raises(ValidationError) as info:
        await call(handle, "acme", "email:inv-4", {}, lambda key: pytest.fail("must not send"), idempotent=True)
    assert info.value.field == "conn" and "outside any transaction" in str(info.value)
    await handle.commit()
    assert orders(db_url) == ["kept"]
    assert count_rows(db_url, "SELECT count(*) FROM awa.receipts") == 0


async def test_a_failing_business_effect_leaves_the_outcome_unrecorded(handle: Handle, db_url: str) -> None:
    def record(outcome: Any) -> Any:
        raise RuntimeError("the business effect failed")

    with pytest.raises(RuntimeError, match="business effect"):
        await call(handle, "acme", "email:inv-5", {}, lambda key: {"id": 1}, idempotent=True, record=record)
    assert count_rows(db_url, "SELECT count(*) FROM awa.receipts WHERE outcome IS NULL") == 1
    again = await call(handle, "acme", "email:inv-5", {}, lambda key: {"id": 1}, idempotent=True)
    assert again.status == "resent" and again.outcome == {"id": 1}


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"tenant": ""}, "tenant"),
        ({"operation_key": "k" * 1001}, "operation_key"),
        ({"payload": {"a": {1}}}, "payload.a"),
        ({"send": "not callable"}, "send"),
        ({"idempotent": "yes"}, "idempotent"),
        ({"record": 42}, "record"),
    ],
)
def test_bad_input_is_rejected_before_anything_is_written(db_url: str, kwargs: dict[str, Any], field: str) -> None:
    args: dict[str, Any] = {
        "tenant": "acme",
        "operation_key": "k",
        "payload": {},
        "send": lambda key: 1,
        "idempotent": True,
        "record": None,
    }
    args.update(kwargs)
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("TRUNCATE awa.receipts")
        with pytest.raises(ValidationError) as info:
            external_effect(conn, **args)
    assert info.value.field == field
    assert count_rows(db_url, "SELECT count(*) FROM awa.receipts") == 0


async def test_the_wrong_form_for_the_connection_is_named(db_url: str) -> None:
    async with await psycopg.AsyncConnection.connect(db_url) as aconn:
        with pytest.raises(UnsupportedConnection, match="needs a sync one: use the async form"):
            external_effect(aconn, "acme", "k", {}, lambda key: 1, idempotent=True)
    with psycopg.connect(db_url) as conn:
        with pytest.raises(UnsupportedConnection, match="needs an async one: use the sync form"):
            await external_effect_async(conn, "acme", "k", {}, lambda key: 1, idempotent=True)
        with pytest.raises(UnsupportedConnection, match=r"unsupported connection object builtins\.str"):
            external_effect("postgresql://", "acme", "k", {}, lambda key: 1, idempotent=True)


def test_the_provider_listens_on_loopback_only_and_stops_by_itself(tmp_path: Path) -> None:
    port_file = tmp_path / "port"
    command = [sys.executable, str(REPO / "examples" / "receipts_lab_provider.py"), "--port-file", str(port_file)]
    proc = subprocess.Popen([*command, "--lifetime", "2", "--max-requests", "3"])
    try:
        asyncio.run(wait_until(lambda: port_file.exists() or proc.poll() is not None))
        port = int(port_file.read_text())
        listening = subprocess.run(["ss", "-Hltn", f"sport = :{port}"], capture_output=True, text=True).stdout
        assert listening.split()[3] == f"127.0.0.1:{port}", listening
        bad = urllib.request.Request(f"http://127.0.0.1:{port}/plain/v1/messages", b"[]", method="POST")
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(bad, timeout=5)
        assert info.value.code == 400
        info.value.close()
        for _ in range(2):
            urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5).close()
        with pytest.raises(urllib.error.HTTPError) as info:  # the 4th request is over the limit
            urllib.request.urlopen(f"http://127.0.0.1:{port}/stats", timeout=5)
        assert info.value.code == 503
        info.value.close()
        assert proc.wait(10) == 0  # and it stopped on its own
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_release_and_resolve_settle_a_pending_receipt(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("TRUNCATE awa.receipts")
        for key in ("released", "resolved"):
            with pytest.raises(DiedAfterSending):
                external_effect(conn, "acme", key, {"n": 1}, lambda k: _die(), idempotent=False)
        with pytest.raises(ReceiptConflict, match=r"was already claimed \(its outcome not recorded yet\) with"):
            release_receipt(conn, "acme", "released", {"n": 2})  # the message said "recorded" of a pending one
        with pytest.raises(ReceiptConflict, match="was already claimed"):
            resolve_receipt(conn, "acme", "resolved", {"n": 2}, {"message_id": "m-1"})
        release_receipt(conn, "acme", "released", {"n": 1})  # the provider never acted: forget the claim
        assert external_effect(conn, "acme", "released", {"n": 1}, lambda k: "sent", idempotent=False).status == "sent"
        with pytest.raises(ReceiptNotFound, match="outcome is recorded"):
            release_receipt(conn, "acme", "released", {"n": 1})
        with pytest.raises(ReceiptNotFound, match="no receipt"):
            release_receipt(conn, "acme", "never", {"n": 1})
        with conn.transaction():  # the operator records what the provider did, with the business effect
            resolve_receipt(conn, "acme", "resolved", {"n": 1}, {"message_id": "m-9", "reconciled": True})
            conn.execute("INSERT INTO app_orders (note) VALUES ('emailed m-9')")
        done = external_effect(conn, "acme", "resolved", {"n": 1}, lambda k: pytest.fail("resent"), idempotent=False)
        assert (done.status, done.outcome) == ("reused", {"message_id": "m-9", "reconciled": True})


# -- in a worker: park on an unknown outcome, reconcile, run again ---------------------------------------------


async def test_worker_parks_an_unknown_outcome_and_completes_after_reconciliation(
    make_client: Any, db_url: str, provider: str
) -> None:
    mail = Mail(provider, "plain")
    message = {"to": "c@customer.example", "amount_cents": 7}
    with psycopg.connect(db_url, autocommit=True) as conn:
        conn.execute("TRUNCATE awa.receipts")
        with pytest.raises(DiedAfterSending):  # an earlier attempt died after the provider delivered
            external_effect(
                conn, mail.tenant, "email:inv-6", message, lambda k: _die(mail.post(k, message)), idempotent=False
            )
    client = make_client()
    statuses: list[str] = []

    @client.task("email_async")
    async def email_async(job: Any) -> Any:
        aconn = await psycopg.AsyncConnection.connect(db_url)
        try:
            done = await external_effect_async(
                aconn,
                mail.tenant,
                "email:inv-6",
                message,
                lambda k: asyncio.to_thread(mail.post, k, message),
                idempotent=False,
            )
        except OutcomeUnknown as unknown:
            return await park_for_reconciliation_async(job, unknown, timeout=60)
        finally:
            await aconn.close()
        statuses.append(done.status)
        return None

    @client.task("email_sync")
    def email_sync(job: Any) -> Any:
        with psycopg.connect(db_url) as conn:
            try:
                done = external_effect(
                    conn, mail.tenant, "email:inv-7", message, lambda k: mail.post(k, message), idempotent=False
                )
            except OutcomeUnknown as unknown:
                return park_for_reconciliation(job, unknown, timeout=60)
        statuses.append(done.status)
        return None

    job_id = insert(db_url, {}, kind="email_async")
    await client.start(["default:2"])
    await wait_until(lambda: job_state(db_url, job_id) == "waiting_external")
    row = job_row(db_url, job_id)
    note = row["metadata"]["outcome_unknown"]
    assert note["operation_key"] == "email:inv-6" and note["idempotency_key"] == idempotency_key(
        mail.tenant, "email:inv-6"
    )
    assert row["callback_timeout_at"] is not None and mail.counts() == (1, 1)

    # The operator asks the provider (it delivered), records that, and wakes the job.
    with psycopg.connect(db_url, autocommit=True) as conn:
        resolve_receipt(conn, mail.tenant, "email:inv-6", message, {"message_id": "msg-reconciled"})
    awa_bridge.retry_external(db_url, str(row["callback_id"]))
    await wait_until(lambda: job_state(db_url, job_id) == "completed")
    assert statuses == ["reused"] and mail.counts() == (1, 1)

    # The sync form, and the other verdict: the provider never got it, so release and send.
    with psycopg.connect(db_url, autocommit=True) as conn, pytest.raises(DiedAfterSending):
        external_effect(conn, mail.tenant, "email:inv-7", message, lambda k: _die(), idempotent=False)
    sync_id = insert(db_url, {}, kind="email_sync")
    await wait_until(lambda: job_state(db_url, sync_id) == "waiting_external")
    assert job_row(db_url, sync_id)["metadata"]["outcome_unknown"]["operation_key"] == "email:inv-7"
    with psycopg.connect(db_url, autocommit=True) as conn:
        release_receipt(conn, mail.tenant, "email:inv-7", message)
    awa_bridge.retry_external(db_url, str(job_row(db_url, sync_id)["callback_id"]))
    await wait_until(lambda: job_state(db_url, sync_id) == "completed")
    assert statuses == ["reused", "sent"] and mail.counts() == (2, 2)


def _die(*_: Any) -> Any:
    raise DiedAfterSending
