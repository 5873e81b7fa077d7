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
    "time_limit",
    "soft_time_limit",
    "rate_limit",
    "store_errors_even_if_ignored",
    "send_events",
)

#: Options that have no faithful meaning on awa, with what to do instead.
REFUSED_TASK_OPTIONS = {
    "acks_on_failure_or_timeout": "a failed attempt is recorded in the job's errors and retried or failed "
    "by awa's rules; there is no message to acknowledge",
    "compression": "arguments and results are stored as jsonb",
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
    # Accepted for what awa always does: errors are kept in the job's errors column; the
    # signals are sent in the worker's process (there is no event stream to switch).
    "store_errors_even_if_ignored": (True, "errors are always kept in the job's errors column"),
    "send_events": (True, "awa has no event stream; connect to awa_bridge.celery.signals instead"),
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
    "task_id",
    "link",
    "link_error",
    "time_limit",
    "soft_time_limit",
    "parent_id",
    "root_id",
    # set by canvas (chain / group / chord) on the jobs it writes
    "chain",
    "chord",
    "group_id",
    "group_index",
    "chord_error",
    "chord_error_from",
)

REFUSED_CALL_OPTIONS = {
    "shadow": "the job's kind is the task's name",
    "headers": "use metadata on awa jobs (awa_bridge.insert_job(..., metadata=...)) instead",
    "exchange": "awa routes by queue only",
    "routing_key": "awa routes by queue only",
    "retry": "the job is one INSERT in your transaction; there is no publish retry",
    "retry_policy": "the job is one INSERT in your transaction; there is no publish retry",
    "compression": "arguments are stored as jsonb",
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
    "task_annotations": None,
    "task_time_limit": None,
    "task_soft_time_limit": None,
    "task_default_rate_limit": None,
    "worker_concurrency": None,  # mapped: max_workers of each queue app.client() runs
    "worker_pool": None,  # "prefork": tasks with a hard time limit run in child processes (see child.py)
    "worker_max_tasks_per_child": None,  # those children are replaced after this many tasks
    "beat_schedule": {},
    "timezone": None,
    "enable_utc": True,
    "result_extended": True,  # AsyncResult always has name, args, kwargs, queue and retries
    "imports": (),
    "include": (),
    "priority_order": "higher_first",  # awa's own: how to read Celery priorities (see awa_priority)
}

_BROKER = "the broker is PostgreSQL (database_url / DATABASE_URL); the value is not used"
_NO_EVENTS = "awa has no event stream; the signals are sent in the worker's process (awa_bridge.celery.signals)"
_LOGGING = "the awa worker leaves logging as the program configured it (get_task_logger records carry task_id)"

#: Accepted and ignored: what they configure does not exist on awa, and nothing behaves differently without it.
IGNORED_SETTINGS: dict[str, str] = {
    "broker_url": _BROKER,
    "broker": _BROKER,
    "broker_connection_retry": _BROKER,
    "broker_connection_retry_on_startup": _BROKER,
    "broker_connection_max_retries": _BROKER,
    "broker_connection_timeout": _BROKER,
    "broker_heartbeat": _BROKER,
    "broker_pool_limit": _BROKER,
    "broker_transport_options": _BROKER,
    "broker_use_ssl": _BROKER,
    "broker_channel_error_retry": _BROKER,
    "result_backend": "results are stored in PostgreSQL (awa.job_results) next to the job; the value is not used",
    "result_backend_always_retry": "results are written by the job's completing statement; there is no backend call",
    "result_backend_max_retries": "results are written by the job's completing statement; there is no backend call",
    "result_backend_transport_options": "results are stored in PostgreSQL; there is no backend transport",
    "result_expires": "a result lives as long as its job (the worker's completed_retention) and is deleted with it",
    "result_persistent": "results are rows in PostgreSQL: always persistent",
    "result_compression": "results are stored as jsonb",
    "task_compression": "arguments are stored as jsonb",
    "task_create_missing_queues": "awa queues exist as soon as a job names them",
    "task_queues": "awa queues are names: a worker runs the queues it is started with (or the tasks' queues)",
    "task_default_exchange": "awa routes by queue only",
    "task_default_exchange_type": "awa routes by queue only",
    "task_default_routing_key": "awa routes by queue only",
    "task_publish_retry": "the job is one INSERT in your transaction; there is no publish to retry",
    "task_publish_retry_policy": "the job is one INSERT in your transaction; there is no publish to retry",
    "task_store_errors_even_if_ignored": "errors are always kept in the job's errors column",
    "task_send_sent_event": _NO_EVENTS,
    "task_protocol": "jobs are rows, not messages",
    "worker_send_task_events": _NO_EVENTS,
    "worker_enable_remote_control": "app.control.inspect() reads the database; there is no remote control channel",
    "worker_prefetch_multiplier": "awa claims only as many jobs as it has free slots: nothing is prefetched",
    "worker_max_memory_per_child": "children are recycled by task count (worker_max_tasks_per_child) only",
    "worker_hijack_root_logger": _LOGGING,
    "worker_log_format": _LOGGING,
    "worker_task_log_format": _LOGGING,
    "worker_log_color": _LOGGING,
    "worker_redirect_stdouts": _LOGGING,
    "worker_redirect_stdouts_level": _LOGGING,
    "worker_cancel_long_running_tasks_on_connection_loss": "a worker that loses the database has its jobs "
    "rescued by the leader once their heartbeats go stale",
    "worker_lost_wait": "a lost worker's jobs are rescued once their heartbeats go stale",
    "worker_state_db": "revokes are job states in PostgreSQL; there is no worker state file",
    "beat_max_loop_interval": "awa's cron is evaluated by the worker's maintenance leader",
    "beat_schedule_filename": "beat schedules are stored in awa.cron_jobs",
}

