"""Pick the adapter for a connection object without importing any framework.

Detection looks at the object's class module, so ``import awa_bridge`` never
imports asyncpg, psycopg, SQLAlchemy or Django.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..errors import UnsupportedConnection
from .base import AsyncDriver, SyncDriver

SUPPORTED = (
    "asyncpg Connection (or one acquired from a Pool), psycopg Connection and AsyncConnection, "
    "SQLAlchemy Connection, Session, AsyncConnection and AsyncSession (scoped or not), "
    "and Django's connection (django.db.connection or connections[alias])"
)


# type(conn) -> its classification: the answer depends on the class alone, and
# enqueue asks once per job.
_CLASSIFIED: dict[type, str] = {}


def _classify(conn: Any) -> str:
    cls = type(conn)
    kind = _CLASSIFIED.get(cls)
    if kind is None:
        kind = _CLASSIFIED[cls] = _classify_type(cls)
    return kind


def _classify_type(cls: type) -> str:
    module = cls.__module__ or ""
    top = module.split(".")[0]
    name = cls.__name__
    if top == "asyncpg" and name in {"Connection", "PoolConnectionProxy"}:
        return "asyncpg"
    if top == "psycopg" and name == "AsyncConnection":
        return "psycopg-async"
    if top == "psycopg" and name == "Connection":
        return "psycopg"
    if top == "sqlalchemy":
        if name in {"AsyncConnection", "AsyncSession"}:
            return "sqlalchemy-async"
        if name in {"Connection", "Session"}:
            return "sqlalchemy"
        if name == "async_scoped_session":
            return "sqlalchemy-async-scoped"
        if name == "scoped_session":
            return "sqlalchemy-scoped"
    if top == "django" or module.startswith("django.") or _is_django_wrapper(cls):
        return "django"
    # Subclasses (for example a Session subclass of the application's own).
    for base in cls.__mro__[1:]:
        base_top = (base.__module__ or "").split(".")[0]
        if base_top == "sqlalchemy" and base.__name__ in {"Session", "Connection"}:
            return "sqlalchemy"
        if base_top == "sqlalchemy" and base.__name__ in {"AsyncSession", "AsyncConnection"}:
            return "sqlalchemy-async"
        if base_top == "psycopg" and base.__name__ in {"Connection", "AsyncConnection"}:
            return "psycopg" if base.__name__ == "Connection" else "psycopg-async"
        if base_top == "asyncpg" and base.__name__ == "Connection":
            return "asyncpg"
    return ""


def _is_django_wrapper(cls: type) -> bool:
    for base in cls.__mro__:
        if base.__module__ == "django.db.backends.base.base" and base.__name__ == "BaseDatabaseWrapper":
            return True
    return False


def _name(conn: Any) -> str:
    return f"{type(conn).__module__}.{type(conn).__qualname__}"


def _unsupported(conn: Any) -> UnsupportedConnection:
    return UnsupportedConnection(f"unsupported connection object {_name(conn)}; supported: {SUPPORTED}")


def wrong_mode(conn: Any, advice: str) -> UnsupportedConnection:
    """A supported connection handed to the other API (an async one to a sync call, or the reverse)."""
    if _classify(conn) in _ASYNC_KINDS:
        return UnsupportedConnection(f"{_name(conn)} is an async connection, and this call needs a sync one: {advice}")
    return UnsupportedConnection(f"{_name(conn)} is a sync connection, and this call needs an async one: {advice}")


_ASYNC_KINDS = frozenset({"asyncpg", "psycopg-async", "sqlalchemy-async", "sqlalchemy-async-scoped"})


def is_async_connection(conn: Any) -> bool:
    """True for the connection types whose statements are awaited (asyncpg, psycopg async, SQLAlchemy async)."""
    return _classify(conn) in _ASYNC_KINDS


def detect_sync(conn: Any) -> SyncDriver:
    """Adapter for a synchronous connection, or a TypeError naming the supported types."""
    make = _SYNC_MAKERS.get(type(conn))
    if make is None:
        make = _SYNC_MAKERS[type(conn)] = _sync_maker(conn)
    return make(conn)


def detect_async(conn: Any) -> AsyncDriver:
    """Adapter for an asynchronous connection, or a TypeError naming the supported types."""
    make = _ASYNC_MAKERS.get(type(conn))
    if make is None:
        make = _ASYNC_MAKERS[type(conn)] = _async_maker(conn)
    return make(conn)


# type(conn) -> how to wrap it: found (and the adapter module imported) once per class, since
# enqueue asks once per job. A class nothing supports is never stored: it raises every time.
_SYNC_MAKERS: dict[type, Callable[[Any], SyncDriver]] = {}
_ASYNC_MAKERS: dict[type, Callable[[Any], AsyncDriver]] = {}


def _sync_maker(conn: Any) -> Callable[[Any], SyncDriver]:
    kind = _classify(conn)
    if kind == "sqlalchemy-scoped":
        from .sqlalchemy import SQLAlchemySync

        return lambda scoped: SQLAlchemySync(scoped())  # the registry's Session for this thread
    if kind == "psycopg":
        from .psycopg import PsycopgSync

        return PsycopgSync
    if kind == "sqlalchemy":
        from .sqlalchemy import SQLAlchemySync

        return SQLAlchemySync
    if kind == "django":
        from .django import DjangoSync

        def django(conn: Any) -> SyncDriver:
            # Checked per connection: the alias's backend is the connection's, not its class's.
            if getattr(conn, "vendor", None) != "postgresql":
                raise UnsupportedConnection(
                    f"Django database {getattr(conn, 'alias', '?')!r} uses the "
                    f"{getattr(conn, 'vendor', '?')} backend; awa needs PostgreSQL"
                )
            return DjangoSync(conn)

        return django
    if kind:
        raise wrong_mode(
            conn,
            "await the async API instead (await insert_job(...)); a call without an async form"
            " needs a sync connection (or a URL where it takes one)",
        )
    raise _unsupported(conn)


def _async_maker(conn: Any) -> Callable[[Any], AsyncDriver]:
    kind = _classify(conn)
    if kind == "sqlalchemy-async-scoped":
        from .sqlalchemy import SQLAlchemyAsync

        return lambda scoped: SQLAlchemyAsync(scoped())  # the registry's AsyncSession for this scope
    if kind == "asyncpg":
        from .asyncpg import Asyncpg

        return Asyncpg
    if kind == "psycopg-async":
        from .psycopg import PsycopgAsync

        return PsycopgAsync
    if kind == "sqlalchemy-async":
        from .sqlalchemy import SQLAlchemyAsync

        return SQLAlchemyAsync
    if kind:
        raise wrong_mode(conn, "call the sync API instead (insert_job(...) without await)")
    raise _unsupported(conn)
