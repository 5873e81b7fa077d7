"""Receipts (awa_bridge.receipts, docs/howto/receipts.md) on every connection type.

The receipt and the effect it guards commit or roll back together in the
caller's transaction; a repeat reuses the recorded outcome without the
effect. ``external_effect`` has its own suite over the same connection types
(tests/test_receipts_external.py). Inspection and reconciliation
(``get_receipt``, ``resolve_receipt``, ``release_receipt``, ``prune_receipts``)
take a sync connection; on an async one they refuse with UnsupportedConnection.
"""

from __future__ import annotations

from typing import Any

import pytest

from awa_bridge.errors import ReceiptConflict, ReceiptNotSaved
from awa_bridge.receipts import (
    get_receipt,
    prune_receipts,
    receipt,
    record_effect,
    record_effect_async,
    release_receipt,
    resolve_receipt,
)

from ..drivers import Handle, sync_result
from .support import orders, refused, rows, still_usable, sync_only

PAYLOAD = {"order": 1001, "cents": 4999}


def receipts(url: str) -> list[tuple[Any, ...]]:
    return rows(url, "SELECT tenant, operation_key, outcome::text FROM awa.receipts ORDER BY 1, 2")


async def refund(handle: Handle, order: int = 1001) -> Any:
    """The guarded effect: ``record_effect`` (sync) or ``record_effect_async`` writing an application row."""

    async def effect() -> Any:
        await handle.app_row(f"refund {order}")
        return {"refund": order}

    if handle.is_async:
        return await record_effect_async(handle.conn, "acme", f"refund:{order}", {**PAYLOAD, "order": order}, effect)
    # A sync handle's app_row never suspends: run it to its end inside the sync effect.
    return sync_result(
        record_effect(handle.conn, "acme", f"refund:{order}", {**PAYLOAD, "order": order}, lambda: run(effect()))
    )


def run(coroutine: Any) -> Any:
    """Drive a coroutine that never suspends (a sync handle's step) to its result."""
    try:
        coroutine.send(None)
    except StopIteration as stop:
        return stop.value
    raise AssertionError("a sync handle's step suspended")


async def test_effect_and_receipt_commit_together_and_a_repeat_reuses_the_outcome(handle: Handle, db_url: str) -> None:
    await handle.begin()
    assert await refund(handle) == {"refund": 1001}
    assert receipts(db_url) == [] and orders(db_url) == [], "nothing is visible before the caller commits"
    await handle.commit()
    assert receipts(db_url) == [("acme", "refund:1001", '{"refund": 1001}')]
    await handle.begin()
    assert await refund(handle) == {"refund": 1001}
    await handle.commit()
    assert orders(db_url) == ["refund 1001"], "the repeat reused the outcome and did not refund again"


async def test_effect_and_receipt_roll_back_together(handle: Handle, db_url: str) -> None:
    await handle.begin()
    await refund(handle)
    await handle.rollback()
    assert receipts(db_url) == [] and orders(db_url) == []


async def test_the_receipt_block_on_sync_and_async_connections(handle: Handle, db_url: str) -> None:
    """``with receipt(...)`` on a sync connection, ``async with`` and ``await r.save`` on an async one."""
    await handle.begin()
    if handle.is_async:
        async with receipt(handle.conn, "acme", "mail:1", PAYLOAD) as r:
            assert not r.recorded
            assert await r.save({"sent": True}) == {"sent": True}
        with pytest.raises(ReceiptNotSaved):
            async with receipt(handle.conn, "acme", "mail:2", PAYLOAD):
                pass
    else:
        with receipt(handle.conn, "acme", "mail:1", PAYLOAD) as r:
            assert not r.recorded
            assert r.save({"sent": True}) == {"sent": True}
        with pytest.raises(ReceiptNotSaved), receipt(handle.conn, "acme", "mail:2", PAYLOAD):
            pass
    await handle.rollback()  # the unsaved claim must not be committed
    assert receipts(db_url) == []


async def test_refusals_leave_the_callers_transaction_usable(handle: Handle, db_url: str) -> None:
    with_pending_receipt(db_url)
    await handle.begin()
    await refused("tenant", handle.call(record_effect, record_effect_async, "", "k", {}, lambda: None))
    await refused("operation_key", handle.call(record_effect, record_effect_async, "acme", "k\x00", {}, lambda: None))
    await refused("payload", handle.call(record_effect, record_effect_async, "acme", "k", {1j}, lambda: None))
    with pytest.raises(ReceiptConflict) as info:
        await handle.call(record_effect, record_effect_async, "acme", "email:7", {"other": 1}, lambda: None)
    assert (info.value.tenant, info.value.operation_key) == ("acme", "email:7")
    await still_usable(handle, db_url)
    assert receipts(db_url) == [("acme", "email:7", None)]


async def test_inspection_and_reconciliation_take_a_sync_connection(handle: Handle, db_url: str) -> None:
    with_pending_receipt(db_url)
    if handle.is_async:
        sync_only(handle, lambda conn: get_receipt(conn, "acme", "email:7"))
        sync_only(handle, lambda conn: resolve_receipt(conn, "acme", "email:7", PAYLOAD, {"id": "m-1"}))
        sync_only(handle, lambda conn: release_receipt(conn, "acme", "email:7", PAYLOAD))
        sync_only(handle, lambda conn: prune_receipts(conn, 0))
        assert receipts(db_url) == [("acme", "email:7", None)]
        return
    await handle.begin()
    record = sync_result(get_receipt(handle.conn, "acme", "email:7"))
    assert record is not None and record.pending
    resolved = sync_result(resolve_receipt(handle.conn, "acme", "email:7", PAYLOAD, {"id": "m-1"}))
    assert resolved.outcome == {"id": "m-1"} and not resolved.pending
    assert receipts(db_url) == [("acme", "email:7", None)], "nothing is visible before the caller commits"
    await handle.commit()
    assert receipts(db_url) == [("acme", "email:7", '{"id": "m-1"}')]
    await handle.begin()
    assert sync_result(prune_receipts(handle.conn, 0)) == 1
    await handle.rollback()
    assert len(receipts(db_url)) == 1


def with_pending_receipt(url: str) -> None:
    """A claim committed without an outcome (an external effect whose process died)."""
    import psycopg

    with psycopg.connect(url) as conn:
        with pytest.raises(RuntimeError), receipt(conn, "acme", "email:7", PAYLOAD):
            raise RuntimeError("died after sending")
        conn.commit()
