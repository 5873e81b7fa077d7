"""Tasks written the Celery way; only the import lines changed.

-from celery import chord, group, shared_task
+from awa_bridge.celery import chord, group, shared_task
"""

from __future__ import annotations

from typing import Any

from awa_bridge.celery import AsyncResult, EagerResult, GroupResult, Task, chord, group, shared_task

from .celery_app import app
from .services import CardDeclined, GatewayTimeout, gateway, outbox, rates_api


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task(bind=True, max_retries=3, default_retry_delay=30)
def charge_order(self: Task, order_id: int, amount_cents: int) -> dict[str, Any]:
    """Charge a card; a gateway timeout is retried (at most 3 times), a decline is not."""
    try:
        charge_id = gateway.charge(order_id, amount_cents)
    except GatewayTimeout as exc:
        raise self.retry(exc=exc, countdown=10 * (self.request.retries + 1)) from exc
    send_receipt.delay(order_id, charge_id)
    return {"order_id": order_id, "charge_id": charge_id, "attempts": self.request.retries + 1}


@shared_task(autoretry_for=(ConnectionError,), retry_backoff=True, retry_backoff_max=60, max_retries=4)
def refresh_rates(currency: str) -> float:
    """Fetch an exchange rate; connection errors retry with exponential backoff and full jitter."""
    return rates_api.fetch(currency)


@shared_task(ignore_result=True)
def send_receipt(order_id: int, charge_id: str) -> None:
    outbox.append((f"order-{order_id}@example.com", f"Thanks! Your payment {charge_id} went through."))


@shared_task
def sales_report(period: str = "day") -> str:
    return f"sales report for the last {period}"


@shared_task(soft_time_limit=5, time_limit=10)
def reserve_stock(order_id: int, sku: str, quantity: int) -> dict[str, Any]:
    """Reserve one order line; ``SoftTimeLimitExceeded`` would be raised in here after 5 s."""
    return {"sku": sku, "reserved": quantity}


@shared_task
def ship_order(reservations: list[dict[str, Any]], order_id: int) -> str:
    """The chord's callback: runs once, after every line is reserved, with their results in order."""
    skus = ", ".join(f"{r['reserved']} x {r['sku']}" for r in reservations)
    outbox.append((f"order-{order_id}@example.com", f"Shipped: {skus}"))
    return f"order {order_id} shipped ({len(reservations)} lines)"


def fulfil_order(order_id: int, lines: list[tuple[str, int]]) -> AsyncResult | EagerResult:
    """Reserve every line in parallel, then ship: a chord."""
    reserve_all = chord(reserve_stock.s(order_id, sku, quantity) for sku, quantity in lines)
    result: AsyncResult | EagerResult = reserve_all(ship_order.s(order_id))
    return result


def checkout(order_id: int, amount_cents: int, lines: list[tuple[str, int]]) -> AsyncResult | EagerResult:
    """Charge, then reserve the lines in parallel, then ship: a chain whose group becomes a chord."""
    reserve = group(reserve_stock.si(order_id, sku, quantity) for sku, quantity in lines)
    workflow = charge_order.si(order_id, amount_cents) | reserve | ship_order.s(order_id)
    result: AsyncResult | EagerResult = workflow.delay()
    return result


def fulfil_batch(orders: list[tuple[int, list[tuple[str, int]]]]) -> str:
    """Fulfil several orders in parallel (a group of chords) and save the group, so a status page
    can find it again by its id alone: ``batch_status(batch_id)``."""
    batch = group(chord([reserve_stock.s(o, sku, n) for sku, n in lines], ship_order.s(o)) for o, lines in orders)
    saved: GroupResult = batch.delay().save()
    return str(saved.id)


def batch_status(batch_id: str) -> list[str] | None:
    """What each order of a saved batch came to, waiting for the ones still running (None: unknown id)."""
    batch = app.GroupResult.restore(batch_id)
    return None if batch is None else batch.get(timeout=30)


__all__ = [
    "CardDeclined",
    "add",
    "batch_status",
    "charge_order",
    "checkout",
    "fulfil_batch",
    "fulfil_order",
    "refresh_rates",
    "reserve_stock",
    "sales_report",
    "send_receipt",
    "ship_order",
]