_WORKER = "configure the awa worker instead (Client(...) / QueueConfig, or AWA['QUEUES'] in Django)"
#: Refused: their meaning cannot be kept here (other values than awa's behaviour are in FIXED_SETTINGS).
REFUSED_SETTINGS = {
    "beat_scheduler": "awa's beat is its cron table (awa.cron_jobs) declared from beat_schedule; a scheduler "
    "class (django_celery_beat's DatabaseScheduler) and the schedules edited in it are not read",
}

FIXED_SETTINGS = {
    "task_acks_late": (True, "awa finishes a job only after its task returns; early acknowledgement has no equivalent"),
    "task_track_started": (True, "awa always reports STARTED while a task runs"),
    "task_serializer": ("json", "jobs store their arguments as jsonb (in kombu's JSON encoding)"),
    "result_serializer": ("json", "results are stored as jsonb (in kombu's JSON encoding)"),
    "enable_utc": (True, "times are stored as timestamptz; give a timezone for crontab schedules instead"),
    "task_reject_on_worker_lost": (
        True,
        "a job whose worker dies is always rescued and run again (not counted as a retry); "
        "False (fail the task) has no equivalent",
    ),
}

PRIORITY_ORDERS = ("higher_first", "lower_first")
#: Celery's pool names awa keeps: the first two run tasks with a hard time limit in child processes.
WORKER_POOLS = ("prefork", "processes", "threads", "solo")


def check_setting(key: str, value: Any) -> Any:
    """Validate one setting; return the value to keep."""
    if key in REFUSED_SETTINGS:
        if key == "beat_scheduler" and value in (None, "celery.beat:PersistentScheduler"):
            return value
        raise UnsupportedOption(key, f"not supported: {REFUSED_SETTINGS[key]}")
    if key in FIXED_SETTINGS:
        allowed, reason = FIXED_SETTINGS[key]
        if value != allowed:
            raise UnsupportedOption(key, f"{key}={value!r} is not supported: {reason}")
        return value
    if key in IGNORED_SETTINGS or key.startswith("redis_"):
        return value
    if key not in SETTINGS:
        hint = f" ({_WORKER})" if key.startswith("worker_") else ""
        raise UnsupportedOption(key, f"unknown or unsupported setting{hint}; supported: {', '.join(SETTINGS)}")
    return _check_value(key, value)


def _check_value(key: str, value: Any) -> Any:
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
    if key == "task_annotations" and value is not None:
        return check_annotations(value)
    if key in ("task_time_limit", "task_soft_time_limit") and value is not None:
        return seconds(value, key)
    if key == "task_default_rate_limit" and value is not None:
        from .limits import parse_rate

        parse_rate(value, key)
    if key == "worker_pool" and value is not None and value not in WORKER_POOLS:
        raise UnsupportedOption(
            key,
            f"worker_pool={value!r} is not supported: tasks run in the worker's threads ('threads', 'solo'), or "
            "with 'prefork' tasks with a hard time_limit run in child processes killed at the limit",
        )
    bad_count = isinstance(value, bool) or not isinstance(value, int) or value < 1
    if key in ("worker_concurrency", "worker_max_tasks_per_child") and value is not None and bad_count:
        raise ValidationError(key, f"must be a positive integer, got {value!r}")
    if key in ("imports", "include"):
        return (value,) if isinstance(value, str) else tuple(value)
    return value


