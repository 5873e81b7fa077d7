"""Celery-compatible tasks in a Django project (``awa_bridge.celery`` with Django's glue).

``proj/celery.py``, as Celery's Django guide has it, with one import changed::

    import os

    from awa_django.celery import Celery  # was: from celery import Celery

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "proj.settings")
    app = Celery("proj")
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.autodiscover_tasks()

and ``from .celery import app as celery_app`` in ``proj/__init__.py``. Then:

* the app's database is the awa alias (``AWA['DATABASE']``, or
  ``AWA['DATABASE_URL']``) unless ``CELERY_DATABASE_URL`` says otherwise;
* ``task.delay()`` inside ``transaction.atomic()`` on that alias writes the
  job on Django's connection, so it commits or rolls back with the block;
  outside one it commits at once (``transaction.on_commit(task.delay)``
  still works as it did with Celery);
* ``autodiscover_tasks()`` without arguments imports each installed app's
  ``tasks`` module;
* ``manage.py awa_worker`` runs every task of the app (each in Django's
  connection handling) and upserts ``CELERY_BEAT_SCHEDULE`` with the
  ``AWA['PERIODIC']`` schedules.
"""

from __future__ import annotations

from typing import Any

from awa_bridge.celery import Awa, current_app, register_transaction_provider
from awa_bridge.celery.transaction import django_provider


def _awa_alias() -> str:
    from .db import awa_alias

    return awa_alias()


#: Django's side of "the current transaction": an open atomic() block on the awa alias.
transaction_provider = register_transaction_provider(django_provider(_awa_alias))


def setup_child() -> None:
    """A ``worker_pool="prefork"`` child process: set Django up (the worker's ``DJANGO_SETTINGS_MODULE``)
    before the task's module, and the models it imports, are imported."""
    import django

    django.setup()


class Celery(Awa):
    """An ``awa_bridge.celery`` app that knows Django: its database, its apps, its settings."""

    child_setup = "awa_django.celery:setup_child"

    @property
    def database_url(self) -> str:
        configured: str | None = self.conf.database_url
        if configured:
            return configured
        from .db import database_url

        return database_url()

    def default_packages(self) -> list[str]:
        from django.apps import apps

        return [config.name for config in apps.get_app_configs()]


def install_celery_tasks(client: Any) -> Any:
    """The ``awa_worker`` hook: register the current app's tasks on ``client`` and its beat schedule.

    The app is the project's ``awa_django.celery.Celery`` app; without one,
    the implicit default app runs the ``@shared_task`` tasks (on the awa
    alias's database). An app of plain ``awa_bridge.celery`` is not taken
    over: it runs on workers of its own. ``CELERY_BEAT_SCHEDULE`` is read
    from Django's settings when the app has no beat schedule of its own
    (``config_from_object`` already copies it). Returns the app, or None when
    there is nothing Celery-style to run.
    """
    from django.conf import settings

    from .tasks import with_django_connections

    app = current_app()
    if not isinstance(app, Celery):
        if not app.implicit:
            return None
        if not app.conf.database_url:
            from .db import database_url

            app.conf.database_url = database_url()  # tasks calling delay() need the database
        app.child_setup = Celery.child_setup
    beat = getattr(settings, "CELERY_BEAT_SCHEDULE", None)
    if beat and not app.conf.beat_schedule:
        app.conf.beat_schedule = beat
    if not app.tasks and not app.conf.beat_schedule:
        return None
    app.install(client, wrap=with_django_connections)
    return app
