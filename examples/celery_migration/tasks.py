"""Tasks written the Celery way; only the import line changed.

-from celery import shared_task
+from awa_bridge.celery import shared_task
"""

from __future__ import annotations

from awa_bridge.celery import shared_task

from .celery_app import app
from .services import CardDeclined, GatewayTimeout, gateway, outbox, rates_api


@app.task
def add(x: int, y: int) -> int:
    return x + y


@app.task(bind=True, max_retries=3, default_retry_delay=30)
def charge_order(self, order_id: int, amount_cents: int) -> dict:
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


__all__ = ["CardDeclined", "add", "charge_order", "refresh_rates", "sales_report", "send_receipt"]
