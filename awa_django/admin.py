"""Admin pages for jobs, queues and cron schedules.

Read-only over the unmanaged models; every change (retry, cancel, run now,
delete, pause, resume, trigger) calls ``awa_bridge.admin`` / ``awa_bridge.cron``
and is guarded by a Django permission (``awa_django.retry_job``,
``cancel_job``, ``run_job_now``, ``delete_job``, ``pause_queue``,
``pause_cronjob``, ``trigger_cronjob``): a user without it sees neither the
action nor the button, and a forged request is refused.

Built for big tables: the job list never counts the whole table (the count is
PostgreSQL's estimate once it passes ``EstimatedCountPaginator.exact_below``),
the filter choices come from loose index scans (one probe per distinct kind
or queue), and every state filter is served by an index
(benchmarks/bench_django_admin.py measures it on a million finished jobs).
"""

from __future__ import annotations

import difflib
import functools
import json
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connections, transaction
from django.db.models import QuerySet, TextField
from django.db.models.functions import Cast, Left
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join

from awa_bridge import AwaError, ForeignSchema, foreign
from awa_bridge import admin as ops
from awa_bridge.cli_support import user_frames  # the order of frames `manage.py awa_jobs show` prints too
from awa_bridge.drivers import detect_sync
from awa_bridge.drivers.django import planner_rows
from awa_bridge.sql import QUERIES

from .admin_actions import log_action, operator_of, plain_filter, run_set_action
from .admin_overview import overview_rows
from .admin_paging import keyset_page, pager, take_keyset
from .display import humanize_seconds, show_time, show_when, truncated
from .models import STATE_CHOICES, Job, QueueMeta
from .timeline import job_attempts, job_timeline, operator_actions

#: Characters of a job's args shown in the job list (cut in SQL, see JobAdmin.get_queryset).
ARGS_PREVIEW_CHARS = 80
# Every column the list shows (started, finished and duration read attempted_at / finalized_at):
# a deferred one would cost a query per row.
_LIST_COLUMNS = (
    "id",
    "kind",
    "queue",
    "state",
    "priority",
    "attempt",
    "max_attempts",
    "run_at",
    "attempted_at",
    "finalized_at",
    "created_at",
)

FILTER_CHOICES_LIMIT = 500

if TYPE_CHECKING:
    from django.contrib.admin.models import LogEntry

    # django-stubs makes these generic; at run time they are not subscriptable.
    _PaginatorBase = Paginator[Any]
    _ModelAdminBase = admin.ModelAdmin[Any]
else:
    _PaginatorBase = Paginator
    _ModelAdminBase = admin.ModelAdmin


class EstimatedCountPaginator(_PaginatorBase):
    """Counts exactly only when PostgreSQL estimates fewer than ``exact_below`` rows.

    Above that the planner's estimate (``EXPLAIN``: table statistics, or the
    row estimate of the filtered plan) stands in for ``COUNT(*)``, which on a
    table of millions of finished jobs would read them all on every page.
    """

    exact_below = 10_000

    @cached_property
    def count(self) -> int:
        queryset = cast("QuerySet[Any]", self.object_list)  # the admin paginates querysets
        estimate = _planner_estimate(queryset)
        self.estimated = estimate is not None and estimate >= self.exact_below
        if estimate is not None and self.estimated:
            return int(estimate)
        return queryset.count()


def _planner_estimate(queryset: Any) -> int | None:
    try:
        sql, params = queryset.order_by().query.sql_with_params()
    except Exception:  # an empty result set (EmptyResultSet) and the like
        return None
    return planner_rows(connections[queryset.db], sql, params)


def _names(query: str, alias: str) -> list[str]:
    rows = detect_sync(connections[alias]).fetch_all(QUERIES[query], {"limit": FILTER_CHOICES_LIMIT})
    return [next(iter(row.values())) for row in rows]


def matching_kinds(term: str, alias: str) -> list[str]:
    """The known kinds containing ``term`` (prefix or substring, any case), exact match included.

    The kinds come from a loose index scan (one probe per distinct kind, at
    most ``FILTER_CHOICES_LIMIT``), so the job list then filters with
    ``kind IN (...)``, served by ``jobs_kind_state_idx``: a kind search never
    scans the jobs.
    """
    needle = term.lower()
    kinds = [kind for kind in _names("list_job_kinds", alias) if needle in kind.lower()]
    return kinds if term in kinds or not term else [*kinds, term]


