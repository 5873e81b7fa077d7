"""Operator actions on a SQLAlchemy ``Session`` / ``Connection`` (or their async forms).

These are ``awa_bridge.admin``'s operations, which already run on any
connection the bridge supports: on a session they take part in its
transaction, so an action and the application's own bookkeeping (an audit
row, say) commit or roll back together. Nothing here re-implements them;
this module only gathers them where a SQLAlchemy application looks.

    with Session(engine) as session, session.begin():
        admin.cancel_job(session, job_id)
        session.add(AuditEntry(action="cancel", job_id=job_id))
"""

from awa_bridge.admin import (
    QueueStats,
    cancel_by_unique_key,
    cancel_by_unique_key_async,
    cancel_job,
    cancel_job_async,
    delete_job,
    delete_job_async,
    pause_queue,
    queue_stats,
    queue_stats_async,
    resume_queue,
    retry_failed,
    retry_failed_async,
    retry_job,
    retry_job_async,
    run_now,
    run_now_async,
)

__all__ = [
    "QueueStats",
    "cancel_by_unique_key",
    "cancel_by_unique_key_async",
    "cancel_job",
    "cancel_job_async",
    "delete_job",
    "delete_job_async",
    "pause_queue",
    "queue_stats",
    "queue_stats_async",
    "resume_queue",
    "retry_failed",
    "retry_failed_async",
    "retry_job",
    "retry_job_async",
    "run_now",
    "run_now_async",
]
