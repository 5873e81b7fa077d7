"""The workers page: every worker process from ``awa.runtime_instances``.

Host, pid, version, each queue with its slot use, started at, last heartbeat,
jobs held and whether it is the maintenance leader. The workers keep their
rows fresh and the leader prunes dead ones; until it does, a row whose
heartbeat is older than the staleness window (``AWA['WORKER']``) is shown as
*gone*, never as a live worker.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin
from django.db import connections
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe

from awa_bridge.dashboard import has_relation

from .admin import ReadOnlyModelAdmin
from .admin_overview import staleness
from .display import humanize_seconds, show_time
from .models import WorkerInstance


@admin.register(WorkerInstance)
class WorkerAdmin(ReadOnlyModelAdmin):
    list_display = (
        "status",
        "hostname",
        "pid",
        "version",
        "queue_slots",
        "jobs_held",
        "leader",
        "started",
        "last_heartbeat",
    )
    list_display_links = None
    actions = None
    list_per_page = 200
    change_list_template = "admin/awa_django/workerinstance/change_list.html"

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> Any:
        queryset = super().get_queryset(request)
        if not has_relation(connections[self.model.objects.db], "awa.runtime_instances"):
            return queryset.none()  # no registry (a database the real Awa migrated): nothing to show
        return queryset

    def is_live(self, row: WorkerInstance) -> bool:
        return bool(row.heartbeat_at > timezone.now() - timedelta(seconds=staleness()))

    @admin.display(description="status")
    def status(self, row: WorkerInstance) -> str:
        if self.is_live(row):
            return mark_safe('<span class="awa-live" data-awa-worker="live">live</span>')
        return mark_safe('<span class="awa-gone" data-awa-worker="gone">gone</span>')

    @admin.display(description="queues (busy / slots)")
    def queue_slots(self, row: WorkerInstance) -> str:
        queues = row.queues if isinstance(row.queues, list) else []
        return (
            format_html_join(
                ", ",
                "{} {}/{}",
                ((q.get("name", "?"), q.get("running", 0), q.get("max_workers", "?")) for q in queues),
            )
            or "-"
        )

    @admin.display(description="leader", boolean=True)
    def leader(self, row: WorkerInstance) -> bool:
        return bool(row.is_leader) and self.is_live(row)

    @admin.display(description="started", ordering="started_at")
    def started(self, row: WorkerInstance) -> str:
        return show_time(row.started_at)

    @admin.display(description="last heartbeat", ordering="heartbeat_at")
    def last_heartbeat(self, row: WorkerInstance) -> str:
        ago = humanize_seconds(max((timezone.now() - row.heartbeat_at).total_seconds(), 0.0))
        return format_html("{} ago", ago)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        context = {"awa_staleness": humanize_seconds(staleness()), **(extra_context or {})}
        return super().changelist_view(request, context)
