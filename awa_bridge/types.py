"""Plain data types shared by the bridge, the worker and the integrations."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Any


class JobState(enum.StrEnum):
    """Mirror of the ``awa.job_state`` enum, in the database's order."""

    scheduled = "scheduled"
    available = "available"
    running = "running"
    completed = "completed"
    retryable = "retryable"
    failed = "failed"
    cancelled = "cancelled"
    waiting_external = "waiting_external"


#: Enum order as PostgreSQL defines it: bit i of ``unique_states`` is state i.
STATE_ORDER: tuple[JobState, ...] = tuple(JobState)

#: States in which a unique key is enforced unless the caller says otherwise.
DEFAULT_UNIQUE_STATES: frozenset[JobState] = frozenset(
    {JobState.scheduled, JobState.available, JobState.running, JobState.completed, JobState.retryable}
)


@dataclass(frozen=True)
class Job:
    """One row of ``awa.jobs`` as every driver returns it (JSON decoded)."""

    id: int
    kind: str
    queue: str
    args: Any
    state: JobState
    priority: int
    attempt: int
    max_attempts: int
    run_at: datetime
    heartbeat_at: datetime | None
    deadline_at: datetime | None
    attempted_at: datetime | None
    finalized_at: datetime | None
    created_at: datetime
    errors: list[Any]
    metadata: dict[str, Any]
    tags: list[str]
    unique_key: bytes | None
    unique_states: str | None
    callback_id: str | None
    callback_timeout_at: datetime | None
    callback_filter: str | None
    callback_on_complete: str | None
    callback_on_fail: str | None
    callback_transform: str | None
    run_lease: int
    progress: Any


@dataclass(frozen=True)
class InsertManyResult:
    """What a bulk insert did: rows written and unique duplicates it skipped."""

    inserted: int
    skipped_duplicates: int
