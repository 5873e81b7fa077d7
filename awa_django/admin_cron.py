"""The cron schedules page: every schedule with where it comes from and when it fires next.

Schedules declared in ``AWA["PERIODIC"]`` or code are read-only here (a worker
rewrites them at start; one removed from the declarations is deleted at the
next worker start). Database-only schedules can be created, edited and
deleted by users with ``awa_django.edit_cronjob``, through
``awa_bridge.cron_edit``; every change is in Django's history (LogEntry).
Next fire times are shown in the schedule's own timezone and in the viewer's.
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin, messages
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.admin.utils import quote, unquote
from django.contrib.contenttypes.models import ContentType
from django.core.exceptions import PermissionDenied
from django.db import connections
from django.db.models import Value
from django.db.models.expressions import RawSQL
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from awa_bridge import AwaError, cron_edit
from awa_bridge import cron as cron_ops
from awa_bridge.dashboard import has_relation

from .admin import ReadOnlyModelAdmin, _pretty_json, _run_each
from .cron_forms import ScheduleForm, next_fire
from .display import show_time
from .models import CronJob

_SOURCE_SQL = (
    "SELECT COALESCE((SELECT s.source FROM awa.cron_job_sources AS s "
    'WHERE s.name = "awa"."cron_jobs"."name"), \'database\')'
)


def _has_perm(request: HttpRequest, perm: str) -> bool:
    return bool(getattr(request.user, "has_perm", lambda _: False)(perm))


def _log(request: HttpRequest, name: str, flag: int, message: str) -> None:
    LogEntry.objects.create(
        user_id=cast(int, request.user.pk),  # admin views run for a logged-in user
        content_type_id=ContentType.objects.get_for_model(CronJob, for_concrete_model=False).pk,
        object_id=name,
        object_repr=name[:200],
        action_flag=flag,
        change_message=message,
    )


@admin.register(CronJob)
class CronJobAdmin(ReadOnlyModelAdmin):
    list_display = (
        "name",
        "source_label",
        "cron_expr",
        "timezone",
        "kind",
        "queue",
        "next_fire_local",
        "next_fire_viewer",
        "last_enqueued",
        "paused_label",
    )
    readonly_fields = (
        "name",
        "source_label",
        "cron_expr",
        "timezone",
        "kind",
        "queue",
        "priority",
        "max_attempts",
        "missed_fire_policy",
        "next_fire_local",
        "next_fire_viewer",
        "last_enqueued",
        "paused_label",
        "paused_by",
        "created_at",
        "updated_at",
        "pretty_args",
        "pretty_metadata",
    )
    fields = readonly_fields
    actions = ("trigger_schedules", "pause_schedules", "resume_schedules")
    change_form_template = "admin/awa_django/cronjob/change_form.html"

    def get_queryset(self, request: HttpRequest) -> Any:
        queryset = super().get_queryset(request)
        if not has_relation(connections[self.model.objects.db], "awa.cron_job_sources"):
            return queryset.annotate(source=Value("database"))  # a database the real Awa migrated
        return queryset.annotate(source=RawSQL(_SOURCE_SQL, []))

    # -- permissions -----------------------------------------------------------------------

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return _has_perm(request, "awa_django.pause_cronjob")

    def has_trigger_permission(self, request: HttpRequest) -> bool:
        return _has_perm(request, "awa_django.trigger_cronjob")

    def has_edit_permission(self, request: HttpRequest) -> bool:
        return _has_perm(request, "awa_django.edit_cronjob")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return self.has_edit_permission(request)

    # -- columns ------------------------------------------------------------------------------

    @admin.display(description="source")
    def source_label(self, row: CronJob) -> str:
        return "settings / code" if getattr(row, "source", "database") == "declared" else "database"

    @admin.display(description="next fire (schedule's timezone)")
    def next_fire_local(self, row: CronJob) -> str:
        if row.paused_at is not None:
            return "paused"
        return show_time(next_fire(row), row.timezone)

    @admin.display(description="next fire (yours)")
    def next_fire_viewer(self, row: CronJob) -> str:
        if row.paused_at is not None:
            return "paused"
        return show_time(next_fire(row), browser=True)

    @admin.display(description="last enqueued", ordering="last_enqueued_at")
    def last_enqueued(self, row: CronJob) -> str:
        return show_time(row.last_enqueued_at)

    @admin.display(description="paused", boolean=True)
    def paused_label(self, row: CronJob) -> bool:
        return row.paused

    @admin.display(description="args")
    def pretty_args(self, row: CronJob) -> str:
        return _pretty_json(row.args)

    @admin.display(description="metadata")
    def pretty_metadata(self, row: CronJob) -> str:
        return _pretty_json(row.metadata)

    # -- actions ------------------------------------------------------------------------------

    @admin.action(description="Trigger selected schedules now", permissions=["trigger"])
    def trigger_schedules(self, request: HttpRequest, queryset: Any) -> None:
        names = list(queryset.values_list("name", flat=True))
        _run_each(request, self, names, cron_ops.trigger_schedule, "schedule(s) triggered: one job each enqueued")
        for name in names:
            _log(request, name, CHANGE, "triggered")

    @admin.action(description="Pause selected schedules", permissions=["pause"])
    def pause_schedules(self, request: HttpRequest, queryset: Any) -> None:
        by = f"admin:{request.user.get_username()}"
        names = list(queryset.values_list("name", flat=True))
        _run_each(request, self, names, lambda c, n: cron_ops.pause_schedule(c, n, paused_by=by), "schedule(s) paused")
        for name in names:
            _log(request, name, CHANGE, "paused")

    @admin.action(description="Resume selected schedules", permissions=["pause"])
    def resume_schedules(self, request: HttpRequest, queryset: Any) -> None:
        names = list(queryset.values_list("name", flat=True))
        _run_each(request, self, names, cron_ops.resume_schedule, "schedule(s) resumed")
        for name in names:
            _log(request, name, CHANGE, "resumed")

    # -- creating, editing and deleting database-only schedules ----------------------------------

    def get_urls(self) -> list[Any]:
        edit = self.admin_site.admin_view(self.edit_view)
        remove = self.admin_site.admin_view(self.remove_view)
        return [
            path("<path:object_id>/edit/", edit, name="awa_django_cronjob_edit"),
            path("<path:object_id>/remove/", remove, name="awa_django_cronjob_remove"),
            *super().get_urls(),
        ]

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None) -> Any:
        row = self.get_object(request, unquote(object_id))
        extra = dict(extra_context or {})
        extra["awa_editable"] = (
            row is not None and getattr(row, "source", "") != "declared" and self.has_edit_permission(request)
        )
        return super().change_view(request, object_id, form_url, extra)

    def _form_page(self, request: HttpRequest, form: ScheduleForm, title: str) -> HttpResponse:
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": title,
            "form": form,
            "editing": form.editing,
        }
        return TemplateResponse(request, "admin/awa_django/cronjob/schedule_form.html", context)

    def add_view(self, request: HttpRequest, form_url: str = "", extra_context: Any = None) -> HttpResponse:
        if not self.has_edit_permission(request):
            raise PermissionDenied
        form = ScheduleForm(request.POST or None)
        if request.method == "POST" and form.is_valid() and form.schedule is not None:
            try:
                cron_edit.create_schedule(connections[self.model.objects.db], form.schedule)
            except AwaError as exc:
                form.add_error("name", str(exc))
            else:
                _log(
                    request,
                    form.schedule.name,
                    ADDITION,
                    f"created: {form.schedule.cron_expr} {form.schedule.timezone}",
                )
                self.message_user(request, f"Schedule {form.schedule.name} created.", messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:awa_django_cronjob_changelist"))
        return self._form_page(request, form, "Add a database-only schedule")

    def _editable(self, request: HttpRequest, object_id: str) -> CronJob:
        if not self.has_edit_permission(request):
            raise PermissionDenied
        row = self.get_object(request, unquote(object_id))
        if not isinstance(row, CronJob):
            raise PermissionDenied
        return row

    def edit_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        row = self._editable(request, object_id)
        form = ScheduleForm(request.POST or None, editing=row)
        if request.method == "POST" and form.is_valid() and form.schedule is not None:
            try:
                cron_edit.update_schedule(connections[self.model.objects.db], form.schedule)
            except AwaError as exc:
                form.add_error(None, str(exc))
            else:
                _log(request, row.name, CHANGE, f"edited: {form.schedule.cron_expr} {form.schedule.timezone}")
                self.message_user(request, f"Schedule {row.name} updated.", messages.SUCCESS)
                return HttpResponseRedirect(reverse("admin:awa_django_cronjob_change", args=[quote(row.name)]))
        return self._form_page(request, form, f"Edit schedule {row.name}")

    def remove_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        row = self._editable(request, object_id)
        if request.method != "POST":
            raise PermissionDenied
        try:
            cron_edit.delete_schedule(connections[self.model.objects.db], row.name)
        except AwaError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return HttpResponseRedirect(reverse("admin:awa_django_cronjob_change", args=[quote(row.name)]))
        _log(request, row.name, DELETION, "deleted")
        self.message_user(request, f"Schedule {row.name} deleted.", messages.SUCCESS)
        return HttpResponseRedirect(reverse("admin:awa_django_cronjob_changelist"))
