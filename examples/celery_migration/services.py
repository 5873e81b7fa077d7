"""Stand-ins for the outside world the tasks talk to (a payment gateway, a rates API, a mailer).

They fail on demand so the example can show retries: ``gateway.fail_next(order_id, n)``
makes the next ``n`` charges of that order raise ``GatewayTimeout``.
"""

from __future__ import annotations

import threading
from collections import defaultdict


class GatewayTimeout(Exception):
    """The payment gateway did not answer in time (worth retrying)."""


class CardDeclined(Exception):
    """The card was declined (not worth retrying)."""

    def __init__(self, order_id: int, reason: str) -> None:
        self.order_id = order_id
        self.reason = reason
        super().__init__(order_id, reason)

    def __str__(self) -> str:
        return f"order {self.order_id}: card declined ({self.reason})"


class Gateway:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: dict[int, int] = defaultdict(int)
        self.calls: dict[int, int] = defaultdict(int)

    def fail_next(self, order_id: int, times: int) -> None:
        with self._lock:
            self._failures[order_id] = times

    def charge(self, order_id: int, amount_cents: int) -> str:
        with self._lock:
            self.calls[order_id] += 1
            if amount_cents <= 0:
                raise CardDeclined(order_id, "invalid amount")
            if self._failures[order_id] > 0:
                self._failures[order_id] -= 1
                raise GatewayTimeout(f"gateway timed out charging order {order_id}")
        return f"ch_{order_id}_{amount_cents}"


class RatesAPI:
    def __init__(self) -> None:
        self.failures = 0
        self.calls = 0

    def fetch(self, currency: str) -> float:
        self.calls += 1
        if self.failures > 0:
            self.failures -= 1
            raise ConnectionError("rates API unreachable")
        return {"EUR": 1.17, "USD": 1.27}.get(currency, 1.0)


gateway = Gateway()
rates_api = RatesAPI()
outbox: list[tuple[str, str]] = []