class _NameFilter(admin.SimpleListFilter):
    query = ""
    parameter_name: str  # every subclass names one

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        alias = model_admin.model.objects.db
        return [(name, name if len(name) <= 40 else name[:39] + "…") for name in _names(self.query, alias)]

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        value = self.value()
        if not value:
            return queryset
        if "\x00" in value:  # PostgreSQL text cannot hold NUL: no job has such a name
            return queryset.none()
        return queryset.filter(**{self.parameter_name: value})


class QueueFilter(_NameFilter):
    title = "queue"
    parameter_name = "queue"
    query = "list_job_queues"


class KindFilter(_NameFilter):
    title = "kind"
    parameter_name = "kind"
    query = "list_job_kinds"


_STATES = {value for value, _ in STATE_CHOICES}
_MAX_ID = 2**63 - 1  # awa.jobs.id is a bigint


class StateFilter(admin.SimpleListFilter):
    title = "state"
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return STATE_CHOICES

    def queryset(self, request: HttpRequest, queryset: Any) -> Any:
        value = self.value()
        if not value:
            return queryset
        if value not in _STATES:  # the column is an enum: an unknown label would be a database error
            return queryset.none()  # JobAdmin.changelist_view says why (bad_filters)
        return queryset.filter(state=value)


#: Parameters of the job list whose values can only be job states: the state filter, and Django's
#: own lookups on the column (``state__exact`` is what its choices filter writes), where an unknown
#: label would be a database error (the column is an enum). Queue and kind are open sets: a name no
#: job has yet is a fair question, answered by an empty list.
_STATE_PARAMS = ("state", *(f"state__{lookup}" for lookup in ("exact", "in", "gt", "gte", "lt", "lte")))


def bad_filters(params: QueryDict) -> list[str]:
    """One sentence per parameter of the job list (in ``params``) that no job can match.

    ``Filter state: 'bogus' is not a job state; the states are scheduled, available, ...``, with a
    guess when the value is close to one (``'Failed'``, ``'faild'``: did you mean 'failed'?).
    """
    states = [value for value, _ in STATE_CHOICES]
    problems = []
    for name in _STATE_PARAMS:
        given = params.getlist(name)
        values = [v for item in given for v in (item.split(",") if name.endswith("__in") else [item])]
        unknown = list(dict.fromkeys(v for v in values if v not in _STATES and (v or name != "state")))
        if not unknown:
            continue
        shown = ", ".join(repr(v if len(v) <= 40 else v[:39] + "…") for v in unknown[:3])
        shown += ", …" if len(unknown) > 3 else ""
        what = "is not a job state" if len(unknown) == 1 else "are not job states"
        guess = difflib.get_close_matches(unknown[0].lower(), states, n=1)
        hint = f" (did you mean {guess[0]!r}?)" if guess else ""
        problems.append(f"Filter {name}: {shown} {what}{hint}; the states are {', '.join(states)}.")
    return problems


def _error_block(error: dict[str, Any]) -> str:
    """One error entry: the user's frames first, the full traceback one click away."""
    text = str(error.get("traceback") or "")
    return format_html(
        '<div class="awa-error"><p><strong>Attempt {}</strong> {}: <code>{}</code>: '
        '<span class="awa-error-message">{}</span></p>{}</div>',
        error.get("attempt", "?"),
        show_time(_parse_time(error.get("at"))),
        error.get("type", "Error"),
        error.get("error", ""),
        format_html(
            '<pre class="awa-user-frames">{}</pre><details class="awa-traceback"><summary>Full traceback</summary>'
            "<pre>{}</pre></details>",
            user_frames(text),
            text,
        )
        if text
        else "",
    )


def _parse_time(value: Any) -> datetime | None:
    from django.utils.dateparse import parse_datetime

    return value if isinstance(value, datetime) else parse_datetime(value) if isinstance(value, str) else None


def _pretty_json(value: Any) -> str:
    return format_html(
        '<pre class="awa-json">{}</pre>', json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    )


def _run_each(
    request: HttpRequest,
    model_admin: admin.ModelAdmin[Any],
    ids: Iterable[Any],
    operation: Callable[[Any, Any], Any],
    done: str,
) -> None:
    """Apply one bridge operation per id; report successes and each refusal."""
    alias = model_admin.model.objects.db
    succeeded, refused = 0, []
    for item in ids:
        try:
            with transaction.atomic(using=alias):
                operation(connections[alias], item)
            succeeded += 1
        except AwaError as exc:
            refused.append(str(exc))
    if succeeded:
        model_admin.message_user(request, f"{succeeded} {done}.", messages.SUCCESS)
    for reason in refused:
        model_admin.message_user(request, reason, messages.ERROR)


