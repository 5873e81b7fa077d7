"""awa_sqlalchemy: the awa job queue in SQLAlchemy applications.

- Mapped classes ``Job``, ``QueueMeta`` and ``CronJob`` over ``awa.jobs``,
  ``awa.queue_meta`` and ``awa.cron_jobs``, on their own metadata
  (``AwaBase.metadata``) so the application's ``create_all()`` and Alembic
  autogenerate leave the awa schema alone. Read with them; change state
  through ``awa_bridge`` operations.
- ``insert_job`` / ``insert_job_sync`` / ``insert_many`` / ``insert_many_sync``:
  enqueue on a ``Session``, ``Connection``, ``AsyncSession`` or
  ``AsyncConnection`` inside the caller's transaction, by delegating to
  ``awa_bridge`` (no queue logic lives here).
- ``awa_sqlalchemy.alembic``: apply the shared SQL migrations from an Alembic
  revision and keep ``awa`` out of autogenerate (imported on its own, so
  Alembic is needed only by projects that use it).
- ``awa_sqlalchemy.admin``: the operator actions (retry, cancel, run now,
  delete, queue stats, pause/resume) on a session, inside its transaction.

``JobState`` is re-exported from ``awa_bridge`` for ``Job.state`` comparisons.
"""

from awa_bridge import InsertManyResult, JobState, UniqueConflict

from .models import AWA_SCHEMA, AwaBase, CronJob, Job, QueueMeta, job_state_type
from .session import insert_job, insert_job_sync, insert_many, insert_many_sync

__all__ = [
    "AWA_SCHEMA",
    "AwaBase",
    "CronJob",
    "InsertManyResult",
    "Job",
    "JobState",
    "QueueMeta",
    "UniqueConflict",
    "insert_job",
    "insert_job_sync",
    "insert_many",
    "insert_many_sync",
    "job_state_type",
]
