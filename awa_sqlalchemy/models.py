"""Mapped classes over the awa schema, for querying and reporting.

``Job``, ``QueueMeta`` and ``CronJob`` map ``awa.jobs``, ``awa.queue_meta``
and ``awa.cron_jobs`` in SQLAlchemy 2.x typed declarative style, so an
application reads jobs with the session it already has::

    from sqlalchemy import select
    from awa_bridge import JobState
    from awa_sqlalchemy import Job

    failed = session.scalars(select(Job).where(Job.state == JobState.failed)).all()

Why a separate ``AwaBase``: the tables belong to the shared SQL migrations
(``migrations/*.sql``), not to the application. They live on their own
``MetaData(schema="awa")``, so the application's ``Base.metadata.create_all()``
and ``drop_all()`` never see them, and Alembic autogenerate against the
application's metadata never proposes them (``awa_sqlalchemy.alembic`` also
filters the schema out, for applications that reflect the whole database).
Never call ``AwaBase.metadata.create_all()``: use ``awa_bridge.migrate(url)``
or ``awa_sqlalchemy.alembic.upgrade_awa(op)``.

Read-mostly: insert jobs with ``awa_sqlalchemy.insert_job`` (it computes
unique keys, validates and notifies workers), and change job or queue state
through ``awa_bridge`` operations (the worker's guarded writes, the
admin/queue functions such as ``awa_bridge.admin.pause_queue``). An ORM
``UPDATE`` of ``state`` bypasses the ``run_lease`` fencing the worker relies on.

Two attribute names differ from their columns because SQLAlchemy reserves
``metadata`` on declarative classes: ``Job.metadata_`` and
``CronJob.metadata_`` map the ``metadata`` column.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import BigInteger, Boolean, DateTime, Identity, LargeBinary, MetaData, SmallInteger, Text, text
from sqlalchemy.dialects.postgresql import ARRAY, BIT, ENUM, JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from awa_bridge import JobState

__all__ = ["AWA_SCHEMA", "AwaBase", "CronJob", "Job", "QueueMeta", "job_state_type"]

#: The PostgreSQL schema every awa table lives in.
AWA_SCHEMA = "awa"

#: ``awa.job_state`` mapped to ``awa_bridge.JobState``, by value (the database's labels).
#: ``create_type=False``: the enum is created by the SQL migrations, never by SQLAlchemy.
job_state_type = ENUM(
    JobState,
    name="job_state",
    schema=AWA_SCHEMA,
    create_type=False,
    values_callable=lambda states: [state.value for state in states],
    validate_strings=True,
)

_TIMESTAMPTZ = DateTime(timezone=True)


class AwaBase(DeclarativeBase):
    """Declarative base of the awa tables only; its metadata is not the application's."""

    metadata = MetaData(schema=AWA_SCHEMA)


