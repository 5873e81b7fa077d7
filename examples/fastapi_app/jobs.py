"""Job args shared by the web app (which enqueues) and the worker (which runs them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class SendOrderConfirmation:
    """Kind ``send_order_confirmation``: e-mail the customer and mark the order confirmed."""

    order_id: int
    email: str