#: Task attributes ``task_annotations`` may set.
ANNOTATABLE = (
    "rate_limit",
    "time_limit",
    "soft_time_limit",
    "max_retries",
    "default_retry_delay",
    "ignore_result",
    "acks_late",
    "autoretry_for",
    "retry_backoff",
    "retry_backoff_max",
    "retry_jitter",
)


def check_annotations(value: Any) -> tuple[dict[str, dict[str, Any]], ...]:
    """``task_annotations``: a dict ``{"name or *": {"rate_limit": "10/s"}}`` or a list of them."""
    items = value if isinstance(value, (list, tuple)) else [value]
    result = []
    for item in items:
        if not isinstance(item, Mapping):
            raise UnsupportedOption(
                "task_annotations", "only dicts of task name (or '*') to attributes are supported; objects are not"
            )
        for name, attrs in item.items():
            if not isinstance(attrs, Mapping):
                raise ValidationError(f"task_annotations[{name!r}]", f"must be a dict of attributes, got {attrs!r}")
            for attr in attrs:
                if attr not in ANNOTATABLE:
                    raise UnsupportedOption(
                        f"task_annotations[{name!r}].{attr}", f"annotations may set {', '.join(ANNOTATABLE)}"
                    )
        result.append({str(k): dict(v) for k, v in item.items()})
    return tuple(result)


def annotate(task: Any, annotations: Any) -> None:
    """Apply ``task_annotations`` to a task (exact name or ``*``), as Celery does when it loads tasks."""
    from .task import _task_option

    for item in annotations:
        for name in ("*", task.name):
            for attr, value in (item.get(name) or {}).items():
                setattr(task, attr, _task_option(attr, value, f"task_annotations[{name!r}]"))


def check_routes(routes: Any) -> tuple[Any, ...]:
    """``task_routes`` as Celery takes it: a dict of task name (glob or compiled regex) to a route,
    a router function ``(name, args, kwargs, options, task=None, **kw) -> route or None``, a
    dotted path to one, or a list of these, tried in order."""
    items = list(routes) if isinstance(routes, (list, tuple)) else [routes]
    result: list[Any] = []
    for index, item in enumerate(items):
        if isinstance(item, str):
            item = _import_router(item, f"task_routes[{index}]")
        if callable(item):
            result.append(item)
        elif isinstance(item, Mapping):
            result.append({pattern: check_route(route, f"task_routes[{pattern!r}]") for pattern, route in item.items()})
        else:
            raise ValidationError(
                f"task_routes[{index}]", f"must be a dict, a router function or its dotted path, got {item!r}"
            )
    return tuple(result)


def _import_router(path: str, field: str) -> Any:
    import importlib

    module_name, _, attribute = path.rpartition(".")
    try:
        return getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError, ValueError):
        raise ValidationError(field, f"{path!r} is not an importable router function") from None


def check_route(route: Any, field: str) -> dict[str, Any]:
    """One route: a queue name, or a dict with ``queue`` (and ``priority``). Exchange-only routes
    (``exchange`` / ``routing_key`` and no queue) are refused: awa routes by queue."""
    if isinstance(route, str):
        route = {"queue": route}
    if not isinstance(route, Mapping):
        raise ValidationError(field, f"must be a queue name or a dict such as {{'queue': 'q'}}, got {route!r}")
    for key in route:
        if key not in ("queue", "priority", "exchange", "exchange_type", "routing_key"):
            raise UnsupportedOption(f"{field}.{key}", "awa routes by queue (and priority) only")
    if "queue" not in route and ("exchange" in route or "routing_key" in route):
        raise UnsupportedOption(
            field, "awa routes by queue only: a route with an exchange or routing_key needs a queue"
        )
    if "queue" in route:
        _check_queue(route["queue"], f"{field}.queue")
    if route.get("priority") is not None:
        check_celery_priority(route["priority"], f"{field}.priority")
    return {k: v for k, v in route.items() if k in ("queue", "priority")}


def check_using(options: Mapping[str, Any]) -> None:
    """``using=`` of a call that writes where no ``connection=`` says: None or a connection name
    (with Django, an alias). ``""`` is refused: a provider would read it as "not given" and pick its
    default. Checked before the name is resolved (``transaction.current_connection``), and so in
    eager mode too, which resolves nothing (it needs no database)."""
    value = options.get("using")
    if options.get("connection") is None and value is not None and (not isinstance(value, str) or not value):
        raise ValidationError("using", f"must be a connection name (with Django, an alias), got {value!r}")


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
