"""Read-only, unmanaged models over ``awa.jobs``, ``awa.queue_meta``, ``awa.cron_jobs`` and ``awa.runtime_instances``.

For queries, reports and the admin: ``Job.objects.filter(state="failed")``.
The tables belong to the shared SQL migrations (Django never creates or
alters them: ``managed = False``) and to the queue: ``save()`` and
``delete()`` raise ``ReadOnlyModel``. Change jobs, queues and schedules
through ``awa_bridge.admin`` / ``awa_bridge.cron`` (or the admin actions and
management commands, which call them): those run the guarded statements the
worker's ``run_lease`` fencing relies on.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from django.db import models

from awa_bridge import JobState

from .errors import ReadOnlyModel

if TYPE_CHECKING:
    # django-stubs makes Field generic (set type, get type); at run time it is not subscriptable.
    _FieldBase = models.Field[Any, Any]
else:
    _FieldBase = models.Field

STATE_CHOICES = [(state.value, state.value.replace("_", " ")) for state in JobState]
#: States a job is finished in (the rest are live).
FINISHED_STATES = ("completed", "failed", "cancelled")


class TextArrayField(_FieldBase):
    """A ``text[]`` column read as a list of str (no ``django.contrib.postgres`` needed)."""

    description = "PostgreSQL text[]"

    def db_type(self, connection: Any) -> str:
        return "text[]"

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> list[str]:
        return [] if value is None else list(value)


class JSONArrayField(_FieldBase):
    """A ``jsonb[]`` column (``awa.jobs.errors``) read as a list of decoded JSON values."""

    description = "PostgreSQL jsonb[]"

    def db_type(self, connection: Any) -> str:
        return "jsonb[]"

    def from_db_value(self, value: Any, expression: Any, connection: Any) -> list[Any]:
        if value is None:
            return []
        return [json.loads(item) if isinstance(item, (str, bytes)) else item for item in value]


class ReadOnlyQuerySet(models.QuerySet[Any]):
    def update(self, **kwargs: Any) -> int:
        raise ReadOnlyModel(f"{self.model.__name__} rows are changed through awa_bridge operations, not update()")

    def delete(self) -> tuple[int, dict[str, int]]:
        raise ReadOnlyModel(f"{self.model.__name__} rows are deleted through awa_bridge operations, not delete()")

    def bulk_create(self, *args: Any, **kwargs: Any) -> Any:
        raise ReadOnlyModel(f"insert jobs with awa_django.insert_job, not {self.model.__name__}.objects.bulk_create()")


class ReadOnlyModelBase(models.Model):
    objects = ReadOnlyQuerySet.as_manager()

    class Meta:
        abstract = True

    def save(self, *args: Any, **kwargs: Any) -> None:
        raise ReadOnlyModel(
            f"{type(self).__name__} is read-only: enqueue with awa_django.insert_job and change state "
            "with awa_bridge.admin / awa_bridge.cron"
        )

    def delete(self, *args: Any, **kwargs: Any) -> Any:
        raise ReadOnlyModel(f"{type(self).__name__} is read-only: delete jobs with awa_bridge.admin.delete_job")


class Job(ReadOnlyModelBase):
    """A job in any state (the columns of docs/design.md, the schema contract)."""

    id = models.BigAutoField(primary_key=True)
    kind = models.TextField()
    queue = models.TextField()
    args = models.JSONField(default=dict)
    state = models.TextField(choices=STATE_CHOICES)
    priority = models.SmallIntegerField()
    attempt = models.SmallIntegerField()
    max_attempts = models.SmallIntegerField()
    run_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField(null=True)
    deadline_at = models.DateTimeField(null=True)
    attempted_at = models.DateTimeField(null=True)
    finalized_at = models.DateTimeField(null=True)
    created_at = models.DateTimeField()
    errors = JSONArrayField(default=list)
    metadata = models.JSONField(default=dict)
    tags = TextArrayField(default=list)
    unique_key = models.BinaryField(null=True)
    unique_states = models.TextField(null=True)
    callback_id = models.UUIDField(null=True)
    callback_timeout_at = models.DateTimeField(null=True)
    callback_filter = models.TextField(null=True)
    callback_on_complete = models.TextField(null=True)
    callback_on_fail = models.TextField(null=True)
    callback_transform = models.TextField(null=True)
    run_lease = models.BigIntegerField()
    progress = models.JSONField(null=True)

    class Meta:
        managed = False
        db_table = 'awa"."jobs'
        ordering = ["-id"]
        default_permissions = ("view", "delete")
        permissions = [
            ("retry_job", "Can retry jobs"),
            ("cancel_job", "Can cancel jobs"),
            ("run_job_now", "Can run scheduled jobs now"),
        ]

    def __str__(self) -> str:
        kind = self.kind if len(self.kind) <= 60 else self.kind[:59] + "…"
        return f"job {self.id} ({kind})"

    @property
    def is_finished(self) -> bool:
        return self.state in FINISHED_STATES


class QueueMeta(ReadOnlyModelBase):
    """A queue's pause flag (rows exist for queues that were ever paused or resumed)."""

    queue = models.TextField(primary_key=True)
    paused = models.BooleanField(default=False)
    paused_at = models.DateTimeField(null=True)
    paused_by = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = 'awa"."queue_meta'
        verbose_name = "queue"
        default_permissions = ("view",)
        permissions = [("pause_queue", "Can pause and resume queues")]

    def __str__(self) -> str:
        return self.queue


class CronJob(ReadOnlyModelBase):
    """A periodic schedule."""

    name = models.TextField(primary_key=True)
    cron_expr = models.TextField()
    timezone = models.TextField()
    kind = models.TextField()
    queue = models.TextField()
    args = models.JSONField(default=dict)
    priority = models.SmallIntegerField()
    max_attempts = models.SmallIntegerField()
    tags = TextArrayField(default=list)
    metadata = models.JSONField(default=dict)
    missed_fire_policy = models.TextField()
    last_enqueued_at = models.DateTimeField(null=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    paused_at = models.DateTimeField(null=True)
    paused_by = models.TextField(null=True)

    class Meta:
        managed = False
        db_table = 'awa"."cron_jobs'
        ordering = ["name"]
        verbose_name = "cron schedule"
        default_permissions = ("view",)
        permissions = [
            ("pause_cronjob", "Can pause and resume cron schedules"),
            ("trigger_cronjob", "Can trigger cron schedules"),
            ("edit_cronjob", "Can create, edit and delete database-only cron schedules"),
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def paused(self) -> bool:
        return self.paused_at is not None


class WorkerInstance(ReadOnlyModelBase):
    """A worker process, as it reports itself in ``awa.runtime_instances`` (the admin's workers page).

    Rows older than the heartbeat staleness window belong to processes that
    died without saying so; the page shows them as gone until the leader
    prunes them.
    """

    instance_id = models.UUIDField(primary_key=True)
    hostname = models.TextField()
    pid = models.IntegerField()
    version = models.TextField()
    queues = models.JSONField(default=list)
    jobs_held = models.IntegerField()
    is_leader = models.BooleanField()
    started_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()

    class Meta:
        managed = False
        db_table = 'awa"."runtime_instances'
        ordering = ["hostname", "pid"]
        verbose_name = "worker"
        default_permissions = ("view",)

    def __str__(self) -> str:
        return f"{self.hostname}:{self.pid}"
