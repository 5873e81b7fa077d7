"""One transaction handle per supported connection type, for the conformance suite.

Each handle opens its own connection the way an application would, and
exposes the same async steps so one suite covers every driver: write an app
row, enqueue, commit / roll back, and roll back a savepoint.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import awa_bridge

from .dbutil import with_driver

APP_INSERT = "INSERT INTO app_orders (note) VALUES (%(note)s)"


def sync_result(value: Any) -> Any:
    """What a sync call returned, checked: a result, never an awaitable that would drop the job."""
    assert not inspect.isawaitable(value), f"a sync connection got an awaitable back: {value!r}"
    return value


class Handle:
    """Async facade over one driver; subclasses implement the steps."""

    name = ""
    #: Whether the connection's statements are awaited: the documented async
    #: twin of an operation is called on it, the sync name otherwise.
    is_async = True
    conn: Any

    async def call(self, sync_fn: Callable[..., Any], async_fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """``sync_fn(conn, ...)`` on a sync connection (never an awaitable back), else ``await async_fn(conn, ...)``."""
        if self.is_async:
            return await async_fn(self.conn, *args, **kwargs)
        return sync_result(sync_fn(self.conn, *args, **kwargs))

    async def open(self, url: str) -> None: ...
    async def close(self) -> None: ...
    async def begin(self) -> None: ...
    async def commit(self) -> None: ...
    async def rollback(self) -> None: ...
    async def app_row(self, note: str) -> None: ...
    async def insert(self, args: Any, **opts: Any) -> awa_bridge.Job: ...
    async def insert_many(self, jobs: list[Any], **opts: Any) -> awa_bridge.InsertManyResult: ...

    @asynccontextmanager
    async def savepoint_rolled_back(self) -> AsyncIterator[None]:
        """Run the body in a savepoint that is then rolled back."""
        yield


class AsyncpgHandle(Handle):
    name = "asyncpg"

    async def open(self, url: str) -> None:
        import asyncpg

        self.conn = await asyncpg.connect(url)

    async def close(self) -> None:
        await self.conn.close()

    async def begin(self) -> None:
        self.tx = self.conn.transaction()
        await self.tx.start()

    async def commit(self) -> None:
        await self.tx.commit()

    async def rollback(self) -> None:
        await self.tx.rollback()

    async def app_row(self, note: str) -> None:
        await self.conn.execute("INSERT INTO app_orders (note) VALUES ($1)", note)

    async def insert(self, args: Any, **opts: Any) -> awa_bridge.Job:
        return await awa_bridge.insert_job(self.conn, args, **opts)

    async def insert_many(self, jobs: list[Any], **opts: Any) -> awa_bridge.InsertManyResult:
        return await awa_bridge.insert_many(self.conn, jobs, **opts)

    @asynccontextmanager
    async def savepoint_rolled_back(self) -> AsyncIterator[None]:
        sp = self.conn.transaction()
        await sp.start()
        yield
        await sp.rollback()


class AsyncpgPoolHandle(AsyncpgHandle):
    """A connection acquired from an asyncpg pool (a PoolConnectionProxy)."""

    name = "asyncpg-pool"

    async def open(self, url: str) -> None:
        import asyncpg

        self.pool = await asyncpg.create_pool(url, min_size=1, max_size=1)
        self.conn = await self.pool.acquire()

    async def close(self) -> None:
        await self.pool.release(self.conn)
        await self.pool.close()


class PsycopgHandle(Handle):
    name = "psycopg"
    is_async = False

    async def open(self, url: str) -> None:
        import psycopg

        self.conn = psycopg.connect(url)

    async def close(self) -> None:
        self.conn.close()

    async def begin(self) -> None:
        pass  # psycopg opens a transaction on the first statement

    async def commit(self) -> None:
        self.conn.commit()

    async def rollback(self) -> None:
        self.conn.rollback()

    async def app_row(self, note: str) -> None:
        self.conn.execute(APP_INSERT, {"note": note})

    async def insert(self, args: Any, **opts: Any) -> awa_bridge.Job:
        return sync_result(awa_bridge.insert_job(self.conn, args, **opts))

    async def insert_many(self, jobs: list[Any], **opts: Any) -> awa_bridge.InsertManyResult:
        return sync_result(awa_bridge.insert_many(self.conn, jobs, **opts))

    @asynccontextmanager
    async def savepoint_rolled_back(self) -> AsyncIterator[None]:
        import psycopg

        with self.conn.transaction():
            yield
            raise psycopg.Rollback()


class PsycopgAsyncHandle(Handle):
    name = "psycopg-async"

    async def open(self, url: str) -> None:
        import psycopg

        self.conn = await psycopg.AsyncConnection.connect(url)

    async def close(self) -> None:
        await self.conn.close()

    async def begin(self) -> None:
        pass

    async def commit(self) -> None:
        await self.conn.commit()

    async def rollback(self) -> None:
        await self.conn.rollback()

    async def app_row(self, note: str) -> None:
        await self.conn.execute(APP_INSERT, {"note": note})

    async def insert(self, args: Any, **opts: Any) -> awa_bridge.Job:
        return await awa_bridge.insert_job(self.conn, args, **opts)

    async def insert_many(self, jobs: list[Any], **opts: Any) -> awa_bridge.InsertManyResult:
        return await awa_bridge.insert_many(self.conn, jobs, **opts)

    @asynccontextmanager
    async def savepoint_rolled_back(self) -> AsyncIterator[None]:
        import psycopg

        async with self.conn.transaction():
            yield
            raise psycopg.Rollback()


class SQLAlchemyHandle(Handle):
    """Sync SQLAlchemy on psycopg 3 or psycopg2 (what a plain ``postgresql://`` URL picks on SQLAlchemy
    2.0, and what many existing applications run on): a Connection, a Session or a scoped_session."""

    is_async = False

    def __init__(self, kind: str, dialect: str = "psycopg") -> None:
        self.kind = kind
        self.dialect = dialect
        self.name = f"sqlalchemy-{kind}" + ("" if dialect == "psycopg" else f"-{dialect}")

    async def open(self, url: str) -> None:
        from sqlalchemy import create_engine
        from sqlalchemy.orm import Session, scoped_session, sessionmaker

        self.engine = create_engine(with_driver(url, self.dialect))
        if self.kind == "session":
            self.conn = Session(self.engine)
        elif self.kind == "scoped-session":
            self.conn = scoped_session(sessionmaker(self.engine))
        else:
            self.conn = self.engine.connect()

    async def close(self) -> None:
        if self.kind == "scoped-session":
            self.conn.remove()
        else:
            self.conn.close()
        self.engine.dispose()

    async def begin(self) -> None:
        self.tx = self.conn.begin()

    async def commit(self) -> None:
        self.tx.commit()

    async def rollback(self) -> None:
        self.tx.rollback()

    async def app_row(self, note: str) -> None:
        from sqlalchemy import text

        self.conn.execute(text("INSERT INTO app_orders (note) VALUES (:note)"), {"note": note})

    async def insert(self, args: Any, **opts: Any) -> awa_bridge.Job:
        return sync_result(awa_bridge.insert_job(self.conn, args, **opts))

    async def insert_many(self, jobs: list[Any], **opts: Any) -> awa_bridge.InsertManyResult:
        return sync_result(awa_bridge.insert_many(self.conn, jobs, **opts))

    @asynccontextmanager
    async def savepoint_rolled_back(self) -> AsyncIterator[None]:
        nested = self.conn.begin_nested()
        yield
        nested.rollback()


class SQLAlchemyAsyncHandle(Handle):
    """Async SQLAlchemy on asyncpg or psycopg: an AsyncConnection, AsyncSession or async_scoped_session."""

    def __init__(self, kind: str, dialect: str) -> None:
        self.kind = kind
        self.dialect = dialect
        self.name = f"sqlalchemy-async-{kind}-{dialect}"

    async def open(self, url: str) -> None:
        from sqlalchemy.ext.asyncio import AsyncSession, async_scoped_session, async_sessionmaker, create_async_engine

        self.engine = create_async_engine(with_driver(url, self.dialect))
        if self.kind == "session":
            self.conn = AsyncSession(self.engine)
        elif self.kind == "scoped-session":
            # One scope for the whole test: pytest-asyncio may run the fixture
            # and the test body in different tasks, which would be different
            # sessions under the usual scopefunc=asyncio.current_task.
            self.conn = async_scoped_session(async_sessionmaker(self.engine), scopefunc=lambda: self)
        else:
            self.conn = await self.engine.connect()

    async def close(self) -> None:
        if self.kind == "scoped-session":
            await self.conn.remove()
        else:
            await self.conn.close()
        await self.engine.dispose()

    async def begin(self) -> None:
        self.tx = self.conn.begin()
        await self.tx.start()

    async def commit(self) -> None:
        await self.tx.commit()

    async def rollback(self) -> None:
        await self.tx.rollback()

    async def app_row(self, note: str) -> None:
        from sqlalchemy import text

        await self.conn.execute(text("INSERT INTO app_orders (note) VALUES (:note)"), {"note": note})

    async def insert(self, args: Any, **opts: Any) -> awa_bridge.Job:
        return await awa_bridge.insert_job(self.conn, args, **opts)

    async def insert_many(self, jobs: list[Any], **opts: Any) -> awa_bridge.InsertManyResult:
        return await awa_bridge.insert_many(self.conn, jobs, **opts)

    @asynccontextmanager
    async def savepoint_rolled_back(self) -> AsyncIterator[None]:
        nested = self.conn.begin_nested()
        await nested.start()
        yield
        await nested.rollback()


class DjangoHandle(Handle):
    """Django's default connection inside transaction.atomic()."""

    name = "django"
    is_async = False

    async def open(self, url: str) -> None:
        from django.db import connections

        # The concrete wrapper, not the context-local proxy: setup and teardown
        # may run in different async contexts, and close() must reach this one.
        self.conn = connections["default"]

    async def close(self) -> None:
        self.conn.close()

    async def begin(self) -> None:
        from django.db import transaction

        self.atomic = transaction.atomic()
        self.atomic.__enter__()

    async def commit(self) -> None:
        self.atomic.__exit__(None, None, None)

    async def rollback(self) -> None:
        from django.db import transaction

        transaction.set_rollback(True)
        self.atomic.__exit__(None, None, None)

    async def app_row(self, note: str) -> None:
        with self.conn.cursor() as cursor:
            cursor.execute(APP_INSERT, {"note": note})

    async def insert(self, args: Any, **opts: Any) -> awa_bridge.Job:
        return sync_result(awa_bridge.insert_job(self.conn, args, **opts))

    async def insert_many(self, jobs: list[Any], **opts: Any) -> awa_bridge.InsertManyResult:
        return sync_result(awa_bridge.insert_many(self.conn, jobs, **opts))

    @asynccontextmanager
    async def savepoint_rolled_back(self) -> AsyncIterator[None]:
        from django.db import transaction

        inner = transaction.atomic()
        inner.__enter__()
        yield
        transaction.set_rollback(True)
        inner.__exit__(None, None, None)


