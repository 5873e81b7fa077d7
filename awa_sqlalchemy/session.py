"""Enqueue on a SQLAlchemy session or connection, inside the caller's transaction.

These are thin, typed front doors to ``awa_bridge.insert_job`` and friends:
validation, kind derivation, unique keys and the SQL all stay in the bridge.
The job is written with one statement on the session's own connection, so it
commits or rolls back with the application's rows (savepoints from
``begin_nested()`` included). Nothing here begins, commits or flushes.

Flush ordering: ``session.add(order)`` assigns ``order.id`` only when the
session flushes, and enqueueing does not flush for you (the args are built
before the call). When a job refers to a row added in the same session,
flush first::

    with Session(engine) as session, session.begin():
        order = Order(customer=email)
        session.add(order)
        session.flush()                       # INSERT ... RETURNING id: order.id is set
        insert_job(session, SendOrderConfirmation(order_id=order.id))

(``await session.flush()`` on an ``AsyncSession``.) The flush only sends the
INSERT; the order and the job still commit together.
"""

from __future__ import annotations

from collections.abc import Coroutine, Iterable
from typing import TYPE_CHECKING, Any, overload

import awa_bridge
from awa_bridge import InsertManyResult, Job, UnsupportedConnection

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session
    from sqlalchemy.orm import Session, scoped_session

    SyncTarget = Session | Connection | scoped_session[Any]
    AsyncTarget = AsyncSession | AsyncConnection | async_scoped_session[Any]

__all__ = ["insert_job", "insert_job_sync", "insert_many", "insert_many_sync"]


def _target(session: Any) -> SyncTarget | AsyncTarget:
    """``session`` itself when it is a SQLAlchemy session or connection (sync or async), else a clear error."""
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session
    from sqlalchemy.orm import Session, scoped_session

    supported = (Session, Connection, scoped_session, AsyncSession, AsyncConnection, async_scoped_session)
    if isinstance(session, supported):
        return session
    raise UnsupportedConnection(
        f"awa_sqlalchemy needs a SQLAlchemy Session, Connection, AsyncSession or AsyncConnection, got "
        f"{type(session).__module__}.{type(session).__qualname__}; for other connections use awa_bridge.insert_job"
    )


@overload
def insert_job(session: AsyncTarget, args: Any, **opts: Any) -> Coroutine[Any, Any, Job]: ...
@overload
def insert_job(session: SyncTarget, args: Any, **opts: Any) -> Job: ...
def insert_job(session: Any, args: Any, **opts: Any) -> Job | Coroutine[Any, Any, Job]:
    """Insert one job on a session or connection, in its current transaction.

    On a ``Session`` / ``Connection`` / ``scoped_session`` the job is written
    now and returned; on an ``AsyncSession`` / ``AsyncConnection`` the call
    returns an awaitable (``await insert_job(session, args)``). Works on the
    psycopg and asyncpg dialects. ``args`` and the options (``queue``,
    ``priority``, ``max_attempts``, ``run_at``, ``metadata``, ``tags``,
    ``unique``, ``ordering_key``, ``kind``) are those of
    ``awa_bridge.insert_job``. Returns the inserted row as an
    ``awa_bridge.Job`` (a plain dataclass; ``session.get(awa_sqlalchemy.Job,
    job.id)`` loads the mapped object). A duplicate unique key raises
    ``awa_bridge.UniqueConflict`` and, like any failed statement, aborts the
    transaction: wrap the call in ``session.begin_nested()`` to carry on.
    """
    return awa_bridge.insert_job(_target(session), args, **opts)


def insert_job_sync(session: SyncTarget, args: Any, **opts: Any) -> Job:
    """``insert_job`` for sync sessions only (an async one is refused with a hint)."""
    _target(session)
    return awa_bridge.insert_job_sync(session, args, **opts)


@overload
def insert_many(session: AsyncTarget, jobs: Iterable[Any], **opts: Any) -> Coroutine[Any, Any, InsertManyResult]: ...
@overload
def insert_many(session: SyncTarget, jobs: Iterable[Any], **opts: Any) -> InsertManyResult: ...
def insert_many(
    session: Any, jobs: Iterable[Any], **opts: Any
) -> InsertManyResult | Coroutine[Any, Any, InsertManyResult]:
    """Insert many jobs with COPY on a session or connection, in its transaction.

    ``jobs`` holds args objects sharing ``opts``, or ``awa_bridge.prepare_job``
    values. Unique duplicates are skipped and counted in the result, not
    raised. COPY runs on the session's underlying psycopg (or, async, asyncpg)
    connection, inside the transaction SQLAlchemy began. Sync sessions return
    the result; async ones an awaitable, as ``insert_job``.
    """
    return awa_bridge.insert_many(_target(session), jobs, **opts)


def insert_many_sync(session: SyncTarget, jobs: Iterable[Any], **opts: Any) -> InsertManyResult:
    """``insert_many`` for sync sessions only (psycopg 3 dialect)."""
    _target(session)
    return awa_bridge.insert_many_sync(session, jobs, **opts)
