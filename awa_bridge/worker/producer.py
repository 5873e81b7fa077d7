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
import logging
import operator
import random
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from ..sql import QUERIES
from .config import QueueConfig
from .maintenance.aging import age_priorities
from .scheduling import TokenBucket, weighted_allowance

log = logging.getLogger("awa_bridge.worker")

# Where a claim's scan of the dispatch index starts: before every job (priority is at least 1).
FROM_THE_START = (0, datetime(1, 1, 1, tzinfo=UTC), 0)


def claim_after(key: tuple[int, datetime, int] = FROM_THE_START) -> dict[str, Any]:
    """The ``claim_jobs`` parameters that start its scan after the dispatch key ``key``."""
    priority, run_at, job_id = key
    return {"after_priority": priority, "after_run_at": run_at, "after_id": job_id}


# Claims one queue may have in flight at once. While one claim's rows run, the
# next is already on the server, so a queue with a backlog never waits for a
# claim's round trip with its slots empty; a second claim starts only into a
# backlog (the previous claim filled its batch).
CLAIMS_IN_FLIGHT = 2

# Two claims from the start of the queue in a row slower than this (seconds), and than
# SLOW_FACTOR times the fastest one this producer has seen (a database farther away, or behind a
# synchronous standby, answers every claim later), are taken for a held MVCC horizon: their scans
# stepped over the index entries of every job claimed since the horizon stopped, which no vacuum
# can remove until it moves (at 2,000 jobs/s one took 1.5-3 ms, and 20 ms after 70 s of a held
# horizon, when pickup p95 had gone from 6 to 24 ms). One slow claim alone may be a busy moment of
# the host; a false alarm costs only the wait of a job that sorts before the last one claimed.
SLOW_FROM_THE_START = 0.02
SLOW_FACTOR = 4
# While the horizon is held, a claim from the start runs at most this often (seconds; or once a
# poll interval, if that is shorter), and no sooner than HELD_SCAN_SPACING times its last one's
# duration after it, up to HELD_SPACING_MAX (its scans then take at most about a tenth of the time:
# at 2,000 jobs/s, two minutes into a held horizon, one took 0.6 s): a job that sorts before the
# last one claimed waits for it.
HELD_FROM_THE_START_EVERY = 1.0
HELD_SCAN_SPACING = 10
HELD_SPACING_MAX = 30.0
# The warning that claims from the start are slow is logged at most once in this many seconds (a
# horizon held in steps, such as readers that renew their snapshots, would log it at every step).
HELD_WARNING_EVERY = 300.0

# The columns of a claim_jobs row, in the statement's order. The runtime unpacks
# each row by position (Runtime._dispatch): asyncpg's Record looks a column up by
# name at about 300 instructions a time, twelve per job; tests/conformance/
# test_worker_sql.py checks the statement against this tuple.
CLAIM_COLUMNS = (
    "id",
    "kind",
    "args",
    "priority",
    "attempt",
    "max_attempts",
    "run_lease",
    "metadata",
    "tags",
    "progress",
    "deadline_epoch",
    "run_at_epoch",
)

# A claimed row's dispatch key (priority, run_at, id), read by position in C.
_DISPATCH_KEY = operator.itemgetter(*map(CLAIM_COLUMNS.index, ("priority", "run_at_epoch", "id")))


