"""System checks (``manage.py check``; ``check --database ALIAS`` adds the database ones).

* ``awa_django.E001`` the awa alias is not PostgreSQL.
* ``awa_django.W001`` the awa alias is not ``default`` and no router sends the awa app there.
* ``awa_django.W002`` the worker's driver (asyncpg, psycopg_pool) is not installed.
* ``awa_django.W003`` (database) the database lacks migrations this package ships. A warning,
  as Django's own unapplied migrations are: ``migrate`` runs the database checks first, and an
  error here would block the one command that fixes it.
* ``awa_django.E004`` an ``AWA['TASK_MODULES']`` entry does not import (the worker would crash on it).
* ``awa_django.E005`` an ``AWA['PERIODIC']`` entry's ``task`` does not import, or is not an
  ``@awa_django.task`` (checked here, not when Django starts, so ``startapp`` works before the module exists).
* ``awa_django.W004`` an ``@awa_django.task`` or an ``AWA['PERIODIC']`` entry enqueues on a queue
  ``AWA['QUEUES']`` does not declare: no ``awa_worker`` runs it (unless given with ``--queue``).
* ``awa_django.E003`` (database) the database has migrations this package does not know,
  or an applied file was edited, or it was migrated by the real Awa.
"""

from __future__ import annotations

import contextlib
import difflib
import importlib.util
from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register

from .conf import get_settings
from .db import migrate_command
from .errors import InvalidTaskPath
from .tasks import resolve_task


@register()
def check_configuration(app_configs: Any = None, **kwargs: Any) -> Iterable[CheckMessage]:
    awa = get_settings()
    messages: list[CheckMessage] = []
    engine = settings.DATABASES[awa.database].get("ENGINE", "")
    if "postgresql" not in engine and "postgis" not in engine:
        messages.append(
            Error(
                f"AWA['DATABASE'] is {awa.database!r}, whose ENGINE is {engine!r}; awa needs PostgreSQL",
                hint="Point AWA['DATABASE'] at a django.db.backends.postgresql alias.",
                id="awa_django.E001",
            )
        )
    if awa.database != "default" and not _routed(awa.database):
        messages.append(
            Warning(
                f"AWA['DATABASE'] is {awa.database!r} but no database router sends the awa_django app there",
                hint=f"Add 'awa_django.routers.AwaRouter' to DATABASE_ROUTERS, then `{migrate_command(awa.database)}`.",
                id="awa_django.W001",
            )
        )
    missing = [m for m in ("asyncpg", "psycopg_pool") if importlib.util.find_spec(m) is None]
    if missing:
        messages.append(
            Warning(
                f"the worker needs {' and '.join(missing)}, which {'is' if len(missing) == 1 else 'are'} not "
                "installed (enqueueing works without it)",
                hint=f"pip install {' '.join('psycopg-pool' if m == 'psycopg_pool' else m for m in missing)}"
                " (awa-bridge's extras [asyncpg,psycopg])",
                id="awa_django.W002",
            )
        )
    return messages


@register()
def check_task_modules(app_configs: Any = None, **kwargs: Any) -> Iterable[CheckMessage]:
    """Every ``AWA['TASK_MODULES']`` entry imports (as Django's URL checks import ROOT_URLCONF)."""
    import importlib

    messages: list[CheckMessage] = []
    for module in get_settings().task_modules:
        try:
            importlib.import_module(module)
        except Exception as exc:
            messages.append(
                Error(
                    f"AWA['TASK_MODULES'] entry {module!r} cannot be imported: {type(exc).__name__}: {exc}",
                    hint="Give the dotted path of a module that defines @awa_django.task functions, "
                    "or remove the entry.",
                    id="awa_django.E004",
                )
            )
    return messages


