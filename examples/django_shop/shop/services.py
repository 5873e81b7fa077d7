from __future__ import annotations

from django.db import transaction

from .models import Order
from .tasks import send_confirmation_email


class PaymentDeclined(Exception):
    pass


def place_order(customer_email: str, item: str, total_cents: int, *, decline: bool = False) -> Order:
    """The order row and its confirmation job commit together, or neither does."""
    with transaction.atomic():
        order = Order.objects.create(customer_email=customer_email, item=item, total_cents=total_cents)
        send_confirmation_email.enqueue(order.id)
        if decline:
            raise PaymentDeclined(f"card declined for {customer_email}")
    return order
