"""The shop's jobs. `manage.py awa_worker` runs them."""

from __future__ import annotations

from django.db.models import Sum

import awa_django
from awa_bridge.worker import JobContext

from .models import Order, SentEmail


@awa_django.task(queue="email", transactional=True, takes_job=True, max_attempts=5)
def send_confirmation_email(job: JobContext, order_id: int) -> None:
    """Send the order confirmation.

    transactional=True: this runs inside transaction.atomic(), and the job is
    marked completed in the same transaction, so the outbox row and the order's
    flag are written exactly once even if the worker dies at any moment.
    """
    order = Order.objects.get(id=order_id)
    if order.customer_email.startswith("flaky") and job.attempt == 1:
        raise ConnectionError("SMTP server timed out (simulated; the job is retried with backoff)")
    SentEmail.objects.create(
        order=order, to=order.customer_email, subject=f"Your order #{order.id}: {order.item}", attempt=job.attempt
    )
    order.confirmation_sent = True
    order.save(update_fields=["confirmation_sent"])


@awa_django.task(queue="default")
def daily_sales_report() -> None:
    total = Order.objects.aggregate(total=Sum("total_cents"))["total"] or 0
    print(f"sales so far: {total / 100:.2f}")