HANDLES: dict[str, Callable[[], Handle]] = {
    "asyncpg": AsyncpgHandle,
    "asyncpg-pool": AsyncpgPoolHandle,
    "psycopg": PsycopgHandle,
    "psycopg-async": PsycopgAsyncHandle,
    "sqlalchemy-connection": lambda: SQLAlchemyHandle("connection"),
    "sqlalchemy-session": lambda: SQLAlchemyHandle("session"),
    "sqlalchemy-scoped-session": lambda: SQLAlchemyHandle("scoped-session"),
    "sqlalchemy-connection-psycopg2": lambda: SQLAlchemyHandle("connection", "psycopg2"),
    "sqlalchemy-session-psycopg2": lambda: SQLAlchemyHandle("session", "psycopg2"),
    "sqlalchemy-async-connection-asyncpg": lambda: SQLAlchemyAsyncHandle("connection", "asyncpg"),
    "sqlalchemy-async-session-asyncpg": lambda: SQLAlchemyAsyncHandle("session", "asyncpg"),
    "sqlalchemy-async-scoped-session-asyncpg": lambda: SQLAlchemyAsyncHandle("scoped-session", "asyncpg"),
    "sqlalchemy-async-connection-psycopg": lambda: SQLAlchemyAsyncHandle("connection", "psycopg"),
    "sqlalchemy-async-session-psycopg": lambda: SQLAlchemyAsyncHandle("session", "psycopg"),
    "django": DjangoHandle,
}
