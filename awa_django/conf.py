"""The ``AWA`` settings dict, read once into a typed, validated object.

::

    AWA = {
        "DATABASE": "default",              # the alias holding the awa schema
        "QUEUES": {                         # what `manage.py awa_worker` runs
            "default": {"max_workers": 10},
            "email": {"max_workers": 5, "deadline": 60, "poll_interval": 0.5},
            "reports": 2,                   # shorthand for {"max_workers": 2}
        },                                  # (every option of awa_bridge.worker.QueueConfig)
        "PERIODIC": {                       # upserted into awa.cron_jobs when a worker starts
            "nightly_report": {
                "cron": "30 2 * * *",
                "timezone": "Europe/London",
                "task": "shop.tasks.nightly_report",  # an @awa_django.task, or "kind": "..."
                "args": {"fmt": "pdf"},
                "queue": "reports",
            },
        },
        "WORKER": {"heartbeat_interval": 30, "drain_timeout": 30},
        "RETENTION": {"completed": 86400, "failed": 259200, "history": 2592000},  # seconds (or timedelta)
        "TASK_MODULES": ["shop.jobs"],      # imported by the worker besides each app's tasks.py
        "DATABASE_URL": None,               # the worker's own connections; default: built from DATABASE
    }

Every key is optional. ``get_settings()`` validates the whole dict and raises
``InvalidAwaSetting`` naming the key (``AWA['QUEUES']['email']['max_workers']:
must be >= 1, got 0``); the app calls it when Django starts, so a mistake
stops ``runserver``, ``migrate`` and ``awa_worker`` alike. Module paths
(``TASK_MODULES``, a PERIODIC ``task``) are imported by the system checks
instead (``awa_django.E004`` / ``E005``), so commands without checks
(``startapp``, ``shell``) work before the module exists. Values are checked by
the same code the worker uses (``QueueConfig``, ``WorkerConfig``,
``PeriodicJob``), so what passes here runs there.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver

from awa_bridge import ValidationError
from awa_bridge.validation import as_seconds
from awa_bridge.worker import QueueConfig, WorkerConfig
from awa_bridge.worker.config import SECONDS_SETTINGS  # options given in seconds: a number or a timedelta

from .errors import InvalidAwaSetting

DEFAULT_DATABASE = "default"
DEFAULT_QUEUES: dict[str, dict[str, Any]] = {"default": {}}

TOP_LEVEL_KEYS = ("DATABASE", "DATABASE_URL", "QUEUES", "PERIODIC", "WORKER", "RETENTION", "TASK_MODULES")
QUEUE_KEYS = tuple(f.name for f in dataclasses.fields(QueueConfig) if f.name != "name")
RETENTION_KEYS = {"completed": "completed_retention", "failed": "failed_retention", "history": "history_retention"}
WORKER_KEYS = tuple(f.name for f in dataclasses.fields(WorkerConfig) if f.name not in RETENTION_KEYS.values())
PERIODIC_KEYS = (
    "cron",
    "timezone",
    "task",
    "kind",
    "args",
    "queue",
    "priority",
    "max_attempts",
    "tags",
    "metadata",
    "missed_fire_policy",
)
# Names people reach for, and the option that means it.
QUEUE_ALIASES = {"rate_limit": "max_rate", "rate": "max_rate", "concurrency": "max_workers"}


@dataclass(frozen=True)
class AwaSettings:
    """The validated ``AWA`` settings."""

    database: str = DEFAULT_DATABASE
    database_url: str | None = None
    queues: tuple[QueueConfig, ...] = ()
    periodic: dict[str, dict[str, Any]] = field(default_factory=dict)
    worker: WorkerConfig = field(default_factory=WorkerConfig)
    task_modules: tuple[str, ...] = ()

    def queue(self, name: str) -> QueueConfig | None:
        return next((q for q in self.queues if q.name == name), None)


def _key(*parts: str) -> str:
    return "AWA" + "".join(f"[{part!r}]" for part in parts)


def _unknown(keys: Any, known: tuple[str, ...], *path: str) -> None:
    for key in keys:
        if key not in known:
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else "."
            raise InvalidAwaSetting(_key(*path, str(key)), f"unknown setting{hint} Known: {', '.join(known)}")


def _mapping(value: Any, *path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise InvalidAwaSetting(_key(*path), f"must be a dict, got {type(value).__name__}")
    return value


def _seconds(value: Any, *path: str) -> Any:
    # 0 passes here (priority_aging's "off"); QueueConfig / WorkerConfig refuse it where it means nothing.
    try:
        return as_seconds(path[-1], value, allow_zero=True)
    except ValidationError as exc:
        raise InvalidAwaSetting(_key(*path), f"{exc.message} (a number or a timedelta)") from None


def _queues(raw: Any) -> tuple[QueueConfig, ...]:
    queues = _mapping(raw, "QUEUES")
    if not queues:
        raise InvalidAwaSetting(_key("QUEUES"), "must name at least one queue (or leave QUEUES out for 'default')")
    result = []
    for name, options in queues.items():
        if not isinstance(name, str):
            raise InvalidAwaSetting(_key("QUEUES"), f"queue names must be strings, got {name!r}")
        if isinstance(options, int) and not isinstance(options, bool):
            options = {"max_workers": options}
        elif options is None:
            options = {}
        options = _mapping(options, "QUEUES", name)
        for key in options:
            if key in QUEUE_ALIASES and key not in QUEUE_KEYS:
                raise InvalidAwaSetting(
                    _key("QUEUES", name, key), f"unknown setting; did you mean {QUEUE_ALIASES[key]!r}?"
                )
        _unknown(options, QUEUE_KEYS, "QUEUES", name)
        kwargs = {k: (_seconds(v, "QUEUES", name, k) if k in SECONDS_SETTINGS else v) for k, v in options.items()}
        try:
            result.append(QueueConfig(name, **kwargs))
        except ValidationError as exc:
            raise InvalidAwaSetting(_key("QUEUES", name, exc.field.rsplit(".", 1)[-1]), exc.message) from None
    return tuple(result)


def _worker(raw_worker: Any, raw_retention: Any) -> WorkerConfig:
    worker = dict(_mapping(raw_worker, "WORKER"))
    _unknown(worker, WORKER_KEYS, "WORKER")
    retention = _mapping(raw_retention, "RETENTION")
    _unknown(retention, tuple(RETENTION_KEYS), "RETENTION")
    kwargs: dict[str, Any] = {}
    where: dict[str, tuple[str, ...]] = {}
    for key, value in worker.items():
        kwargs[key] = _seconds(value, "WORKER", key) if key in SECONDS_SETTINGS else value
        where[key] = ("WORKER", key)
    for key, value in retention.items():
        kwargs[RETENTION_KEYS[key]] = _seconds(value, "RETENTION", key)
        where[RETENTION_KEYS[key]] = ("RETENTION", key)
    try:
        return WorkerConfig(**kwargs)
    except ValidationError as exc:
        raise InvalidAwaSetting(_key(*where.get(exc.field, ("WORKER", exc.field))), exc.message) from None


def _periodic(raw: Any) -> dict[str, dict[str, Any]]:
    schedules = _mapping(raw, "PERIODIC")
    result: dict[str, dict[str, Any]] = {}
    for name, options in schedules.items():
        options = dict(_mapping(options, "PERIODIC", str(name)))
        _unknown(options, PERIODIC_KEYS, "PERIODIC", str(name))
        if "cron" not in options:
            raise InvalidAwaSetting(_key("PERIODIC", str(name), "cron"), "is required (a cron expression)")
        if ("task" in options) == ("kind" in options):
            raise InvalidAwaSetting(
                _key("PERIODIC", str(name)), "give exactly one of 'task' (an @awa_django.task path) or 'kind'"
            )
        if "task" in options and (not isinstance(options["task"], str) or not options["task"]):
            raise InvalidAwaSetting(
                _key("PERIODIC", str(name), "task"), f"must be the dotted path of a task, got {options['task']!r}"
            )
        result[str(name)] = options
        # Validates all but the task path, whose import waits for the system check awa_django.E005:
        # importing it here would break every command (startapp too) while the module does not exist yet.
        build_schedule(str(name), options, resolve=False)  # rebuilt, task resolved, when a worker starts
    return result


def build_schedule(name: str, options: Mapping[str, Any], *, resolve: bool = True) -> Any:
    """The ``PeriodicJob`` of one ``AWA['PERIODIC']`` entry (validated by awa_bridge.cron).

    ``resolve=False`` validates the entry without importing its ``task`` (a stand-in kind).
    """
    try:
        from awa_bridge.cron import PeriodicJob
    except ImportError as exc:  # pragma: no cover - croniter is in the cron extra
        raise InvalidAwaSetting(_key("PERIODIC"), f"needs croniter: pip install croniter ({exc})") from None
    opts = {k: v for k, v in options.items() if k not in ("cron", "task", "args")}
    if "task" in options and not resolve:
        opts["kind"] = "awa_django.unresolved_task"
    elif "task" in options:
        from .tasks import resolve_task

        task = resolve_task(options["task"], key=_key("PERIODIC", name, "task"))
        opts["kind"] = task.kind
        opts.setdefault("queue", task.queue)
        opts.setdefault("priority", task.priority)
        opts.setdefault("max_attempts", task.max_attempts)
    args = options.get("args", {})
    if not isinstance(args, Mapping):
        raise InvalidAwaSetting(_key("PERIODIC", name, "args"), f"must be a dict of JSON values, got {args!r}")
    try:
        return PeriodicJob(name, options["cron"], dict(args), **opts)
    except ValidationError as exc:
        field_name = {"cron_expr": "cron", "name": ""}.get(exc.field, exc.field)
        path = ("PERIODIC", name, field_name.split(".")[0]) if field_name else ("PERIODIC", name)
        raise InvalidAwaSetting(_key(*path), exc.message) from None


def parse_settings(raw: Any) -> AwaSettings:
    """Validate an ``AWA`` dict (``None``: every default)."""
    raw = {} if raw is None else _mapping(raw)
    _unknown(raw, TOP_LEVEL_KEYS)
    database = raw.get("DATABASE", DEFAULT_DATABASE)
    if not isinstance(database, str) or not database:
        raise InvalidAwaSetting(_key("DATABASE"), f"must be a database alias (a string), got {database!r}")
    if database not in django_settings.DATABASES:
        known = ", ".join(repr(a) for a in django_settings.DATABASES) or "none"
        raise InvalidAwaSetting(_key("DATABASE"), f"{database!r} is not in settings.DATABASES (aliases: {known})")
    url = raw.get("DATABASE_URL")
    if url is not None and (not isinstance(url, str) or not url.startswith(("postgres://", "postgresql://"))):
        raise InvalidAwaSetting(_key("DATABASE_URL"), f"must be a postgresql:// URL, got {url!r}")
    modules = raw.get("TASK_MODULES", ())
    if isinstance(modules, str) or not all(isinstance(m, str) for m in modules):
        raise InvalidAwaSetting(_key("TASK_MODULES"), f"must be a list of module paths, got {modules!r}")
    return AwaSettings(
        database=database,
        database_url=url,
        queues=_queues(raw.get("QUEUES", DEFAULT_QUEUES)),
        periodic=_periodic(raw.get("PERIODIC", {})),
        worker=_worker(raw.get("WORKER", {}), raw.get("RETENTION", {})),
        task_modules=tuple(modules),
    )


_cached: AwaSettings | None = None


def get_settings() -> AwaSettings:
    """The validated ``settings.AWA`` (cached; reset when a test overrides ``AWA``)."""
    global _cached
    if _cached is None:
        _cached = parse_settings(getattr(django_settings, "AWA", None))
    return _cached


@receiver(setting_changed)
def _reset(*, setting: str, **kwargs: Any) -> None:
    global _cached
    if setting in ("AWA", "DATABASES"):
        _cached = None
