# Applies v001_schema.sql from migrations/ and declares the unmanaged models over its tables.
from django.db import migrations, models

import awa_django.models
from awa_django.migrations._shared import apply_sql


class Migration(migrations.Migration):
    initial = True

    dependencies = []

    operations = [
        apply_sql("v001_schema.sql", first=True),
        migrations.CreateModel(
            name="CronJob",
            fields=[
                ("name", models.TextField(primary_key=True, serialize=False)),
                ("cron_expr", models.TextField()),
                ("timezone", models.TextField()),
                ("kind", models.TextField()),
                ("queue", models.TextField()),
                ("args", models.JSONField(default=dict)),
                ("priority", models.SmallIntegerField()),
                ("max_attempts", models.SmallIntegerField()),
                ("tags", awa_django.models.TextArrayField(default=list)),
                ("metadata", models.JSONField(default=dict)),
                ("missed_fire_policy", models.TextField()),
                ("last_enqueued_at", models.DateTimeField(null=True)),
                ("created_at", models.DateTimeField()),
                ("updated_at", models.DateTimeField()),
                ("paused_at", models.DateTimeField(null=True)),
                ("paused_by", models.TextField(null=True)),
            ],
            options={
                "verbose_name": "cron schedule",
                "db_table": 'awa"."cron_jobs',
                "ordering": ["name"],
                "permissions": [
                    ("pause_cronjob", "Can pause and resume cron schedules"),
                    ("trigger_cronjob", "Can trigger cron schedules"),
                ],
                "managed": False,
                "default_permissions": ("view",),
            },
        ),
        migrations.CreateModel(
            name="Job",
            fields=[
                ("id", models.BigAutoField(primary_key=True, serialize=False)),
                ("kind", models.TextField()),
                ("queue", models.TextField()),
                ("args", models.JSONField(default=dict)),
                (
                    "state",
                    models.TextField(
                        choices=[
                            ("scheduled", "scheduled"),
                            ("available", "available"),
                            ("running", "running"),
                            ("completed", "completed"),
                            ("retryable", "retryable"),
                            ("failed", "failed"),
                            ("cancelled", "cancelled"),
                            ("waiting_external", "waiting external"),
                        ]
                    ),
                ),
                ("priority", models.SmallIntegerField()),
                ("attempt", models.SmallIntegerField()),
                ("max_attempts", models.SmallIntegerField()),
                ("run_at", models.DateTimeField()),
                ("heartbeat_at", models.DateTimeField(null=True)),
                ("deadline_at", models.DateTimeField(null=True)),
                ("attempted_at", models.DateTimeField(null=True)),
                ("finalized_at", models.DateTimeField(null=True)),
                ("created_at", models.DateTimeField()),
                ("errors", awa_django.models.JSONArrayField(default=list)),
                ("metadata", models.JSONField(default=dict)),
                ("tags", awa_django.models.TextArrayField(default=list)),
                ("unique_key", models.BinaryField(null=True)),
                ("unique_states", models.TextField(null=True)),
                ("callback_id", models.UUIDField(null=True)),
                ("callback_timeout_at", models.DateTimeField(null=True)),
                ("callback_filter", models.TextField(null=True)),
                ("callback_on_complete", models.TextField(null=True)),
                ("callback_on_fail", models.TextField(null=True)),
                ("callback_transform", models.TextField(null=True)),
                ("run_lease", models.BigIntegerField()),
                ("progress", models.JSONField(null=True)),
            ],
            options={
                "db_table": 'awa"."jobs',
                "ordering": ["-id"],
                "permissions": [
                    ("retry_job", "Can retry jobs"),
                    ("cancel_job", "Can cancel jobs"),
                    ("run_job_now", "Can run scheduled jobs now"),
                ],
                "managed": False,
                "default_permissions": ("view", "delete"),
            },
        ),
        migrations.CreateModel(
            name="QueueMeta",
            fields=[
                ("queue", models.TextField(primary_key=True, serialize=False)),
                ("paused", models.BooleanField(default=False)),
                ("paused_at", models.DateTimeField(null=True)),
                ("paused_by", models.TextField(null=True)),
            ],
            options={
                "verbose_name": "queue",
                "db_table": 'awa"."queue_meta',
                "permissions": [("pause_queue", "Can pause and resume queues")],
                "managed": False,
                "default_permissions": ("view",),
            },
        ),
    ]
