"""A database router for an awa schema on a non-default alias.

``AWA = {"DATABASE": "jobs"}`` with ``DATABASE_ROUTERS = ["awa_django.routers.AwaRouter"]``:
the awa models read from ``jobs``, and the awa migrations run only there, so
``manage.py migrate --database jobs`` installs the schema and ``manage.py
migrate`` (on ``default``) leaves it out. Other apps are not routed (the
router has no opinion about them).
"""

from __future__ import annotations

from typing import Any

APP_LABEL = "awa_django"


class AwaRouter:
    def _alias(self) -> str:
        from .conf import get_settings

        return get_settings().database

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return self._alias() if model._meta.app_label == APP_LABEL else None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return self._alias() if model._meta.app_label == APP_LABEL else None

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool | None:
        return None

    def allow_migrate(self, db: str, app_label: str, model_name: str | None = None, **hints: Any) -> bool | None:
        if app_label == APP_LABEL:
            return db == self._alias()
        return None