class ReadOnlyModelAdmin(_ModelAdminBase):
    """Rows change only through awa_bridge operations (the admin actions), never a change form.

    ``deletable`` lets a page keep Django's delete permission (jobs); the others refuse it.
    """

    deletable = False

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return self.deletable and super().has_delete_permission(request, obj)

    @property
    def urls(self) -> list[Any]:
        """Every page and action of this model, refused with a clear answer on an awa-pg database."""
        return [_refusing_awa_pg(pattern, self) for pattern in self.get_urls()]


def _refusing_awa_pg(pattern: Any, model_admin: admin.ModelAdmin[Any]) -> Any:
    """``pattern`` whose view answers 501 with a one-line reason when the jobs live in awa-pg's storage.

    awa-pg keeps its jobs behind a view over its own tables and has none of
    awa_bridge's helper functions, so the pages and actions here would fail
    with a traceback; one cheap read (``awa_pg_schema``) per request says so.
    """
    view = pattern.callback

    @functools.wraps(view)
    def guarded(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        try:
            foreign.check_sync(detect_sync(connections[model_admin.model.objects.db]), foreign.ADMIN_REFUSAL)
        except ForeignSchema as exc:
            return HttpResponse(f"{exc}\n", status=501, content_type="text/plain; charset=utf-8")
        return view(request, *args, **kwargs)

    return URLPattern(pattern.pattern, guarded, pattern.default_args, pattern.name)


@admin.register(Job)
class JobAdmin(ReadOnlyModelAdmin):
    deletable = True  # guarded by Django's delete permission, through awa_bridge.admin.delete_job
    list_display = (
        "id",
        "state_label",
        "kind_label",
        "queue_label",
        "priority",
        "attempts",
        "run_at_label",
        "started",
        "finished",
        "duration",
        "age",
        "args_preview",
    )
    list_display_links = ("id", "kind_label")
    list_filter = (StateFilter, QueueFilter, KindFilter)
    search_fields = ("kind",)  # replaced by get_search_results: id, kind (prefix / substring), or args:TEXT
    search_help_text = (
        "A job id, part of a kind (matched against the known kinds, then looked up by index), "
        "or args:TEXT to search the args (scans; narrow with filters first)."
    )
    change_list_template = "admin/awa_django/job/change_list.html"
    list_per_page = 50
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER  # facet counts would COUNT the whole table per filter choice
    paginator = EstimatedCountPaginator
    actions = ("retry_jobs", "cancel_jobs", "run_jobs_now", "delete_jobs")
    readonly_fields = (
        "id",
        "kind",
        "queue",
        "state_label",
        "priority",
        "attempts",
        "run_at_full",
        "created_label",
        "started_full",
        "heartbeat_label",
        "deadline_label",
        "finished_full",
        "duration",
        "tag_list",
        "run_lease",
        "unique_key_hex",
        "pretty_args",
        "pretty_metadata",
        "pretty_progress",
        "error_history",
        "timeline",
    )
    fieldsets = (
        (None, {"fields": ("id", "kind", "queue", "state_label", "priority", "attempts", "tag_list")}),
        ("Timeline", {"fields": ("timeline",)}),
        ("Arguments", {"fields": ("pretty_args",)}),
        ("Error history (newest first)", {"fields": ("error_history",)}),
        ("Progress and metadata", {"fields": ("pretty_progress", "pretty_metadata")}),
        (
            "Timing",
            {
                "fields": (
                    "run_at_full",
                    "created_label",
                    "started_full",
                    "heartbeat_label",
                    "deadline_label",
                    "finished_full",
                    "duration",
                )
            },
        ),
        ("Bookkeeping", {"classes": ("collapse",), "fields": ("run_lease", "unique_key_hex")}),
    )

    # -- permissions -----------------------------------------------------------

    def has_retry_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("awa_django.retry_job")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("awa_django.cancel_job")

    def has_run_now_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("awa_django.run_job_now")

    # -- list columns ------------------------------------------------------------

    def get_queryset(self, request: HttpRequest) -> Any:
        """On the list page, only the listed columns and the first characters of the args.

        A page of jobs with 10 MB args must not load them: the big JSON
        columns are deferred and the args preview is cut in SQL.
        """
        queryset = super().get_queryset(request)
        match = getattr(request, "resolver_match", None)
        if match is None or match.url_name != "awa_django_job_changelist":
            return queryset
        preview = Left(Cast("args", output_field=TextField()), ARGS_PREVIEW_CHARS + 1)
        return queryset.only(*_LIST_COLUMNS).annotate(args_head=preview)

    @admin.display(description="args")
    def args_preview(self, job: Job) -> str:
        head = getattr(job, "args_head", None)
        if not isinstance(head, str):
            return "-"
        return head if len(head) <= ARGS_PREVIEW_CHARS else head[:ARGS_PREVIEW_CHARS] + "…"

    @admin.display(description="state", ordering="state")
    def state_label(self, job: Job) -> str:
        return format_html('<span class="awa-state awa-state-{}">{}</span>', job.state, job.state.replace("_", " "))

    @admin.display(description="attempt")
    def attempts(self, job: Job) -> str:
        return f"{job.attempt}/{job.max_attempts}"

    @admin.display(description="kind", ordering="kind")
    def kind_label(self, job: Job) -> str:
        return truncated(job.kind)

    @admin.display(description="queue", ordering="queue")
    def queue_label(self, job: Job) -> str:
        return truncated(job.queue, 16)

    @admin.display(description="run at", ordering="run_at")
    def run_at_label(self, job: Job) -> str:
        return show_when(job.run_at)

    @admin.display(description="created")
    def created_label(self, job: Job) -> str:
        return show_time(job.created_at)

    @admin.display(description="last heartbeat")
    def heartbeat_label(self, job: Job) -> str:
        return show_time(job.heartbeat_at)

    @admin.display(description="deadline")
    def deadline_label(self, job: Job) -> str:
        return show_time(job.deadline_at)

    @admin.display(description="started")
    def started(self, job: Job) -> str:
        return show_when(job.attempted_at)

    @admin.display(description="finished")
    def finished(self, job: Job) -> str:
        return show_when(job.finalized_at)

    @admin.display(description="run at")
    def run_at_full(self, job: Job) -> str:
        return show_time(job.run_at)

    @admin.display(description="started")
    def started_full(self, job: Job) -> str:
        return show_time(job.attempted_at)

    @admin.display(description="finished")
    def finished_full(self, job: Job) -> str:
        return show_time(job.finalized_at)

    @admin.display(description="duration")
    def duration(self, job: Job) -> str:
        if job.attempted_at is None:
            return "-"
        if job.finalized_at is not None and job.finalized_at >= job.attempted_at:
            return humanize_seconds((job.finalized_at - job.attempted_at).total_seconds())
        if job.state == "running":
            return humanize_seconds((timezone.now() - job.attempted_at).total_seconds()) + " so far"
        return "-"

    @admin.display(description="age", ordering="created_at")
    def age(self, job: Job) -> str:
        return humanize_seconds(max((timezone.now() - job.created_at).total_seconds(), 0.0))

    @admin.display(description="tags")
    def tag_list(self, job: Job) -> str:
        return ", ".join(job.tags) or "-"

    @admin.display(description="unique key")
    def unique_key_hex(self, job: Job) -> str:
        return bytes(job.unique_key).hex() if job.unique_key else "-"

    @admin.display(description="args")
    def pretty_args(self, job: Job) -> str:
        return _pretty_json(job.args)

    @admin.display(description="metadata")
    def pretty_metadata(self, job: Job) -> str:
        return _pretty_json(job.metadata)

    @admin.display(description="progress")
    def pretty_progress(self, job: Job) -> str:
        return _pretty_json(job.progress) if job.progress is not None else "-"

    @admin.display(description="errors")
    def error_history(self, job: Job) -> str:
        if not job.errors:
            return "-"
        return format_html_join("", "{}", ((_error_block(error),) for error in reversed(job.errors)))

    @admin.display(description="timeline")
    def timeline(self, job: Job) -> str:
        alias = self.model.objects.db
        events = job_timeline(job, operator_actions(alias, job.id), job_attempts(alias, job.id))
        items = (
            (
                # The end in its state's colour: failed / cancelled red, completed green.
                f"finished awa-ev-{job.state}" if event.kind == "finished" else event.kind,
                show_time(event.at),
                event.title,
                format_html(" — <em>{}</em>", event.who) if event.who else "",
                format_html(": {}", event.detail) if event.detail else "",
            )
            for event in events
        )
        return format_html(
            '<ul class="awa-timeline">{}</ul>',
            format_html_join("", '<li class="awa-ev-{}">{} <strong>{}</strong>{}{}</li>', items),
        )

    # -- search ----------------------------------------------------------------------

    def get_search_results(self, request: HttpRequest, queryset: Any, search_term: str) -> tuple[Any, bool]:
        if bad_filters(request.GET):  # reported by changelist_view; no job matches (nor reaches SQL)
            return queryset.none(), False
        queryset = keyset_page(request, queryset, self.list_per_page)
        term = search_term.strip()
        if not term:
            return queryset, False
        if term.startswith("args:"):
            return queryset.filter(args__icontains=term[5:].strip()), False
        if term.isascii() and term.isdigit() and int(term) <= _MAX_ID:  # "²".isdigit() too, but not int()
            return queryset.filter(id=int(term)) | queryset.filter(kind=term), False
        return queryset.filter(kind__in=matching_kinds(term, self.model.objects.db)), False

    # -- actions -------------------------------------------------------------------------

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # Django 6.1 passes action_location; 5.2 does not know it.
        if action_location is None:
            actions = super().get_actions(request)
        else:
            actions = super().get_actions(request, action_location)  # type: ignore[call-arg]
        actions.pop("delete_selected", None)  # replaced by delete_jobs: one summary, running jobs skipped
        return actions

    @admin.action(description="Retry selected jobs", permissions=["retry"])
    def retry_jobs(self, request: HttpRequest, queryset: Any) -> None:
        run_set_action(self, request, queryset, "retry")

    @admin.action(description="Cancel selected jobs", permissions=["cancel"])
    def cancel_jobs(self, request: HttpRequest, queryset: Any) -> None:
        run_set_action(self, request, queryset, "cancel")

    @admin.action(description="Run selected jobs now", permissions=["run_now"])
    def run_jobs_now(self, request: HttpRequest, queryset: Any) -> None:
        run_set_action(self, request, queryset, "run_now")

    @admin.action(description="Delete selected jobs", permissions=["delete"])
    def delete_jobs(self, request: HttpRequest, queryset: Any) -> HttpResponse | None:
        """Asks first (a page naming the set), then deletes in batches; running jobs are skipped."""
        if request.POST.get("awa_confirm") == "yes":
            run_set_action(self, request, queryset, "delete")
            return None
        across = request.POST.get("select_across") == "1"
        filters = plain_filter(request) if across else None
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Delete jobs?",
            "across": across,
            "filters": sorted((filters or {}).items()),
            "selected": request.POST.getlist(helpers.ACTION_CHECKBOX_NAME),
            "count": None if across else len(request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)),
            "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        }
        return TemplateResponse(request, "admin/awa_django/job/delete_jobs_confirmation.html", context)

    def delete_model(self, request: HttpRequest, obj: Job) -> None:
        request._awa_deleted = False  # type: ignore[attr-defined]
        try:
            ops.delete_job(connections[self.model.objects.db], obj.id, operator=operator_of(request))
        except AwaError as exc:
            self.message_user(request, str(exc), messages.ERROR)
            return
        request._awa_deleted = True  # type: ignore[attr-defined]
        log_action(request, Job, "delete", f"job {obj.id} deleted", f"job {obj.id}", single_id=obj.id)

    def response_delete(self, request: HttpRequest, obj_display: str, obj_id: Any) -> HttpResponse:
        if not getattr(request, "_awa_deleted", False):  # refused: the error is the only message
            return HttpResponseRedirect(reverse("admin:awa_django_job_change", args=[obj_id]))
        return super().response_delete(request, obj_display, obj_id)

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        if obj is not None and obj.state == "running":
            return False  # cancel it first: no Delete button on a running job
        return super().has_delete_permission(request, obj)

    def log_deletions(self, request: HttpRequest, queryset: Any) -> list[LogEntry]:
        return []  # logged once per action by admin_actions.log_action

    def log_deletion(self, request: HttpRequest, obj: Any, object_repr: str) -> None:
        return None

    # -- buttons on the detail page -------------------------------------------------------

    def get_urls(self) -> list[Any]:
        info = self.opts.app_label, self.opts.model_name
        urls = [
            path(
                "<path:object_id>/do/<str:action>/",
                self.admin_site.admin_view(self.job_action_view),
                name="{}_{}_action".format(*info),
            )
        ]
        return [*urls, *super().get_urls()]

    def job_actions(self, request: HttpRequest, job: Job) -> list[tuple[str, str]]:
        """(action, label) for the buttons this user may press on this job."""
        candidates = [
            ("retry", "Retry", self.has_retry_permission, ops.RETRYABLE_STATES),
            ("cancel", "Cancel", self.has_cancel_permission, ops.CANCELLABLE_STATES),
            ("run_now", "Run now", self.has_run_now_permission, ops.RUN_NOW_STATES),
        ]
        return [
            (name, label) for name, label, allowed, states in candidates if allowed(request) and job.state in states
        ]

    def job_action_view(self, request: HttpRequest, object_id: str, action: str) -> HttpResponse:
        operations = {
            "retry": (self.has_retry_permission, ops.retry_job, "made available again"),
            "cancel": (self.has_cancel_permission, ops.cancel_job, "cancelled"),
            "run_now": (self.has_run_now_permission, ops.run_now, "made available now"),
        }
        if request.method != "POST" or action not in operations:
            raise PermissionDenied
        allowed, operation, done = operations[action]
        if not allowed(request):
            raise PermissionDenied
        try:
            job_id = int(object_id)
        except ValueError:
            raise PermissionDenied from None
        try:
            operation(connections[self.model.objects.db], job_id, operator=operator_of(request))
        except AwaError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        else:
            self.message_user(request, f"Job {job_id} {done}.", messages.SUCCESS)
            log_action(request, Job, action, f"job {job_id} {done}", f"job {job_id}", single_id=job_id)
        return HttpResponseRedirect(reverse("admin:awa_django_job_change", args=[job_id]))

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        take_keyset(request)
        # A filter value no job can have (?state=bogus) is said above the (empty) list, as an error
        # message, the way this admin reports every refused input (message_user, as its actions do).
        # Not Django's invalid-lookup answer, a redirect to ?e=1: that drops the whole query string
        # and shows every job, unfiltered, without saying why.
        for problem in bad_filters(request.GET):
            self.message_user(request, problem, messages.ERROR)
        response = super().changelist_view(request, extra_context)
        cl = getattr(response, "context_data", {}).get("cl")
        if cl is not None:
            cl.awa_pager = pager(request, cl)
        return response

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context: Any = None) -> Any:
        extra_context = dict(extra_context or {})
        job = self.get_object(request, object_id)
        if job is not None:
            extra_context["awa_job_actions"] = self.job_actions(request, job)
            extra_context["awa_actions"] = [
                (label, reverse("admin:awa_django_job_action", args=[job.id, name]))
                for name, label in extra_context["awa_job_actions"]
            ]
        return super().change_view(request, object_id, form_url, extra_context)


