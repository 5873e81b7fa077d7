"""How much a queue may claim right now: slots, rate limits and weighted sharing.

- ``TokenBucket``: a per-queue rate limit (``max_rate`` jobs per second with
  ``burst`` capacity), kept by each worker process for its own claims.
- ``weighted_allowance``: with a global worker limit, each queue is
  guaranteed its ``min_workers`` and shares the rest (the overflow) by
  ``weight`` while other queues have work waiting; a queue alone with work
  may use every free slot.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterable
from typing import Protocol


class TokenBucket:
    """``rate`` tokens per second, holding at most ``burst``."""

    def __init__(self, rate: float, burst: int) -> None:
        self.rate = rate
        self.burst = burst
        self._now = time.monotonic
        self.tokens = float(burst)
        self.updated = self._now()

    def _refill(self) -> None:
        now = self._now()
        self.tokens = min(self.burst, self.tokens + (now - self.updated) * self.rate)
        self.updated = now

    def available(self) -> int:
        self._refill()
        return math.floor(self.tokens)

    def take(self, count: int) -> None:
        self._refill()
        self.tokens -= count

    def seconds_until_token(self) -> float:
        self._refill()
        return max(0.0, (1 - self.tokens) / self.rate)


class QueueLoad(Protocol):
    """What the allowance needs to know about each queue."""

    backlog: bool

    @property
    def occupied(self) -> int: ...  # slots running or being claimed right now

    @property
    def name(self) -> str: ...

    @property
    def min_workers(self) -> int: ...

    @property
    def weight(self) -> int: ...


def overflow_shares(queues: list[QueueLoad], overflow: int) -> dict[str, int]:
    """Split ``overflow`` slots by weight, whole slots by largest remainder (ties by name)."""
    total = sum(q.weight for q in queues)
    exact = {q.name: overflow * q.weight / total for q in queues}
    shares = {name: math.floor(value) for name, value in exact.items()}
    leftover = overflow - sum(shares.values())
    for name in sorted(exact, key=lambda n: (shares[n] - exact[n], n))[:leftover]:
        shares[name] += 1
    return shares


def weighted_allowance(queue: QueueLoad, queues: Iterable[QueueLoad], global_max: int) -> int:
    """Slots ``queue`` may fill now under a global limit of ``global_max`` workers.

    Every queue keeps its ``min_workers`` (slots it is not using stay reserved
    for it). The rest is shared by weight among the queues that have work
    waiting; a queue whose peers have none may take all of it.
    """
    others = [q for q in queues if q is not queue]
    occupied = queue.occupied + sum(q.occupied for q in others)
    reserved = sum(max(0, q.min_workers - q.occupied) for q in others)
    available = global_max - occupied - reserved
    overflow = global_max - queue.min_workers - sum(q.min_workers for q in others)
    busy = [queue, *(q for q in others if q.backlog)]
    cap = queue.min_workers + overflow_shares(busy, overflow)[queue.name]
    return max(0, min(available, cap - queue.occupied))