class Job(AwaBase):
    """One row of ``awa.jobs``: a job in any state (columns as in docs/design.md, the schema contract).

    ``args``, ``metadata_`` and ``progress`` are decoded JSON; ``errors`` is
    the list of recorded failures (one dict per failed attempt: ``error``,
    ``type``, ``traceback``, ``attempt``, ``at``).
    """

    __tablename__ = "jobs"

    id: Mapped[int] = mapped_column(BigInteger, Identity(always=False), primary_key=True)
    kind: Mapped[str] = mapped_column(Text)
    queue: Mapped[str] = mapped_column(Text, server_default=text("'default'"))
    args: Mapped[Any] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    state: Mapped[JobState] = mapped_column(job_state_type, server_default=text("'available'::awa.job_state"))
    priority: Mapped[int] = mapped_column(SmallInteger, server_default=text("2"))
    attempt: Mapped[int] = mapped_column(SmallInteger, server_default=text("0"))
    max_attempts: Mapped[int] = mapped_column(SmallInteger, server_default=text("25"))
    run_at: Mapped[datetime] = mapped_column(_TIMESTAMPTZ, server_default=text("now()"))
    heartbeat_at: Mapped[datetime | None] = mapped_column(_TIMESTAMPTZ)
    deadline_at: Mapped[datetime | None] = mapped_column(_TIMESTAMPTZ)
    attempted_at: Mapped[datetime | None] = mapped_column(_TIMESTAMPTZ)
    finalized_at: Mapped[datetime | None] = mapped_column(_TIMESTAMPTZ)
    created_at: Mapped[datetime] = mapped_column(_TIMESTAMPTZ, server_default=text("now()"))
    errors: Mapped[list[Any]] = mapped_column(ARRAY(JSONB), server_default=text("'{}'::jsonb[]"))
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB, server_default=text("'{}'::jsonb"))
    tags: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'::text[]"))
    unique_key: Mapped[bytes | None] = mapped_column(LargeBinary)
    unique_states: Mapped[str | None] = mapped_column(BIT(8))
    callback_id: Mapped[uuid.UUID | None] = mapped_column(UUID(as_uuid=True))
    callback_timeout_at: Mapped[datetime | None] = mapped_column(_TIMESTAMPTZ)
    callback_filter: Mapped[str | None] = mapped_column(Text)
    callback_on_complete: Mapped[str | None] = mapped_column(Text)
    callback_on_fail: Mapped[str | None] = mapped_column(Text)
    callback_transform: Mapped[str | None] = mapped_column(Text)
    run_lease: Mapped[int] = mapped_column(BigInteger, server_default=text("0"))
    progress: Mapped[Any | None] = mapped_column(JSONB)

    def __repr__(self) -> str:
        return f"<Job id={self.id} kind={self.kind!r} queue={self.queue!r} state={self.state}>"


class QueueMeta(AwaBase):
    """One row of ``awa.queue_meta``: a queue's pause state (absent row: not paused).

    Pause and resume with ``awa_bridge.admin.pause_queue`` / ``resume_queue``.
    """

    __tablename__ = "queue_meta"

    queue: Mapped[str] = mapped_column(Text, primary_key=True)
    paused: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    paused_at: Mapped[datetime | None] = mapped_column(_TIMESTAMPTZ)
    paused_by: Mapped[str | None] = mapped_column(Text)

    def __repr__(self) -> str:
        return f"<QueueMeta queue={self.queue!r} paused={self.paused}>"


class CronJob(AwaBase):
    """One row of ``awa.cron_jobs``: a periodic schedule, upserted by the worker from code or settings."""

    __tablename__ = "cron_jobs"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    cron_expr: Mapped[str] = mapped_column(Text)
    timezone: Mapped[str] = mapped_column(Text, server_default=text("'UTC'"))
    kind: Mapped[str] = mapped_column(Text)
    queue: Mapped[str] = mapped_column(Text, server_default=text("'default'"))
    args: Mapped[Any] = mapped_column(JSONB, server_default=text("'{}'::jsonb"))
    priority: Mapped[int] = mapped_column(SmallInteger, server_default=text("2"))
    max_attempts: Mapped[int] = mapped_column(SmallInteger, server_default=text("25"))
    tags: Mapped[list[str]] = mapped_column(ARRAY(Text), server_default=text("'{}'::text[]"))
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB, server_default=text("'{}'::jsonb"))
    missed_fire_policy: Mapped[str] = mapped_column(Text, server_default=text("'coalesce'"))
    last_enqueued_at: Mapped[datetime | None] = mapped_column(_TIMESTAMPTZ)
    created_at: Mapped[datetime] = mapped_column(_TIMESTAMPTZ, server_default=text("now()"))
    updated_at: Mapped[datetime] = mapped_column(_TIMESTAMPTZ, server_default=text("now()"))
    paused_at: Mapped[datetime | None] = mapped_column(_TIMESTAMPTZ)
    paused_by: Mapped[str | None] = mapped_column(Text)

    def __repr__(self) -> str:
        return f"<CronJob name={self.name!r} cron_expr={self.cron_expr!r} kind={self.kind!r}>"
