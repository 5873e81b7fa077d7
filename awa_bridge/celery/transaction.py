"""Where ``delay()`` / ``apply_async()`` write the job: the caller's transaction when there is one.

In order:

1. ``connection=`` — any connection or session the bridge supports (asyncpg
   and async SQLAlchemy/psycopg through ``aapply_async``); the job commits or
   rolls back with it.
2. ``using=`` — a named connection resolved by a provider (with Django, a
   ``DATABASES`` alias).
3. The current transaction, as the registered providers see it: with Django,
   an open ``transaction.atomic()`` block on the awa database.
4. Otherwise the app's own short transaction (one autocommit INSERT).

A provider is a function ``provider(using: str | None) -> connection | None``.
``awa_django.celery`` registers one for the ``AWA['DATABASE']`` alias. While
none is registered a built-in fallback covers Django's ``default`` alias, so
that ``delay()`` inside ``atomic()`` is never silently written outside the
transaction. It never imports Django: it looks only when the process already
has ``django.db`` loaded.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any

Provider = Callable[[str | None], Any]

_providers: list[Provider] = []


def register_transaction_provider(provider: Provider) -> Provider:
    """Add a provider, consulted before those registered earlier (returns it, to use as a decorator)."""
    if provider not in _providers:
        _providers.insert(0, provider)
    return provider


def unregister_transaction_provider(provider: Provider) -> None:
    if provider in _providers:
        _providers.remove(provider)


def django_provider(default_alias: Callable[[], str] | str = "default") -> Provider:
    """A provider for Django: ``using`` names an alias; without it, the alias's open atomic block.

    Only PostgreSQL aliases count. Django is imported only if the process has
    already imported it.
    """

    def provide(using: str | None) -> Any:
        if "django.db" not in sys.modules:
            return None
        from django.conf import settings

        if not settings.configured:
            return None
        from django.db import connections

        alias = using or (default_alias() if callable(default_alias) else default_alias)
        if alias not in settings.DATABASES:
            return None
        conn = connections[alias]
        if conn.vendor != "postgresql":
            return None
        if using is not None or conn.in_atomic_block:
            return conn
        return None

    return provide


_fallback = django_provider("default")


def current_connection(using: str | None = None) -> Any:
    """The connection a task call should write on, or None for the app's own transaction.

    ``using=""`` is refused (``options.check_using``): a provider would read it as "not given".
    """
    from .options import check_using

    check_using({"using": using})
    for provider in _providers or (_fallback,):
        conn = provider(using)
        if conn is not None:
            return conn
    if using is not None:
        from .errors import ImproperlyConfigured

        raise ImproperlyConfigured(
            f"using={using!r}: no transaction provider knows that name (with Django, add 'awa_django' to "
            "INSTALLED_APPS and name an alias of settings.DATABASES); pass connection=... instead"
        )
    return None
