"""The app config: settings are validated when Django starts."""

from __future__ import annotations

from django.apps import AppConfig


class AwaConfig(AppConfig):
    name = "awa_django"
    label = "awa_django"
    verbose_name = "Awa job queue"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from . import checks  # noqa: F401  (registers the system checks)
        from .conf import get_settings

        # Raises InvalidAwaSetting (an ImproperlyConfigured) naming the key: a
        # bad AWA dict stops runserver, migrate and awa_worker at startup. Module paths
        # (TASK_MODULES, PERIODIC tasks) are imported by the system checks, not here.
        get_settings()
