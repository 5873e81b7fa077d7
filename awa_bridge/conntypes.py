"""The connection types the bridge accepts, for type checkers.

``SyncConnection`` and ``AsyncConnection`` are what the overloads of
``insert_job`` / ``insert_many`` are written against: a type checker then
knows that ``insert_job(session, args)`` returns a ``Job`` on a sync
``Session`` and an awaitable on an ``AsyncSession``, and flags an
unsupported object. At run time they are plain ``object`` aliases, so
importing this module imports no driver or framework.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    import asyncpg
    import psycopg
    from asyncpg.pool import PoolConnectionProxy
    from django.db.backends.base.base import BaseDatabaseWrapper
    from sqlalchemy.engine import Connection as SAConnection
    from sqlalchemy.ext.asyncio import AsyncConnection as SAAsyncConnection
    from sqlalchemy.ext.asyncio import AsyncSession, async_scoped_session
    from sqlalchemy.orm import Session, scoped_session

    SyncConnection: TypeAlias = (
        psycopg.Connection[Any] | SAConnection | Session | scoped_session[Any] | BaseDatabaseWrapper
    )
    AsyncConnection: TypeAlias = (
        asyncpg.Connection[Any]
        | PoolConnectionProxy[Any]
        | psycopg.AsyncConnection[Any]
        | SAAsyncConnection
        | AsyncSession
        | async_scoped_session[Any]
    )
else:
    SyncConnection = object
    AsyncConnection = object

__all__ = ["AsyncConnection", "SyncConnection"]