@dataclass
class QueueState:
    config: QueueConfig
    wake: asyncio.Event = field(default_factory=asyncio.Event)  # the producer has something to look at
    wanted: bool = True  # a claim was asked for (start, NOTIFY, poll) and none has started since
    running: int = 0
    backlog: bool = False  # the last claim filled its batch: more may be waiting
    pending: int = 0  # slots reserved by claims in flight
    bucket: TokenBucket | None = None
    next_aging: float = 0.0
    refill: int = 1  # free slots at which a freed one wakes the producer while a backlog remains (Slots)

    def __post_init__(self) -> None:
        if self.config.max_rate is not None:
            self.bucket = TokenBucket(self.config.max_rate, self.config.bucket_size)

    @property
    def free(self) -> int:
        """Slots neither running a handler nor reserved by a claim in flight."""
        return self.config.max_workers - self.running - self.pending

    @property
    def occupied(self) -> int:
        return self.running + self.pending

    def poke(self) -> None:
        """Ask for a claim (a NOTIFY named this queue): the next one starts as soon as a slot allows."""
        self.wanted = True
        self.wake.set()

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
        for state in self.queues:  # a quarter of a claim: smaller claims would cost a round trip each
            state.refill = max(1, min(claim_batch, state.config.max_workers) // 4)
        # Whether the outcomes of returned handlers wait to be written in such number that
        # nothing more may be claimed (the runtime sets the completer's ``congested``).
        self.congested: Callable[[], bool] = lambda: False

    def allowance(self, state: QueueState) -> int:
        """Slots this queue may fill now: its own limit, the global one, the claim batch; none while
        the completer is congested."""
        if self.congested():
            return 0
        # A claim takes at most its share of the queue's slots, so that a second one can be in flight
        # while the first one's jobs run (with 200 slots and claims of 200, one claim waits for the other).
        share = -(-state.config.max_workers // CLAIMS_IN_FLIGHT)
        allowed = min(state.free, self.claim_batch, share)
        if self.global_max is not None:
            allowed = min(allowed, weighted_allowance(state, self.queues, self.global_max))
        return allowed

    def free(self, state: QueueState) -> None:
        """An attempt's handler has really returned: its slot is free again."""
        state.running -= 1
        if (state.backlog or state.wanted) and state.free >= state.refill:
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
        dispatch: Callable[[QueueState, list[Any]], None],
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
        self.claims: set[asyncio.Task[None]] = set()
        # The dispatch key (priority, run_at, id) of the last job claimed while draining a backlog,
        # and until when claims may continue from it (see _after).
        self.mark: tuple[int, datetime, int] | None = None
        self.mark_until = 0.0
        # Claims from the start are slow (SLOW_FROM_THE_START): until one is fast again, every claim
        # continues from the mark and one at most a second starts from the beginning. ``slow`` counts
        # the slow ones in a row, ``fastest`` is the fastest claim from the start seen (SLOW_FACTOR);
        # ``warned_at`` is when the warning was last logged (HELD_WARNING_EVERY).
        self.held = False
        self.slow = 0
        self.fastest: float | None = None
        self.warned_at: float | None = None
        # A claim from the start is on the server; ``epoch`` counts the marks such claims set (a
        # claim that continued from an older mark does not move the newer one: see _moved_to).
        self.scanning = False
        self.epoch = 0

    def stop(self) -> None:
        """Claim no more (the loop ends at its next wake, which this sets)."""
        self.claiming = False
        self.state.wake.set()

    async def run(self) -> None:
        state = self.state
        while self.claiming:
            state.wake.clear()
            wait = state.config.poll_interval * random.uniform(0.9, 1.1)  # jitter spreads the polls of many workers
            while len(self.claims) < CLAIMS_IN_FLIGHT and (state.wanted or state.backlog):
                if self.claims and not state.backlog and not (self.held and self.scanning and self.mark is not None):
                    break  # a second claim only into a backlog, or beside a slow claim from the start
                want = self.slots.allowance(state)
                if want > 0 and state.bucket is not None:
                    tokens = state.bucket.available()
                    if tokens < 1:
                        wait = min(wait, state.bucket.seconds_until_token())
                    want = min(want, tokens)
                if want <= 0:
                    break
                after = self._after()
                state.wanted = False
                state.pending += want
                if state.bucket is not None:
                    state.bucket.take(want)  # reserved now; what the claim did not use is given back
                self.scanning = self.scanning or after is None
                self.claims.add(asyncio.create_task(self._claim(want, after, self.epoch)))
            if not self.claiming:
                break
            if self.held and self.mark_until > time.monotonic():
                # Held: the claim from the start that finds the jobs behind the mark is a poll of its own.
                wait = min(wait, self.mark_until - time.monotonic())
            try:
                await asyncio.wait_for(state.wake.wait(), wait)
            except TimeoutError:
                state.wanted = True  # the poll
        await asyncio.gather(*self.claims, return_exceptions=True)

    def _after(self) -> tuple[int, datetime, int] | None:
        """Where the next claim's scan starts: after the last job claimed (None: from the start).

        The index entries of the jobs claimed since the last vacuum sit at the
        front of jobs_dispatch_idx; a claim from the start passes every one of
        them. So a claim that only continues a backlog (the last one filled its
        batch, nothing asked for a claim since) starts after the last job
        claimed. A job that sorts before that point (a higher priority, an older
        run_at: promoted, retried, aged) is found by the next claim from the
        start: after any NOTIFY or poll (``wanted``: new and promoted jobs
        notify), after ageing priorities, and at least every poll interval.

        While claims from the start are slow (``held``: the MVCC horizon is
        held, so those index entries stay however often they are passed), every
        claim continues from the mark, a NOTIFY's too, and one at most a second
        (less often as its scan grows: HELD_SCAN_SPACING) starts from the
        beginning: a job that sorts before the mark waits for it, instead of
        every job waiting behind a slow scan at every claim.
        """
        state = self.state
        if self.mark is None:
            return None
        if self.held:
            # One claim from the start at a time: those started while it runs continue from the mark.
            return self.mark if self.scanning or time.monotonic() < self.mark_until else None
        if state.wanted or not state.backlog or time.monotonic() >= self.mark_until:
            return None
        return self.mark

    async def _claim(self, want: int, after: tuple[int, datetime, int] | None = None, epoch: int = 0) -> None:
        """Claim up to ``want`` jobs (ageing priorities first when due) and dispatch them; after a failure, back off.

        Runs as a task of its own (up to ``CLAIMS_IN_FLIGHT`` per queue); when it
        ends it leaves ``claims`` and wakes the loop to look again.
        """
        state, q = self.state, self.state.config
        params = {
            "queue": q.name,
            "limit": want,
            "deadline_seconds": float(q.deadline),
            "instance_id": self.instance_id,
            "worker": self.worker,
        }
        scan = after is None
        try:
            rows: list[Any] | None = None
            took = 0.0
            try:
                async with self.pool.acquire() as db:
                    if q.priority_aging and time.monotonic() >= state.next_aging:
                        state.next_aging = time.monotonic() + max(q.priority_aging / 4, 0.05)
                        await age_priorities(db, q.name, q.priority_aging)
                        after = None  # aged jobs moved forward in the dispatch order
                    params.update(claim_after(after or FROM_THE_START))
                    started = time.monotonic()
                    rows = await db.fetch(QUERIES["claim_jobs"], params)
                    took = time.monotonic() - started
            except Exception as exc:
                self.failures += 1
                delay = min(0.1 * 2**self.failures, 5.0)
                log.warning("claim on queue %s failed (%s); retrying in %.1f s", q.name, exc, delay)
            finally:
                if scan:
                    self.scanning = False
                state.pending -= want
                if state.bucket is not None:  # give back the tokens the claim did not use
                    state.bucket.take(len(rows or ()) - want)
            if rows is None:
                state.backlog = False  # no second claim while this one backs off
                await asyncio.sleep(delay)
                state.wanted = True
                return
            self.failures = 0
            state.backlog = len(rows) == want
            last = self._last_key(rows) if rows else None
            if after is None:
                # It passed every entry before the mark if it found fewer jobs than it asked for or
                # reached the mark (a batch filled before it, say with higher priorities, did not).
                reached = len(rows) < want or (last is not None and self.mark is not None and last >= self.mark)
                self._from_the_start_took(took, reached)
            if last is not None:
                self._moved_to(last, after is not None, epoch)
                self.dispatch(state, rows)
        finally:
            self.claims.discard(asyncio.current_task())
            state.wake.set()

    def _from_the_start_every(self) -> float:
        return min(HELD_FROM_THE_START_EVERY, self.state.config.poll_interval)

    def _from_the_start_took(self, seconds: float, reached: bool) -> None:
        """Note how long a claim from the start took: until the next one is due, claims may continue
        from the mark; all of them while such claims are slow (``held``), else only through a backlog."""
        name = self.state.config.name
        self.fastest = seconds if self.fastest is None else min(self.fastest, seconds)
        limit = max(SLOW_FROM_THE_START, SLOW_FACTOR * self.fastest)
        if self.held:
            # Fast again means under half the limit (a claim near it does not flip the mode, and the
            # log, each time), with a scan that passed the entries before the mark.
            if seconds < limit / 2 and reached:
                self.held = False
                self.slow = 0
                log.info("queue %s: claims from the start of the queue are fast again", name)
        else:
            self.slow = self.slow + 1 if seconds > limit else 0
            self.held = self.slow >= 2
            if self.held:
                now = time.monotonic()
                warn = self.warned_at is None or now - self.warned_at >= HELD_WARNING_EVERY
                if warn:
                    self.warned_at = now
                log.log(
                    logging.WARNING if warn else logging.INFO,
                    "queue %s: claims from the start of the queue take %.0f ms; until one is fast again, claims "
                    "continue after the last job claimed and one at most a second starts from the beginning "
                    "(is the MVCC horizon held? see docs/howto/scaling.md)",
                    name,
                    seconds * 1000,
                )
        if self.held:
            every = min(max(self._from_the_start_every(), HELD_SCAN_SPACING * seconds), HELD_SPACING_MAX)
        else:
            every = self.state.config.poll_interval
        self.mark_until = time.monotonic() + every

    @staticmethod
    def _last_key(rows: list[Any]) -> tuple[int, datetime, int]:
        """The greatest dispatch key of claimed rows."""
        priority, run_at, job_id = max(map(_DISPATCH_KEY, rows))  # C-level: no Python frame per row
        return priority, datetime.fromtimestamp(run_at, UTC), job_id

    def _moved_to(self, last: tuple[int, datetime, int], continued: bool, epoch: int) -> None:
        """Remember the last dispatch key claimed; a claim from the start sets it afresh.

        A claim that continued from a mark older than the last claim from the start (``epoch``)
        leaves the mark alone: that claim may have set it back, to jobs found before the old mark,
        which the next claims continue through.
        """
        if continued:
            if epoch != self.epoch:
                return
            if self.mark is not None:
                last = max(last, self.mark)
        else:
            self.epoch += 1
        self.mark = last
