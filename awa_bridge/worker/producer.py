"""Claiming: one producer per queue, each one loop.

A producer claims up to its queue's free slots in one statement, woken by
NOTIFY (the listener), by a freed slot while a backlog remains, or by its
poll interval (jittered, so many workers do not poll in step). ``Slots``
decides how many a queue may claim now: its own limit, the global one
(shared by weight, see ``scheduling``) and the claim batch. Each claimed row
goes to ``dispatch``; the producer knows nothing of how it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from ..sql import QUERIES
from .config import QueueConfig
from .maintenance.aging import age_priorities
from .scheduling import TokenBucket, weighted_allowance

log = logging.getLogger("awa_bridge.worker")


@dataclass
class QueueState:
    config: QueueConfig
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    running: int = 0
    backlog: bool = False  # the last claim filled its batch: more may be waiting
    pending: int = 0  # slots held for a claim in flight (the global limit counts them)
    bucket: TokenBucket | None = None
    next_aging: float = 0.0

    def __post_init__(self) -> None:
        if self.config.max_rate is not None:
            self.bucket = TokenBucket(self.config.max_rate, self.config.bucket_size)

    @property
    def free(self) -> int:
        return self.config.max_workers - self.running

    @property
    def occupied(self) -> int:
        return self.running + self.pending

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def min_workers(self) -> int:
        return self.config.min_workers

    @property
    def weight(self) -> int:
        return self.config.weight


class Slots:
    """The slot accounting of every queue of this worker: how many each may claim, whom a freed slot wakes."""

    def __init__(self, queues: Iterable[QueueState], claim_batch: int, global_max: int | None) -> None:
        self.queues = list(queues)
        self.claim_batch = claim_batch
        self.global_max = global_max
        # Whether the outcomes of returned handlers wait to be written in such number that
        # nothing more may be claimed (the runtime sets the completer's ``congested``).
        self.congested: Callable[[], bool] = lambda: False

    def allowance(self, state: QueueState) -> int:
        """Slots this queue may fill now: its own limit, the global one, the claim batch; none while
        the completer is congested."""
        if self.congested():
            return 0
        allowed = min(state.free, self.claim_batch)
        if self.global_max is not None:
            allowed = min(allowed, weighted_allowance(state, self.queues, self.global_max))
        return allowed

    def free(self, state: QueueState) -> None:
        """An attempt's handler has really returned: its slot is free again."""
        state.running -= 1
        if state.backlog and state.free >= max(1, min(self.claim_batch, state.config.max_workers) // 4):
            state.wake.set()
        if self.global_max is not None:
            # A slot freed under the global limit may be another queue's to take.
            for other in self.queues:
                if other.backlog:
                    other.wake.set()

    def room(self) -> None:
        """The completer caught up: every queue may claim again."""
        for state in self.queues:
            state.wake.set()


class Producer:
    """The claim loop of one queue, on the runtime's pool; claimed rows go to ``dispatch``."""

    def __init__(
        self,
        state: QueueState,
        pool: Any,
        slots: Slots,
        dispatch: Callable[[QueueState, Any], None],
        claimant: tuple[uuid.UUID, str],
    ) -> None:
        self.state = state
        # Who claims (the registry's instance id, "host/pid"): each claim statement records it,
        # with the ids it claimed, in awa.job_claims: the job timeline's "attempt N on host/pid".
        self.instance_id, self.worker = claimant
        self.pool = pool
        self.slots = slots
        self.dispatch = dispatch
        self.claiming = True
        self.failures = 0

    def stop(self) -> None:
        """Claim no more (the loop ends at its next wake, which this sets)."""
        self.claiming = False
        self.state.wake.set()

    async def run(self) -> None:
        state = self.state
        while self.claiming:
            state.wake.clear()
            wait = state.config.poll_interval * random.uniform(0.9, 1.1)  # jitter spreads the polls of many workers
            want = self.slots.allowance(state)
            if want > 0 and state.bucket is not None:
                tokens = state.bucket.available()
                if tokens < 1:
                    wait = min(wait, state.bucket.seconds_until_token())
                want = min(want, tokens)
            if want > 0:
                rows = await self._claim(want)
                if rows is None:
                    continue  # failed; _claim backed off
                if state.bucket is not None:
                    state.bucket.take(len(rows))
                state.backlog = len(rows) == want
                for row in rows:
                    self.dispatch(state, row)
                more = state.bucket is None or state.bucket.available()
                if state.backlog and self.slots.allowance(state) > 0 and more:
                    continue
            if not self.claiming:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(state.wake.wait(), wait)

    async def _claim(self, want: int) -> list[Any] | None:
        """Claim up to ``want`` jobs (ageing priorities first when due); None after a failure, backed off."""
        state, q = self.state, self.state.config
        query = QUERIES["claim_jobs"]
        params = {
            "queue": q.name,
            "limit": want,
            "deadline_seconds": float(q.deadline),
            "instance_id": self.instance_id,
            "worker": self.worker,
        }
        state.pending = want
        try:
            async with self.pool.acquire() as db:
                if q.priority_aging and time.monotonic() >= state.next_aging:
                    await age_priorities(db, q.name, q.priority_aging)
                    state.next_aging = time.monotonic() + max(q.priority_aging / 4, 0.05)
                rows: list[Any] = await db.fetch(query, params)
        except Exception as exc:
            state.pending = 0
            self.failures += 1
            delay = min(0.1 * 2**self.failures, 5.0)
            log.warning("claim on queue %s failed (%s); retrying in %.1f s", q.name, exc, delay)
            await asyncio.sleep(delay)
            return None
        finally:
            state.pending = 0
        self.failures = 0
        return rows
