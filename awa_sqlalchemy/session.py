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
        insert_job_sync(session, SendOrderConfirmation(order_id=order.id))

(``await session.flush()`` on an ``AsyncSession``.) The flush only sends the
INSERT; the order and the job still commit together.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import awa_bridge
from awa_bridge import InsertManyResult, UnsupportedConnection

if TYPE_CHECKING:
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session
    from sqlalchemy.orm import Session, scoped_session

    SyncTarget = Session | Connection | scoped_session[Any]
    AsyncTarget = AsyncSession | AsyncConnection | async_scoped_session[Any]

__all__ = ["insert_job", "insert_job_sync", "insert_many", "insert_many_sync"]


def _sync_target(session: Any) -> Any:
    """The ``Session`` / ``Connection`` to run on, or a clear error for anything else."""
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session
    from sqlalchemy.orm import Session, scoped_session

    if isinstance(session, scoped_session):
        session = session()  # the registry's Session for this thread
    if isinstance(session, Session | Connection):
        return session
    if isinstance(session, AsyncSession | AsyncConnection | async_scoped_session):
        raise UnsupportedConnection(
            f"{type(session).__name__} is asynchronous: use `await awa_sqlalchemy.insert_job(...)` "
            "(or insert_many) instead of the _sync form"
        )
    raise UnsupportedConnection(
        f"awa_sqlalchemy needs a SQLAlchemy Session or Connection, got {type(session).__module__}."
        f"{type(session).__qualname__}; for other connections use awa_bridge.insert_job_sync"
    )


def _async_target(session: Any) -> Any:
    """The ``AsyncSession`` / ``AsyncConnection`` to run on, or a clear error for anything else."""
    from sqlalchemy.engine import Connection
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncSession, async_scoped_session
    from sqlalchemy.orm import Session, scoped_session

    if isinstance(session, async_scoped_session):
        session = session()  # the registry's AsyncSession for this scope
    if isinstance(session, AsyncSession | AsyncConnection):
        return session
    if isinstance(session, Session | Connection | scoped_session):
        raise UnsupportedConnection(
            f"{type(session).__name__} is synchronous: use awa_sqlalchemy.insert_job_sync(...) "
            "(or insert_many_sync) instead of the async form"
        )
    raise UnsupportedConnection(
        f"awa_sqlalchemy needs a SQLAlchemy AsyncSession or AsyncConnection, got {type(session).__module__}."
        f"{type(session).__qualname__}; for other connections use awa_bridge.insert_job"
    )


async def insert_job(session: AsyncTarget, args: Any, **opts: Any) -> awa_bridge.Job:
    """Insert one job on an ``AsyncSession`` / ``AsyncConnection``, in its current transaction.

    Works on the asyncpg and the psycopg dialects. ``args`` and the options
    (``queue``, ``priority``, ``max_attempts``, ``run_at``, ``metadata``,
    ``tags``, ``unique``, ``ordering_key``, ``kind``) are those of
    ``awa_bridge.insert_job``. Returns the inserted row as an
    ``awa_bridge.Job`` (a plain dataclass; ``await session.get(awa_sqlalchemy.Job,
    job.id)`` loads the mapped object). A duplicate unique key raises
    ``awa_bridge.UniqueConflict`` and, like any failed statement, aborts the
    transaction: wrap the call in ``session.begin_nested()`` to carry on.
    """
    return await awa_bridge.insert_job(_async_target(session), args, **opts)


def insert_job_sync(session: SyncTarget, args: Any, **opts: Any) -> awa_bridge.Job:
    """Insert one job on a ``Session`` / ``Connection``, in its current transaction.

    See ``insert_job`` for the arguments and errors. A ``scoped_session`` is
    accepted and resolved to the current thread's ``Session``.
    """
    return awa_bridge.insert_job_sync(_sync_target(session), args, **opts)


async def insert_many(session: AsyncTarget, jobs: Iterable[Any], **opts: Any) -> InsertManyResult:
    """Insert many jobs with COPY on an ``AsyncSession`` / ``AsyncConnection``, in its transaction.

    ``jobs`` holds args objects sharing ``opts``, or ``awa_bridge.prepare_job``
    values. Unique duplicates are skipped and counted in the result, not
    raised. COPY runs on the session's underlying asyncpg or psycopg
    connection, inside the transaction SQLAlchemy began.
    """
    return await awa_bridge.insert_many(_async_target(session), jobs, **opts)


def insert_many_sync(session: SyncTarget, jobs: Iterable[Any], **opts: Any) -> InsertManyResult:
    """Insert many jobs with COPY on a ``Session`` / ``Connection`` (psycopg 3 dialect), in its transaction."""
    return awa_bridge.insert_many_sync(_sync_target(session), jobs, **opts)
