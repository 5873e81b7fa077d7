"""Celery's task state names, and how awa job states map onto them.

=================  =====================================================
awa job state      Celery state
=================  =====================================================
(no such job)      PENDING (as Celery reports unknown or expired ids)
scheduled,         PENDING before the first attempt, RETRY after one
available
running,           STARTED (awa always knows; Celery needs
waiting_external   ``task_track_started``)
retryable          RETRY
completed          SUCCESS
failed             FAILURE
cancelled          REVOKED (revoked, or expired before it ran)
=================  =====================================================
"""

from __future__ import annotations

PENDING = "PENDING"
RECEIVED = "RECEIVED"
STARTED = "STARTED"
SUCCESS = "SUCCESS"
FAILURE = "FAILURE"
REVOKED = "REVOKED"
RETRY = "RETRY"

READY_STATES = frozenset({SUCCESS, FAILURE, REVOKED})
UNREADY_STATES = frozenset({PENDING, RECEIVED, STARTED, RETRY})
EXCEPTION_STATES = frozenset({RETRY, FAILURE, REVOKED})
PROPAGATE_STATES = frozenset({FAILURE, REVOKED})
ALL_STATES = frozenset({PENDING, RECEIVED, STARTED, SUCCESS, FAILURE, RETRY, REVOKED})


def from_job(state: str | None, attempt: int = 0) -> str:
    """The Celery state of a job in awa ``state`` (None: no such job) after ``attempt`` attempts."""
    if state is None:
        return PENDING
    if state in ("scheduled", "available"):
        return RETRY if attempt > 0 else PENDING
    if state in ("running", "waiting_external"):
        return STARTED
    if state == "retryable":
        return RETRY
    if state == "completed":
        return SUCCESS
    if state == "failed":
        return FAILURE
    if state == "cancelled":
        return REVOKED
    raise ValueError(f"unknown job state {state!r}")
