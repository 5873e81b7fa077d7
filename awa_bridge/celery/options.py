"""Which Celery options mean something here, what they map to, and why the rest are refused.

Three tables, one per place an option can be given: task options (the
decorator), call options (``apply_async``) and app settings (``app.conf``).
An option missing from the supported names raises ``UnsupportedOption``
naming it, where it is given: a Celery project finds out at import time (or
at the call) that something would behave differently, never in production.
docs/howto/celery.md shows the same tables.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from ..errors import ValidationError
from .errors import UnsupportedOption

# -- task options (@app.task / @shared_task) ------------------------------------

TASK_OPTIONS = (
    "name",
    "bind",
    "base",
    "queue",
    "priority",
    "max_retries",
    "default_retry_delay",
    "autoretry_for",
    "dont_autoretry_for",
    "retry_kwargs",
    "retry_backoff",
    "retry_backoff_max",
    "retry_jitter",
    "ignore_result",
    "expires",
    "typing",
    "throws",
    "serializer",
    "acks_late",
    "reject_on_worker_lost",
    "track_started",
)

_QUEUE_DEADLINE = "put the task on a queue of its own and set that queue's deadline (QueueConfig(deadline=...))"

#: Options that have no faithful meaning on awa, with what to do instead.
REFUSED_TASK_OPTIONS = {
    "time_limit": "awa has no hard kill of a running task; " + _QUEUE_DEADLINE,
    "soft_time_limit": "awa raises no SoftTimeLimitExceeded inside a task; "
    + _QUEUE_DEADLINE
    + " (past it, sync handlers see job.cancelled and the attempt fails)",
    "rate_limit": "awa rate-limits claims per queue, not per task: put the task on a queue of its own "
    "with QueueConfig(max_rate=...)",
    "acks_on_failure_or_timeout": "a failed attempt is recorded in the job's errors and retried or failed "
    "by awa's rules; there is no message to acknowledge",
    "store_errors_even_if_ignored": "errors are always kept in the job's errors column",
    "compression": "arguments and results are stored as jsonb",
    "send_events": "awa has no event stream; use the worker's lifecycle hooks (client.on(...))",
    "pydantic": "arguments are stored as JSON; convert models yourself (model_dump / model_validate)",
    "trail": "awa keeps no parent/child result trail",
    "resultrepr_maxsize": "results are stored whole as jsonb",
    "request_stack": "not a task option",
}

#: Options accepted only with one value (the behaviour awa has); any other value is refused.
FIXED_TASK_OPTIONS = {
    "serializer": ("json", "arguments and results are stored as JSON (jsonb); only serializer='json' is supported"),
    "acks_late": (
        True,
        "awa finishes a job only after its task returns (acks_late=True); there is no early "
        "acknowledgement, so acks_late=False has no equivalent",
    ),
    "reject_on_worker_lost": (
        True,
        "a job whose worker dies is rescued and run again (spending an attempt), which is "
        "reject_on_worker_lost=True; False (fail the task) has no equivalent",
    ),
    "track_started": (True, "awa always reports STARTED while a task runs; track_started=False has no equivalent"),
}


def check_task_options(options: Mapping[str, Any], where: str) -> None:
    """Refuse unknown and unsupported task options (``where`` names the task for the message)."""
    for key, value in options.items():
        if key in REFUSED_TASK_OPTIONS:
            raise UnsupportedOption(key, f"{where}: not supported: {REFUSED_TASK_OPTIONS[key]}")
        if key in FIXED_TASK_OPTIONS:
            allowed, reason = FIXED_TASK_OPTIONS[key]
            if value != allowed:
                raise UnsupportedOption(key, f"{where}: {key}={value!r} is not supported: {reason}")
            continue
        if key not in TASK_OPTIONS:
            raise UnsupportedOption(
                key, f"{where}: unknown or unsupported Celery task option; supported: {', '.join(TASK_OPTIONS)}"
            )


# -- call options (apply_async / send_task) ------------------------------------------

#: ``connection``, ``using``, ``unique`` and ``tags`` are awa's own additions.
CALL_OPTIONS = (
    "countdown",
    "eta",
    "expires",
    "queue",
    "priority",
    "ignore_result",
    "serializer",
    "connection",
    "using",
    "unique",
    "tags",
)

REFUSED_CALL_OPTIONS = {
    "task_id": "job ids are assigned by PostgreSQL; read the id from the returned AsyncResult",
    "link": "awa has no callbacks between tasks; call the next task from the first one",
    "link_error": "awa has no error callbacks; handle the error in the task or with client.on('exhausted')",
    "chain": "canvas (chain/group/chord) is not supported",
    "chord": "canvas (chain/group/chord) is not supported",
    "group_id": "canvas (chain/group/chord) is not supported",
    "group_index": "canvas (chain/group/chord) is not supported",
    "shadow": "the job's kind is the task's name",
    "headers": "use metadata on awa jobs (awa_bridge.insert_job(..., metadata=...)) instead",
    "exchange": "awa routes by queue only",
    "routing_key": "awa routes by queue only",
    "retry": "the job is one INSERT in your transaction; there is no publish retry",
    "retry_policy": "the job is one INSERT in your transaction; there is no publish retry",
    "compression": "arguments are stored as jsonb",
    "time_limit": "awa has no per-call time limit; use a queue deadline (QueueConfig(deadline=...))",
    "soft_time_limit": "awa has no per-call time limit; use a queue deadline (QueueConfig(deadline=...))",
    "add_to_parent": "awa keeps no parent/child result trail",
    "producer": "the job is written on a database connection (connection=... or your transaction)",
    "mandatory": "awa routes by queue only",
    "delivery_mode": "jobs are always durable rows",
}


def check_call_options(options: Mapping[str, Any], where: str) -> None:
    for key, value in options.items():
        if key in REFUSED_CALL_OPTIONS:
            raise UnsupportedOption(key, f"{where}: not supported: {REFUSED_CALL_OPTIONS[key]}")
        if key == "serializer" and value != "json":
            raise UnsupportedOption(key, f"{where}: only serializer='json' is supported (jobs store jsonb)")
        if key not in CALL_OPTIONS:
            raise UnsupportedOption(
                key, f"{where}: unknown or unsupported apply_async option; supported: {', '.join(CALL_OPTIONS)}"
            )


# -- app settings (app.conf) --------------------------------------------------------------

SETTINGS: dict[str, Any] = {
    "database_url": None,  # awa's own: where jobs and results live (default: $DATABASE_URL)
    "task_always_eager": False,
    "task_eager_propagates": False,
    "task_default_queue": "default",
    "task_default_priority": None,
    "task_ignore_result": False,
    "task_acks_late": True,
    "task_track_started": True,
    "task_serializer": "json",
    "result_serializer": "json",
    "accept_content": ("json",),
    "result_accept_content": ("json",),
    "task_routes": None,
    "beat_schedule": {},
    "timezone": None,
    "enable_utc": True,
    "result_extended": True,  # AsyncResult always has name, args, kwargs, queue and retries
    "imports": (),
    "include": (),
    "priority_order": "higher_first",  # awa's own: how to read Celery priorities (see awa_priority)
}

_WORKER = "configure the awa worker instead (Client(...) / QueueConfig, or AWA['QUEUES'] in Django)"
REFUSED_SETTINGS = {
    "broker_url": "awa's broker is PostgreSQL: set database_url (or DATABASE_URL) instead",
    "broker": "awa's broker is PostgreSQL: set database_url (or DATABASE_URL) instead",
    "result_backend": "results are stored in PostgreSQL (awa.job_results) next to the job: drop this setting",
    "result_expires": "results live exactly as long as their job: set the worker's completed_retention",
    "task_time_limit": "awa has no hard time limit; use queue deadlines (QueueConfig(deadline=...))",
    "task_soft_time_limit": "awa has no soft time limit; use queue deadlines (QueueConfig(deadline=...))",
    "task_default_rate_limit": "awa rate-limits per queue: QueueConfig(max_rate=...)",
    "task_annotations": "set the options on the tasks themselves",
    "task_compression": "arguments are stored as jsonb",
    "result_compression": "results are stored as jsonb",
    "task_create_missing_queues": "awa queues exist as soon as a job names them",
    "task_queues": "awa queues are names; a worker runs the ones it is given (" + _WORKER + ")",
    "worker_concurrency": _WORKER,
    "worker_prefetch_multiplier": _WORKER,
    "worker_max_tasks_per_child": _WORKER,
    "task_reject_on_worker_lost": "a job whose worker dies is always rescued and run again (spending an attempt)",
    "task_store_errors_even_if_ignored": "errors are always kept in the job's errors column",
}

FIXED_SETTINGS = {
    "task_acks_late": (True, "awa finishes a job only after its task returns; early acknowledgement has no equivalent"),
    "task_track_started": (True, "awa always reports STARTED while a task runs"),
    "task_serializer": ("json", "jobs store their arguments as jsonb"),
    "result_serializer": ("json", "results are stored as jsonb"),
    "enable_utc": (True, "times are stored as timestamptz; give a timezone for crontab schedules instead"),
}

PRIORITY_ORDERS = ("higher_first", "lower_first")


def check_setting(key: str, value: Any) -> Any:
    """Validate one setting; return the value to keep."""
    if key in REFUSED_SETTINGS:
        raise UnsupportedOption(key, f"not supported: {REFUSED_SETTINGS[key]}")
    if key.startswith("worker_") or key.startswith("broker_"):
        raise UnsupportedOption(key, f"not supported: {_WORKER}")
    if key not in SETTINGS:
        raise UnsupportedOption(key, f"unknown or unsupported setting; supported: {', '.join(SETTINGS)}")
    if key in FIXED_SETTINGS:
        allowed, reason = FIXED_SETTINGS[key]
        if value != allowed:
            raise UnsupportedOption(key, f"{key}={value!r} is not supported: {reason}")
    if key in ("accept_content", "result_accept_content"):
        values = [value] if isinstance(value, str) else list(value)
        if any(v not in ("json", "application/json") for v in values):
            raise UnsupportedOption(key, f"only JSON is supported, got {value!r}")
        return tuple(values)
    if key == "priority_order" and value not in PRIORITY_ORDERS:
        raise ValidationError(key, f"must be one of {PRIORITY_ORDERS}, got {value!r}")
    if key == "task_default_priority" and value is not None:
        check_celery_priority(value, key)
    if key == "task_default_queue":
        _check_queue(value, key)
    if key == "task_routes" and value is not None:
        return check_routes(value)
    if key in ("imports", "include"):
        return (value,) if isinstance(value, str) else tuple(value)
    return value


def check_routes(routes: Any) -> dict[str, dict[str, Any]]:
    """``task_routes`` as a dict of task name (or glob) to ``{"queue": ...}``."""
    if not isinstance(routes, Mapping):
        raise UnsupportedOption(
            "task_routes",
            "only the dict form is supported ({'name or glob': {'queue': 'q'}}); router functions are not",
        )
    result: dict[str, dict[str, Any]] = {}
    for pattern, route in routes.items():
        if isinstance(route, str):
            route = {"queue": route}
        if not isinstance(route, Mapping):
            raise ValidationError(
                f"task_routes[{pattern!r}]", f"must be a dict such as {{'queue': 'q'}}, got {route!r}"
            )
        for key in route:
            if key not in ("queue", "priority"):
                raise UnsupportedOption(f"task_routes[{pattern!r}].{key}", "awa routes by queue (and priority) only")
        if "queue" in route:
            _check_queue(route["queue"], f"task_routes[{pattern!r}].queue")
        if route.get("priority") is not None:
            check_celery_priority(route["priority"], f"task_routes[{pattern!r}].priority")
        result[str(pattern)] = dict(route)
    return result


def _check_queue(value: Any, field: str) -> None:
    if not isinstance(value, str) or not 1 <= len(value) <= 200 or "\x00" in value:
        raise ValidationError(field, f"must be a queue name of 1 to 200 characters, got {value!r}")


# -- values ---------------------------------------------------------------------------------

#: Celery priority 0..9 (read with ``priority_order='higher_first'``) -> awa priority 1..4 (1 first).
PRIORITY_MAP = (4, 4, 4, 3, 3, 2, 2, 2, 1, 1)


def check_celery_priority(value: Any, field: str = "priority") -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 9:
        raise ValidationError(field, f"must be a Celery priority, an integer from 0 to 9, got {value!r}")
    return value


def awa_priority(value: Any, order: str, field: str = "priority") -> int:
    """Map a Celery priority (0..9) onto awa's four levels (1 runs first).

    Celery's calling guide defines priority as AMQP does: a higher number is
    more important (RabbitMQ). That is ``order='higher_first'`` (the default):
    8-9 -> 1, 5-7 -> 2 (awa's default), 3-4 -> 3, 0-2 -> 4. Celery's Redis
    transport reads priorities the other way round (0 is the most important);
    projects that relied on it set ``priority_order='lower_first'``.
    """
    level = check_celery_priority(value, field)
    return PRIORITY_MAP[level if order == "higher_first" else 9 - level]


def seconds(value: Any, field: str) -> float:
    """A number of seconds (int, float or timedelta), finite and not negative."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    try:
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
    except OverflowError:  # an int beyond float range
        number = math.nan
    if not math.isfinite(number):
        raise ValidationError(field, f"must be a number of seconds or a timedelta, got {value!r:.60}")
    return max(number, 0.0)


def moment(value: Any, field: str, now: datetime) -> datetime:
    """An absolute time from a datetime (naive = UTC), an ISO 8601 string, or seconds from ``now``."""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValidationError(field, f"{value!r} is not an ISO 8601 date-time") from None
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    delay = seconds(value, field)
    try:
        return now + timedelta(seconds=delay)
    except OverflowError:
        # an int beyond float range, or a date past year 9999: refused like any out-of-range run_at
        raise ValidationError(field, f"{value!r:.60} seconds from now is out of range") from None