@register()
def check_periodic_tasks(app_configs: Any = None, **kwargs: Any) -> Iterable[CheckMessage]:
    """Every ``AWA['PERIODIC']`` ``task`` is an importable ``@awa_django.task`` (the worker resolves it at start)."""
    messages: list[CheckMessage] = []
    for name, options in get_settings().periodic.items():
        if "task" not in options:
            continue
        key = f"AWA['PERIODIC'][{name!r}]['task']"
        try:
            resolve_task(options["task"], key=key)
        except InvalidTaskPath as exc:
            problem = str(exc)
        except Exception as exc:  # the module exists but fails while importing
            problem = f"{key}: cannot import {options['task']!r}: {type(exc).__name__}: {exc}"
        else:
            continue
        messages.append(
            Error(
                problem,
                hint="Give the dotted path of an @awa_django.task function (module.function), "
                "or 'kind' for any other handler.",
                id="awa_django.E005",
            )
        )
    return messages


@register()
def check_queues_declared(app_configs: Any = None, **kwargs: Any) -> Iterable[CheckMessage]:
    """Every task and PERIODIC entry enqueues on a queue of ``AWA['QUEUES']`` (what ``awa_worker`` runs)."""
    from awa_bridge.enqueue import DEFAULT_QUEUE

    from .tasks import TASKS

    awa = get_settings()
    declared = [q.name for q in awa.queues]
    _import_tasks(awa.task_modules)
    where: list[tuple[str, str]] = []
    for name, options in awa.periodic.items():
        if "task" in options:
            with contextlib.suppress(Exception):  # E005 reports it
                resolve_task(options["task"])  # registers it (its own queue is checked with the tasks)
        queue = options.get("queue", DEFAULT_QUEUE if "kind" in options else None)
        if queue is not None:
            where.append((f"AWA['PERIODIC'][{name!r}]", queue))
    where += [(f"@awa_django.task {kind!r}", task.queue) for kind, task in sorted(TASKS.items())]
    messages: list[CheckMessage] = []
    for what, queue in where:
        if queue in declared:
            continue
        close = difflib.get_close_matches(queue, declared, n=1)
        guess = f"; did you mean {close[0]!r}?" if close else ""
        messages.append(
            Warning(
                f"{what} enqueues on queue {queue!r}, which AWA['QUEUES'] does not declare "
                f"({', '.join(repr(q) for q in declared)}){guess}",
                hint=f"No awa_worker runs it, so its jobs wait: fix the name, add {queue!r} to AWA['QUEUES'], "
                f"or run a worker with `manage.py awa_worker --queue {queue}`.",
                id="awa_django.W004",
            )
        )
    return messages


def _import_tasks(task_modules: Iterable[str]) -> None:
    """Each installed app's ``tasks`` module and ``AWA['TASK_MODULES']``, as the worker imports them.

    One that fails to import is skipped: E004 reports a TASK_MODULES entry, and the worker the rest.
    """
    import importlib

    from django.apps import apps
    from django.utils.module_loading import module_has_submodule

    modules = [f"{app.name}.tasks" for app in apps.get_app_configs() if module_has_submodule(app.module, "tasks")]
    for module in [*modules, *task_modules]:
        try:
            importlib.import_module(module)
        except Exception:
            continue


def _routed(alias: str) -> bool:
    from django.db import router

    return router.db_for_write(_job_model()) == alias


def _job_model() -> Any:
    from .models import Job

    return Job


@register(Tags.database)
def check_migrations(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> Iterable[CheckMessage]:
    """The applied shared migrations match the packaged ones (only with ``--database``)."""
    from django.db import connections, transaction

    from awa_bridge.errors import ForeignSchema, MigrationChecksumMismatch
    from awa_bridge.migrations import load_migrations, pending_migrations

    awa = get_settings()
    if not databases or awa.database not in databases:
        return []
    connection = connections[awa.database]
    try:
        with transaction.atomic(using=awa.database):
            connection.ensure_connection()
            pending = pending_migrations(connection.connection, load_migrations())
    except (ForeignSchema, MigrationChecksumMismatch) as exc:
        return [Error(str(exc), id="awa_django.E003")]
    if pending:
        names = ", ".join(m.name for m in pending)
        return [
            Warning(
                f"the awa schema on {awa.database!r} lacks {names}",
                hint=f"Run `{migrate_command(awa.database)}` (it applies them).",
                id="awa_django.W003",
            )
        ]
    return []