# -- queues ------------------------------------------------------------------------------------


@admin.register(QueueMeta)
class QueueAdmin(ReadOnlyModelAdmin):
    """The overview: per queue, throughput charts, depth by state, lag, oldest job, live workers, pause/resume."""

    change_list_template = "admin/awa_django/queuemeta/change_list.html"

    def has_pause_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("awa_django.pause_queue")

    def get_urls(self) -> list[Any]:
        view = self.admin_site.admin_view(self.pause_view)
        return [path("do/<str:action>/<path:queue>/", view, name="awa_django_queuemeta_pause"), *super().get_urls()]

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        conn = connections[self.model.objects.db]
        context = {
            **self.admin_site.each_context(request),
            "opts": self.opts,
            "title": "Queues overview",
            "rows": overview_rows(conn),
            "can_pause": self.has_pause_permission(request),
            **(extra_context or {}),
        }
        return TemplateResponse(request, self.change_list_template, context)

    def pause_view(self, request: HttpRequest, action: str, queue: str) -> HttpResponse:
        if request.method != "POST" or action not in ("pause", "resume") or not self.has_pause_permission(request):
            raise PermissionDenied
        conn = connections[self.model.objects.db]
        try:
            if action == "pause":
                ops.pause_queue(conn, queue, paused_by=operator_of(request))
            else:
                ops.resume_queue(conn, queue)
            self.message_user(request, f"Queue {queue} {action}d.", messages.SUCCESS)
            log_action(request, QueueMeta, action, f"queue {queue} {action}d", f"queue {queue}", single_id=queue)
        except AwaError as exc:
            self.message_user(request, str(exc), messages.ERROR)
        return HttpResponseRedirect(reverse("admin:awa_django_queuemeta_changelist"))


# -- cron schedules, overview and workers: their own modules, registered on import --------------

from . import admin_cron, admin_workers  # noqa: E402, F401
