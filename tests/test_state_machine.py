"""R32: the job protocol as a state machine, on a real PostgreSQL (docs/reliability.md).

Hypothesis runs random sequences of the worker's own statements against one small queue: claims,
heartbeats and completions with any lease (the current one, a stale one, one never issued),
rescue of stale heartbeats and of expired deadlines, promotion of due jobs, an operator's cancel,
snoozes and retries. After every step it reads the rows back and checks the protocol's
invariants: a running job is owned by exactly its current lease and a job that is not running by
none; leases only grow, one per claim; a lease completes at most once; a job never goes from
running under one lease to running under another without passing through a state that is not
running; a finished job stays finished. Faults are made by backdating the times the maintenance
statements read, so every sequence is deterministic and a failing one shrinks to a short story.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Coroutine
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import asyncpg
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

import awa_bridge
from awa_bridge import admin
from awa_bridge.errors import InvalidState
from awa_bridge.sql import QUERIES
from awa_bridge.worker import RetryAfter, Snooze
from awa_bridge.worker.completer import finalize_one
from awa_bridge.worker.context import JobContext
from awa_bridge.worker.maintenance.promote import promote_due
from awa_bridge.worker.maintenance.rescue import rescue_expired_deadlines, rescue_stale_heartbeats
from awa_bridge.worker.outcomes import COMPLETED, Cancel, Outcome, TerminalError, outcome_of_exception
from awa_bridge.worker.producer import claim_after

from .dbutil import EMPTY_AWA_TABLES
from .test_fencing import context

_T = TypeVar("_T")
FINISHED = frozenset({"completed", "failed", "cancelled"})
MAX_ATTEMPTS = 3  # small, so that retries and rescues run attempts out within a sequence
CLAIMER = {"instance_id": uuid.uuid4(), "worker": "state-machine/1", **claim_after()}
OUTCOMES = ("completed", "retry", "retry_after", "snooze", "snooze_now", "cancel", "terminal")


def _outcome(kind: str, attempt: int) -> Outcome:
    """The outcome a handler of this attempt would produce."""
    if kind == "completed":
        return COMPLETED
    exc: BaseException = {
        "retry": RuntimeError("boom"),
        "retry_after": RetryAfter(30),
        "snooze": Snooze(30),
        "snooze_now": Snooze(0),
        "cancel": Cancel("given up"),
        "terminal": TerminalError("bad input"),
    }[kind]
    return outcome_of_exception(exc, attempt, MAX_ATTEMPTS)


class JobProtocol(RuleBasedStateMachine):
    """The model: every lease each claim issued, and every lease whose completion was accepted."""

    url = ""  # set by the test before the machine runs

    def __init__(self) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.conn: asyncpg.Connection = self.run(asyncpg.connect(self.url))
        self.run(self.conn.execute(EMPTY_AWA_TABLES))
        self.leases: dict[int, list[int]] = {}  # job id -> leases issued, in order
        self.claimed: dict[tuple[int, int], JobContext] = {}  # (job, lease) -> what its handler holds
        self.accepted: set[tuple[int, int]] = set()  # completions that changed the row
        self.before: dict[int, dict[str, Any]] = {}  # the rows after the previous step

    def run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.conn.close())
        self.loop.close()

    def rows(self) -> dict[int, dict[str, Any]]:
        found = self.run(
            self.conn.fetch(
                "SELECT id, state::text AS state, run_lease, attempt, heartbeat_at, deadline_at, attempted_at "
                "FROM awa.jobs"
            )
        )
        return {row["id"]: dict(row) for row in found}

    def running_under(self, job_id: int, lease: int) -> bool:
        row = self.before.get(job_id)
        return row is not None and row["state"] == "running" and row["run_lease"] == lease

    def pick_lease(self, data: st.DataObject) -> tuple[int, int]:
        """A job and a lease: mostly one a claim issued (current or stale), sometimes one never issued."""
        job_id = data.draw(st.sampled_from(sorted(self.leases)))
        issued = self.leases[job_id]
        never_issued = st.integers(0, len(issued) + 2)
        lease = data.draw(st.sampled_from(issued) | never_issued if issued else never_issued)
        return job_id, lease

    # -- steps -------------------------------------------------------------------------------

    @initialize()
    def start(self) -> None:
        self.before = self.rows()

    @rule(count=st.integers(1, 3), scheduled=st.booleans())
    def enqueue(self, count: int, scheduled: bool) -> None:
        run_at = datetime.now(UTC) + timedelta(hours=1) if scheduled else None
        for n in range(count):
            job = self.run(
                awa_bridge.insert_job(self.conn, {"n": n}, kind="modelled", max_attempts=MAX_ATTEMPTS, run_at=run_at)
            )
            self.leases[job.id] = []

    @rule(limit=st.integers(1, 3))
    def claim(self, limit: int) -> None:
        q = QUERIES["claim_jobs"]
        params = {"queue": "default", "limit": limit, "deadline_seconds": 300, **CLAIMER}
        for row in self.run(self.conn.fetch(q.numeric, *q.positional(params))):
            job_id, lease = row["id"], row["run_lease"]
            assert self.before[job_id]["state"] == "available", f"claimed job {job_id} was {self.before[job_id]}"
            issued = self.leases[job_id]
            assert lease > max(issued, default=0), f"job {job_id}: lease {lease} after {issued}"
            issued.append(lease)
            self.claimed[job_id, lease] = context(row)  # what its handler holds

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def heartbeat(self, data: st.DataObject) -> None:
        job_id, lease = self.pick_lease(data)
        q = QUERIES["heartbeat_jobs"]
        beat = bool(self.run(self.conn.fetch(q.numeric, *q.positional({"ids": [job_id], "leases": [lease]}))))
        assert beat == self.running_under(job_id, lease), (job_id, lease, self.before[job_id])

    @precondition(lambda self: self.claimed)
    @rule(data=st.data(), kind=st.sampled_from(OUTCOMES))
    def complete(self, data: st.DataObject, kind: str) -> None:
        job_id, lease = data.draw(st.sampled_from(sorted(self.claimed)))
        ctx = self.claimed[job_id, lease]
        accepted = self.run(finalize_one(self.conn, ctx, _outcome(kind, ctx.attempt)))
        assert accepted == self.running_under(job_id, lease), (job_id, lease, kind, self.before[job_id])
        if accepted:
            assert (job_id, lease) not in self.accepted, f"lease {lease} of job {job_id} completed twice"
            self.accepted.add((job_id, lease))

    @precondition(lambda self: any(r["state"] == "running" for r in self.before.values()))
    @rule(data=st.data(), deadline=st.booleans())
    def lose_a_worker(self, data: st.DataObject, deadline: bool) -> None:
        """A worker stops beating (or overruns its deadline); the rescue takes the job back."""
        running = sorted(i for i, r in self.before.items() if r["state"] == "running")
        job_id = data.draw(st.sampled_from(running))
        column = "deadline_at" if deadline else "heartbeat_at"
        self.run(self.conn.execute(f"UPDATE awa.jobs SET {column} = now() - interval '1 hour' WHERE id = $1", job_id))
        if deadline:
            rescued = self.run(rescue_expired_deadlines(self.conn))
        else:
            rescued = self.run(rescue_stale_heartbeats(self.conn, staleness=90))
        assert [r["id"] for r in rescued] == [job_id]

    @rule()
    def time_passes(self) -> None:
        """Every scheduled and retryable job falls due, and the promotion moves them on."""
        self.run(
            self.conn.execute(
                "UPDATE awa.jobs SET run_at = now() - interval '1 second' WHERE state IN ('scheduled', 'retryable')"
            )
        )
        due = sum(r["state"] in ("scheduled", "retryable") for r in self.before.values())
        assert self.run(promote_due(self.conn)) == due

    @precondition(lambda self: self.leases)
    @rule(data=st.data())
    def operator_cancels(self, data: st.DataObject) -> None:
        job_id = data.draw(st.sampled_from(sorted(self.leases)))
        if self.before[job_id]["state"] in FINISHED:
            with pytest.raises(InvalidState):
                self.run(admin.cancel_job_async(self.conn, job_id, operator="model"))
        else:
            job = self.run(admin.cancel_job_async(self.conn, job_id, operator="model"))
            assert job.state == "cancelled"

    # -- invariants, after every step ------------------------------------------------------

    @invariant()
    def protocol_holds(self) -> None:
        now = self.rows()
        for job_id, row in now.items():
            issued = self.leases.get(job_id, [])
            if row["state"] == "running":
                # RunningOwned: owned by the last lease a claim issued, with its heartbeat and deadline.
                assert issued and row["run_lease"] == issued[-1], (job_id, row, issued)
                assert row["heartbeat_at"] is not None and row["deadline_at"] is not None, (job_id, row)
            else:
                # NonRunningUnowned: no heartbeat or deadline that a rescue or a beat could act on.
                assert row["heartbeat_at"] is None and row["deadline_at"] is None, (job_id, row)
            # TaskLeaseBounded: the row's lease is one a claim issued (0 before the first claim).
            assert row["run_lease"] == (issued[-1] if issued else 0), (job_id, row, issued)
            assert row["attempt"] <= MAX_ATTEMPTS, (job_id, row)
            old = self.before.get(job_id)
            if old is None:
                continue
            if old["state"] == "running" and row["state"] == "running":
                # No running -> running under a new lease without a state in between.
                assert old["run_lease"] == row["run_lease"], (job_id, old, row)
            if old["state"] in FINISHED:
                assert row["state"] == old["state"], f"finished job {job_id} moved: {old} -> {row}"
        assert set(now) == set(self.leases), "a job appeared or vanished"
        self.before = now


def test_r32_the_job_protocol_as_a_state_machine(db_url: str) -> None:
    JobProtocol.url = db_url
    run_state_machine_as_test(
        JobProtocol,
        settings=settings(
            max_examples=60,
            stateful_step_count=40,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )
