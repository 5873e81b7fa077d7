"""The attempts this process holds: claimed, not yet finalized or given up.

One table, shared by three threads under one lock: the event loop adds an
attempt at its claim and drops it when its outcome is written (or found
superseded); the heartbeat thread beats for a ``snapshot`` and marks the ones
the database no longer gives us (``supersede``); the drain at shutdown gives
up the attempts it stops waiting for (``give_up``).
"""

from __future__ import annotations

import threading
from collections.abc import Collection
from typing import Any

from .context import JobContext


class HeldAttempts:
    def __init__(self) -> None:
        self.by_id: dict[int, JobContext] = {}
        self.lock = threading.Lock()

    def add(self, ctx: JobContext) -> None:
        with self.lock:
            self.by_id[ctx.id] = ctx

    def add_many(self, contexts: list[JobContext]) -> None:
        with self.lock:
            for ctx in contexts:
                self.by_id[ctx.id] = ctx

    def drop(self, ctx: JobContext) -> None:
        """Stop holding ``ctx`` (a later attempt of the same job, claimed meanwhile, stays)."""
        with self.lock:
            if self.by_id.get(ctx.id) is ctx:
                del self.by_id[ctx.id]

    def drop_many(self, contexts: list[JobContext]) -> None:
        """``drop`` for each of ``contexts``, under one lock."""
        by_id = self.by_id
        with self.lock:
            for ctx in contexts:
                if by_id.get(ctx.id) is ctx:
                    del by_id[ctx.id]

    def snapshot(self) -> list[tuple[int, int]]:
        """(job id, run_lease) of every held attempt: what the heartbeat keeps alive."""
        with self.lock:
            return [(c.id, c.run_lease) for c in self.by_id.values()]

    def supersede(self, attempts: set[tuple[int, int]]) -> None:
        """From the heartbeat thread: these (job id, run_lease) are no longer ours (their handlers must not start).

        Matched on the lease too: the heartbeat's snapshot is older than this
        call, and the loop may have claimed the job's next attempt meanwhile.
        """
        with self.lock:
            for job_id, lease in attempts:
                ctx = self.by_id.get(job_id)
                if ctx is not None and ctx.run_lease == lease:
                    ctx._lost = True
                    ctx._cancelled = True

    def give_up(self, tasks: Collection[Any]) -> list[JobContext]:
        """Cancel the attempts run by ``tasks`` (still held); they are to be released."""
        with self.lock:
            mine = [c for c in self.by_id.values() if c._task in tasks]
            for ctx in mine:
                ctx._cancelled = ctx._released = True
            return mine

    def forget(self, ids: list[int]) -> None:
        with self.lock:
            for job_id in ids:
                self.by_id.pop(job_id, None)
