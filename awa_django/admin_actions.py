"""The job list's set-based actions and the operator record they leave.

An action over a selection (or over "all N matching this filter", Django's
*select all*) calls one of ``awa_bridge.admin``'s set operations: one
statement per batch of jobs, never one per row, and one summary message
("24,981 retried; 19 skipped: completed"), not one per job. When the list
is filtered by state / kind / queue only, *select all* becomes the filter
itself (the database visits the matching jobs in batches, index-backed);
any other narrowing (a search) acts on the ids it matches, at most
``MAX_IDS_ACROSS`` of them. Each run is bounded by ``TIME_BUDGET`` seconds,
well inside a typical 30 s request timeout; the summary says when it
stopped early, and running it again goes on.

Every action is written to Django's ``LogEntry`` (the admin's history) and,
by the set operation itself, on each changed job's timeline
(``awa.job_actions``, as ``admin:<username>``).
"""

from __future__ import annotations

from typing import Any, cast

from django.contrib import messages
from django.contrib.admin.models import CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db import connections
from django.http import HttpRequest

from awa_bridge import AwaError
from awa_bridge import admin as ops

#: Seconds one admin request may spend on a set operation.
TIME_BUDGET = 20.0
#: Jobs changed per statement.
BATCH_SIZE = 2000
#: The most jobs a *select all* over a search (not a plain filter) acts on.
MAX_IDS_ACROSS = 100_000
#: Query parameters of the job list that a set operation's filter expresses.
FILTER_PARAMS = ("state", "kind", "queue")
# Parameters of the list that do not narrow it (ordering, page, popup bits).
_NEUTRAL_PARAMS = ("o", "p", "_changelist_filters", "e")

SET_OPERATIONS = {
    "retry": ops.retry_jobs,
    "cancel": ops.cancel_jobs,
    "run_now": ops.run_jobs_now,
    "delete": ops.delete_jobs,
}


def operator_of(request: HttpRequest) -> str:
    """How an admin user is named on a job's timeline."""
    return f"admin:{request.user.get_username()}"


def plain_filter(request: HttpRequest) -> dict[str, str] | None:
    """The list's state / kind / queue filters, or None when something else narrows it too."""
    params = request.GET
    if any(key not in FILTER_PARAMS and key not in _NEUTRAL_PARAMS for key in params):
        return None
    return {key: params[key] for key in FILTER_PARAMS if params.get(key)}


def run_set_action(model_admin: Any, request: HttpRequest, queryset: Any, action: str) -> ops.BulkResult | None:
    """Apply ``action`` to the selected jobs (or all matching), post ONE summary, log it; the result."""
    alias = model_admin.model.objects.db
    conn = connections[alias]
    operation = SET_OPERATIONS[action]
    across = request.POST.get("select_across") == "1"
    filters = plain_filter(request) if across else None
    single_id = None
    try:
        if filters is not None:
            result = operation(
                conn,
                state=filters.get("state"),
                kind=filters.get("kind"),
                queue=filters.get("queue"),
                operator=operator_of(request),
                batch_size=BATCH_SIZE,
                time_budget=TIME_BUDGET,
            )
            scope = "all jobs matching " + (", ".join(f"{k}={v}" for k, v in sorted(filters.items())) or "no filter")
        else:
            ids = list(queryset.order_by("id").values_list("id", flat=True)[:MAX_IDS_ACROSS])
            single_id = ids[0] if len(ids) == 1 else None
            result = operation(conn, ids, operator=operator_of(request), batch_size=BATCH_SIZE, time_budget=TIME_BUDGET)
            scope = _describe_ids(ids)
    except AwaError as exc:
        model_admin.message_user(request, str(exc), messages.ERROR)
        return None
    level = messages.SUCCESS if not result.skipped and result.complete else messages.WARNING
    if result.changed == 0:
        level = messages.ERROR if result.skipped else messages.INFO
    model_admin.message_user(request, result.summary(), level)
    log_action(request, model_admin.model, action, result.summary(), scope, single_id=single_id)
    return result


def _describe_ids(ids: list[int]) -> str:
    if len(ids) == 1:
        return f"job {ids[0]}"
    shown = ", ".join(str(i) for i in ids[:50])
    return f"jobs {shown}" + (f" and {len(ids) - 50:,} more" if len(ids) > 50 else "")


def log_action(
    request: HttpRequest, model: Any, action: str, summary: str, scope: str, single_id: int | str | None = None
) -> None:
    """One ``LogEntry`` for one operator action (one job or queue, a selection or a filter)."""
    LogEntry.objects.create(
        user_id=cast(int, request.user.pk),  # admin views run for a logged-in user
        content_type_id=ContentType.objects.get_for_model(model, for_concrete_model=False).pk,
        object_id=None if single_id is None else str(single_id),
        object_repr=scope[:200],
        action_flag=DELETION if action == "delete" else CHANGE,
        change_message=f"{action.replace('_', ' ')}: {summary} ({scope})",
    )
