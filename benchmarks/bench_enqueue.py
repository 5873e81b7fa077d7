"""Enqueue benchmark: awa_bridge side by side with bare SQL and peer job queues.

One run, one PostgreSQL server, one throwaway database per system (all
dropped at the end). Two sections:

* single: N iterations of "begin; insert one job; commit" on one connection
  (with ``--autocommit``: of the insert alone, its own transaction);
* bulk:   one call that inserts N jobs (COPY where the system has it).

Every measurement gets a short warm-up, then its tables are emptied and the
timed run starts from an empty queue. Rounds are interleaved (every case once,
then every case again ...) and the table reports the median rate of the
rounds, so slow drift of the machine hits every system alike.

    python benchmarks/bench_enqueue.py --database-url postgresql://postgres@127.0.0.1:5432/postgres

Peers that are not installed are skipped with a note (see requirements.txt).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib.metadata
import json
import logging
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlsplit, urlunsplit

import bench_procs as bp
import psycopg

import awa_bridge
from awa_bridge.sql import QUERIES

KIND = "send_email"
QUEUE = "default"
# The single-enqueue rounds' order is shuffled, the same way in every run.
SHUFFLE_SEED = 20261204
_T = TypeVar("_T")
BARE_INSERT = "INSERT INTO awa.jobs (kind, queue, args) VALUES ($1, $2, $3) RETURNING id"
BARE_INSERT_PSYCOPG = "INSERT INTO awa.jobs (kind, queue, args) VALUES (%s, %s, %s) RETURNING id"
# The statement insert_job sends for a job at every default (an INSERT of kind,
# queue and args returning the id and the two times its Job needs), sent bare with
# parameters made by hand: insert_job over it is the client's own path (validation,
# canonical JSON, the Job); it over the bare INSERT is what the statement adds.
_PLAIN_STATEMENT = QUERIES["insert_plain_job"]
STATEMENT_LABEL = "insert_job's statement, sent bare"
BARE_STATEMENT = _PLAIN_STATEMENT.numeric
BARE_STATEMENT_PSYCOPG = _PLAIN_STATEMENT.pyformat  # named parameters: kind, queue, args


@dataclass
class SendEmail:
    """The job every system enqueues (kind ``send_email``)."""

    to: str
    subject: str
    n: int


def job_dict(n: int) -> dict[str, Any]:
    return {"to": f"user{n}@example.com", "subject": "Welcome aboard", "n": n}


def statement_params(n: int) -> dict[str, str]:
    """The bare statement's parameters, made by hand (by name; asyncpg takes them in the query's order)."""
    return {"kind": KIND, "queue": QUEUE, "args": dumps(job_dict(n))}


def job_obj(n: int) -> SendEmail:
    return SendEmail(**job_dict(n))


# ``--autocommit`` clears it: each single enqueue is then its INSERT alone, no BEGIN / COMMIT.
SINGLE_IN_TRANSACTION = True


def single_tx(conn: Any) -> Any:
    """The transaction a single enqueue runs in: ``conn.transaction()``, or none with ``--autocommit``."""
    return conn.transaction() if SINGLE_IN_TRANSACTION else contextlib.nullcontext()


def dumps(data: Any) -> str:
    """JSON text made by hand, as an application would: ``json.dumps`` with its defaults (its one
    shared encoder; any keyword argument builds a new encoder per call, about 1.6 us more a call
    between round trips on this host, which until 2026-12-07 the bare rows and the peers paid)."""
    return json.dumps(data)


# -- databases -----------------------------------------------------------------


def with_dbname(url: str, dbname: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + dbname))


class Databases:
    """Throwaway databases on one server, each dropped by ``drop_all``."""

    def __init__(self, server_url: str) -> None:
        self.server_url = server_url
        self.prefix = f"awa_bench_{os.getpid()}"
        self.made: list[str] = []

    def create(self, system: str) -> str:
        name = f"{self.prefix}_{system}"
        self.made.append(name)  # before it exists: a stop mid-CREATE still drops it
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            conn.execute(f'CREATE DATABASE "{name}"')
        return with_dbname(self.server_url, name)

    def drop_all(self) -> None:
        if not self.made:  # nothing to drop: no connection (the server may be the reason nothing was made)
            return
        with psycopg.connect(self.server_url, autocommit=True) as conn:
            for name in self.made:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        self.made.clear()


def truncate(url: str, tables: list[str]) -> None:
    """Empty the tables of a system (the ones that exist), outside any timing."""
    with psycopg.connect(url, autocommit=True) as conn:
        present = [t for t in tables if conn.execute("SELECT to_regclass(%s)", (t,)).fetchone()[0]]
        if present:
            conn.execute(f"TRUNCATE {', '.join(present)} RESTART IDENTITY CASCADE")


# -- cases ---------------------------------------------------------------------

# A case opens its connections, then returns ``run(first, count)`` which does
# ``count`` enqueues (job numbers first..first+count-1), and a ``close``.
Run = Callable[[int, int], Awaitable[None]]
Opener = Callable[[], Awaitable[tuple[Run, Callable[[], Awaitable[None]]]]]


@dataclass
class Measurement:
    rate: float  # jobs/s over the whole timed run(s)
    samples: list[float]  # per-chunk (single) or per-round (bulk) rates, for the spread


@dataclass
class Case:
    section: str  # "single" or "bulk"
    system: str
    label: str
    driver: str
    open: Opener
    reset: Callable[[], None]
    baseline: str | None = None  # key of the same-driver bare-SQL case
    note: str = ""
    results: dict[str, Measurement] = field(default_factory=dict)  # by phase
    error: str | None = None

    @property
    def key(self) -> str:
        return f"{self.section}:{self.label}:{self.driver}"


async def _noop() -> None:
    return None


def _maybe_import(module: str) -> Any | None:
    try:
        return __import__(module, fromlist=["_"])
    except ImportError:
        return None


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


# ---- awa_bridge + the bare-SQL baselines (one database, awa_bridge's schema)


def bridge_cases(url: str, notes: list[str]) -> list[Case]:
    asyncpg = _maybe_import("asyncpg")
    reset = lambda: truncate(url, ["awa.jobs", "awa.job_ordering_keys"])  # noqa: E731
    cases: list[Case] = []

    # single, asyncpg
    if asyncpg is None:
        notes.append("asyncpg is not installed: the asyncpg cases are skipped")
    else:

        def asyncpg_single(body: Callable[[Any, int], Awaitable[Any]]) -> Opener:
            async def opener() -> tuple[Run, Callable[[], Awaitable[None]]]:
                conn = await asyncpg.connect(url)

                async def run(first: int, count: int) -> None:
                    for n in range(first, first + count):
                        async with single_tx(conn):
                            await body(conn, n)

                return run, conn.close

            return opener

        async def bare_asyncpg(conn: Any, n: int) -> Any:
            return await conn.fetchval(BARE_INSERT, KIND, QUEUE, dumps(job_dict(n)))

        async def bare_statement_asyncpg(conn: Any, n: int) -> Any:
            return await conn.fetchrow(BARE_STATEMENT, *_PLAIN_STATEMENT.positional(statement_params(n)))

        async def bridge_asyncpg(conn: Any, n: int) -> Any:
            return await awa_bridge.insert_job(conn, job_obj(n))

        async def open_client() -> tuple[Run, Callable[[], Awaitable[None]]]:
            # Client.insert: its own small set of connections, one call = one transaction.
            from awa_bridge.worker import Client

            client = Client(url)

            async def run(first: int, count: int) -> None:
                for n in range(first, first + count):
                    await client.insert(job_obj(n))

            return run, client.shutdown

        base = "single:bare INSERT:asyncpg"
        cases += [
            Case("single", "baseline", "bare INSERT", "asyncpg", asyncpg_single(bare_asyncpg), reset),
            Case(
                "single", "statement", STATEMENT_LABEL, "asyncpg",
                asyncpg_single(bare_statement_asyncpg), reset, base,
            ),
            Case(
                "single", "awa_bridge", "awa_bridge insert_job", "asyncpg",
                asyncpg_single(bridge_asyncpg), reset, base,
            ),
            Case(
                "single", "awa_bridge", "awa_bridge Client.insert", "asyncpg",
                open_client, reset, base, "autocommit: the INSERT is its own transaction",
            ),
        ]  # fmt: skip

    # single, psycopg sync
    def psycopg_single(body: Callable[[Any, int], Any]) -> Opener:
        async def opener() -> tuple[Run, Callable[[], Awaitable[None]]]:
            conn = psycopg.connect(url, autocommit=True)

            async def run(first: int, count: int) -> None:
                for n in range(first, first + count):
                    with single_tx(conn):
                        body(conn, n)

            async def close() -> None:
                conn.close()

            return run, close

        return opener

    def bare_psycopg(conn: Any, n: int) -> Any:
        return conn.execute(BARE_INSERT_PSYCOPG, (KIND, QUEUE, dumps(job_dict(n)))).fetchone()

    def bare_statement_psycopg(conn: Any, n: int) -> Any:
        return conn.execute(BARE_STATEMENT_PSYCOPG, statement_params(n)).fetchone()

    def bridge_psycopg(conn: Any, n: int) -> Any:
        return awa_bridge.insert_job_sync(conn, job_obj(n))

    # single, psycopg async
    def psycopg_async_single(body: Callable[[Any, int], Awaitable[Any]]) -> Opener:
        async def opener() -> tuple[Run, Callable[[], Awaitable[None]]]:
            conn = await psycopg.AsyncConnection.connect(url, autocommit=True)

            async def run(first: int, count: int) -> None:
                for n in range(first, first + count):
                    async with single_tx(conn):
                        await body(conn, n)

            return run, conn.close

        return opener

    async def bare_psycopg_async(conn: Any, n: int) -> Any:
        cursor = await conn.execute(BARE_INSERT_PSYCOPG, (KIND, QUEUE, dumps(job_dict(n))))
        return await cursor.fetchone()

    async def bare_statement_psycopg_async(conn: Any, n: int) -> Any:
        cursor = await conn.execute(BARE_STATEMENT_PSYCOPG, statement_params(n))
        return await cursor.fetchone()

    async def bridge_psycopg_async(conn: Any, n: int) -> Any:
        return await awa_bridge.insert_job(conn, job_obj(n))

    cases += [
        Case("single", "baseline", "bare INSERT", "psycopg", psycopg_single(bare_psycopg), reset),
        Case(
            "single", "statement", STATEMENT_LABEL, "psycopg",
            psycopg_single(bare_statement_psycopg), reset, "single:bare INSERT:psycopg",
        ),
        Case(
            "single", "awa_bridge", "awa_bridge insert_job_sync", "psycopg",
            psycopg_single(bridge_psycopg), reset, "single:bare INSERT:psycopg",
        ),
        Case(
            "single", "baseline", "bare INSERT", "psycopg-async",
            psycopg_async_single(bare_psycopg_async), reset,
        ),
        Case(
            "single", "statement", STATEMENT_LABEL, "psycopg-async",
            psycopg_async_single(bare_statement_psycopg_async), reset, "single:bare INSERT:psycopg-async",
        ),
        Case(
            "single", "awa_bridge", "awa_bridge insert_job", "psycopg-async",
            psycopg_async_single(bridge_psycopg_async), reset, "single:bare INSERT:psycopg-async",
        ),
    ]  # fmt: skip

    # bulk
    if asyncpg is not None:

        def asyncpg_bulk(body: Callable[[Any, list[Any]], Awaitable[Any]], make: Callable[[int], Any]) -> Opener:
            async def opener() -> tuple[Run, Callable[[], Awaitable[None]]]:
                conn = await asyncpg.connect(url)

                async def run(first: int, count: int) -> None:
                    items = [make(n) for n in range(first, first + count)]
                    async with conn.transaction():
                        await body(conn, items)

                return run, conn.close

            return opener

        async def bare_copy_asyncpg(conn: Any, items: list[dict[str, Any]]) -> None:
            records = [(KIND, QUEUE, dumps(item)) for item in items]
            await conn.copy_records_to_table(
                "jobs", schema_name="awa", columns=["kind", "queue", "args"], records=records
            )

        async def bridge_many_asyncpg(conn: Any, items: list[SendEmail]) -> None:
            result = await awa_bridge.insert_many(conn, items)
            assert result.inserted == len(items), result

        async def bridge_many_unique_asyncpg(conn: Any, items: list[SendEmail]) -> None:
            result = await awa_bridge.insert_many(conn, items, unique=True)
            assert result.inserted == len(items), result

        base = "bulk:bare COPY:asyncpg"
        cases += [
            Case(
                "bulk", "baseline", "bare COPY", "asyncpg",
                asyncpg_bulk(bare_copy_asyncpg, job_dict), reset,
            ),
            Case(
                "bulk", "awa_bridge", "awa_bridge insert_many", "asyncpg",
                asyncpg_bulk(bridge_many_asyncpg, job_obj), reset, base,
            ),
            Case(
                "bulk", "awa_bridge", "awa_bridge insert_many unique=True", "asyncpg",
                asyncpg_bulk(bridge_many_unique_asyncpg, job_obj), reset, base,
                "unique keys: COPY into a temp stage, then INSERT ... ON CONFLICT DO NOTHING",
            ),
        ]  # fmt: skip

    def psycopg_bulk(body: Callable[[Any, list[Any]], Any], make: Callable[[int], Any]) -> Opener:
        async def opener() -> tuple[Run, Callable[[], Awaitable[None]]]:
            conn = psycopg.connect(url, autocommit=True)

            async def run(first: int, count: int) -> None:
                items = [make(n) for n in range(first, first + count)]
                with conn.transaction():
                    body(conn, items)

            async def close() -> None:
                conn.close()

            return run, close

        return opener

    def bare_copy_psycopg(conn: Any, items: list[dict[str, Any]]) -> None:
        with conn.cursor() as cursor, cursor.copy("COPY awa.jobs (kind, queue, args) FROM STDIN") as copy:
            for item in items:
                copy.write_row((KIND, QUEUE, dumps(item)))

    def bridge_many_psycopg(conn: Any, items: list[SendEmail]) -> None:
        result = awa_bridge.insert_many_sync(conn, items)
        assert result.inserted == len(items), result

    def bridge_many_unique_psycopg(conn: Any, items: list[SendEmail]) -> None:
        result = awa_bridge.insert_many_sync(conn, items, unique=True)
        assert result.inserted == len(items), result

    base = "bulk:bare COPY:psycopg"
    cases += [
        Case("bulk", "baseline", "bare COPY", "psycopg", psycopg_bulk(bare_copy_psycopg, job_dict), reset),
        Case(
            "bulk", "awa_bridge", "awa_bridge insert_many_sync", "psycopg",
            psycopg_bulk(bridge_many_psycopg, job_obj), reset, base,
        ),
        Case(
            "bulk", "awa_bridge", "awa_bridge insert_many_sync unique=True", "psycopg",
            psycopg_bulk(bridge_many_unique_psycopg, job_obj), reset, base,
            "unique keys: COPY into a temp stage, then INSERT ... ON CONFLICT DO NOTHING",
        ),
    ]  # fmt: skip
    return cases


# ---- awa_bridge through SQLAlchemy and Django, each beside the same bare INSERT sent through it


def framework_cases(url: str, notes: list[str]) -> list[Case]:
    """``insert_job(session, ...)`` on a SQLAlchemy ``Session`` (psycopg dialect) and
    ``insert_job(connection, ...)`` on Django's connection, each against a bare INSERT sent through
    the same framework (``session.execute(text(...))``, ``cursor.execute``): the doors ORM code uses.
    """
    reset = lambda: truncate(url, ["awa.jobs", "awa.job_ordering_keys"])  # noqa: E731
    cases: list[Case] = []
    if _maybe_import("sqlalchemy.orm") is None:
        notes.append("SQLAlchemy is not installed: its cases are skipped")
    else:
        import sqlalchemy as sa
        from sqlalchemy.orm import Session

        bare = sa.text("INSERT INTO awa.jobs (kind, queue, args) VALUES (:kind, :queue, :args) RETURNING id")

        def sqlalchemy_single(body: Callable[[Any, int], Any]) -> Opener:
            async def opener() -> tuple[Run, Callable[[], Awaitable[None]]]:
                # Autocommit: the INSERT alone, as on the other drivers; else session.begin() around it.
                isolation = {} if SINGLE_IN_TRANSACTION else {"isolation_level": "AUTOCOMMIT"}
                engine = sa.create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1), **isolation)
                session = Session(engine)

                async def run(first: int, count: int) -> None:
                    for n in range(first, first + count):
                        with session.begin():
                            body(session, n)

                async def close() -> None:
                    session.close()
                    engine.dispose()

                return run, close

            return opener

        def bare_sqlalchemy(session: Any, n: int) -> Any:
            return session.execute(bare, {"kind": KIND, "queue": QUEUE, "args": dumps(job_dict(n))}).scalar_one()

        def bridge_sqlalchemy(session: Any, n: int) -> Any:
            return awa_bridge.insert_job(session, job_obj(n))

        cases += [
            Case("single", "baseline", "bare INSERT", "sqlalchemy", sqlalchemy_single(bare_sqlalchemy), reset),
            Case(
                "single", "awa_bridge", "awa_bridge insert_job(session)", "sqlalchemy",
                sqlalchemy_single(bridge_sqlalchemy), reset, "single:bare INSERT:sqlalchemy",
            ),
        ]  # fmt: skip
    if _maybe_import("django") is None:
        notes.append("Django is not installed: its cases are skipped")
        return cases
    from django.conf import settings

    if not settings.configured:
        configure_django(url)
    # Every case runs from this script's one event loop, where Django's sync API refuses to run; its
    # connection is used here from that one thread, one call at a time, which is what the check guards.
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    from django.db import connection, transaction

    def django_single(body: Callable[[int], Any]) -> Opener:
        async def opener() -> tuple[Run, Callable[[], Awaitable[None]]]:
            connection.close()  # a new connection per phase: it takes the database's synchronous_commit

            async def run(first: int, count: int) -> None:
                for n in range(first, first + count):
                    with transaction.atomic() if SINGLE_IN_TRANSACTION else contextlib.nullcontext():
                        body(n)

            async def close() -> None:
                connection.close()

            return run, close

        return opener

    def bare_django(n: int) -> Any:
        with connection.cursor() as cursor:
            cursor.execute(BARE_INSERT_PSYCOPG, (KIND, QUEUE, dumps(job_dict(n))))
            return cursor.fetchone()

    def bridge_django(n: int) -> Any:
        return awa_bridge.insert_job(connection, job_obj(n))

    cases += [
        Case("single", "baseline", "bare INSERT", "django", django_single(bare_django), reset),
        Case(
            "single", "awa_bridge", "awa_bridge insert_job(connection)", "django",
            django_single(bridge_django), reset, "single:bare INSERT:django",
        ),
    ]  # fmt: skip
    return cases


def configure_django(url: str) -> None:
    """Django set up in this process with ``url`` as its default database (also for
    ``count_enqueue_instructions.py``)."""
    import django
    from django.conf import settings

    parts = urlsplit(url)
    query = dict(parse_qsl(parts.query))  # the embedded server's URL names its socket directory in ?host=
    database = {"ENGINE": "django.db.backends.postgresql", "NAME": parts.path.lstrip("/")}
    database["HOST"] = query.get("host", parts.hostname or "")
    database["PORT"] = query.get("port", str(parts.port or ""))
    database.update({"USER": parts.username or "postgres", "PASSWORD": parts.password or ""})
    settings.configure(DATABASES={"default": database}, USE_TZ=True)
    django.setup()


# ---- awa-pg (its own database, migrated by awa-pg)

AWA_PG_TABLES = [
    "awa.jobs_hot",
    "awa.scheduled_jobs",
    "awa.job_unique_claims",
    "awa.admin_dirty_kind_marks",
    "awa.admin_dirty_queue_marks",
]


def awa_pg_cases(url: str) -> list[Case]:
    import awa
    import awa.bridge

    asyncpg = _maybe_import("asyncpg")
    reset = lambda: truncate(url, AWA_PG_TABLES)  # noqa: E731
    cases: list[Case] = []

    if asyncpg is not None:

        async def open_asyncpg() -> tuple[Run, Callable[[], Awaitable[None]]]:
            conn = await asyncpg.connect(url)

            async def run(first: int, count: int) -> None:
                for n in range(first, first + count):
                    async with single_tx(conn):
                        await awa.bridge.insert_job(conn, job_obj(n))

            return run, conn.close

        cases.append(
            Case(
                "single", "awa-pg", "awa-pg bridge insert_job", "asyncpg",
                open_asyncpg, reset, "single:bare INSERT:asyncpg",
            )
        )  # fmt: skip

    async def open_psycopg() -> tuple[Run, Callable[[], Awaitable[None]]]:
        conn = psycopg.connect(url, autocommit=True)

        async def run(first: int, count: int) -> None:
            for n in range(first, first + count):
                with single_tx(conn):
                    awa.bridge.insert_job_sync(conn, job_obj(n))

        async def close() -> None:
            conn.close()

        return run, close

    async def open_copy() -> tuple[Run, Callable[[], Awaitable[None]]]:
        from bench_worker import awa_pg_url

        client = awa.AsyncClient(awa_pg_url(url))

        async def run(first: int, count: int) -> None:
            items = [job_obj(n) for n in range(first, first + count)]
            jobs = await client.insert_many_copy(items)
            assert len(jobs) == count

        return run, client.close

    cases += [
        Case(
            "single", "awa-pg", "awa-pg bridge insert_job_sync", "psycopg",
            open_psycopg, reset, "single:bare INSERT:psycopg",
        ),
        Case(
            "bulk", "awa-pg", "awa-pg AsyncClient.insert_many_copy", "awa-pg (Rust/sqlx)",
            open_copy, reset, None, "own pool and transaction; returns a Job object per row",
        ),
    ]  # fmt: skip
    return cases


# ---- pgqueuer (its own database, schema from its installer)


def pgqueuer_cases(url: str) -> list[Case]:
    import asyncpg
    from pgqueuer.db import AsyncpgDriver, PsycopgDriver, SyncPsycopgDriver
    from pgqueuer.queries import Queries, SyncQueries

    reset = lambda: truncate(url, ["pgqueuer", "pgqueuer_log"])  # noqa: E731

    async def open_single() -> tuple[Run, Callable[[], Awaitable[None]]]:
        conn = await asyncpg.connect(url)
        queries = Queries(AsyncpgDriver(conn))

        async def run(first: int, count: int) -> None:
            for n in range(first, first + count):
                async with single_tx(conn):
                    await queries.enqueue(KIND, dumps(job_dict(n)).encode())

        return run, conn.close

    # pgqueuer also runs on psycopg (SyncQueries on a sync connection, Queries on an async one),
    # both in autocommit mode: its single enqueue on each driver awa_bridge's is measured on.
    async def open_single_psycopg() -> tuple[Run, Callable[[], Awaitable[None]]]:
        conn = psycopg.connect(url, autocommit=True)
        queries = SyncQueries(SyncPsycopgDriver(conn))

        async def run(first: int, count: int) -> None:
            for n in range(first, first + count):
                with single_tx(conn):
                    queries.enqueue(KIND, dumps(job_dict(n)).encode())

        async def close() -> None:
            conn.close()

        return run, close

    async def open_single_psycopg_async() -> tuple[Run, Callable[[], Awaitable[None]]]:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
        queries = Queries(PsycopgDriver(conn))

        async def run(first: int, count: int) -> None:
            for n in range(first, first + count):
                async with single_tx(conn):
                    await queries.enqueue(KIND, dumps(job_dict(n)).encode())

        return run, conn.close

    async def open_bulk() -> tuple[Run, Callable[[], Awaitable[None]]]:
        conn = await asyncpg.connect(url)
        queries = Queries(AsyncpgDriver(conn))

        async def run(first: int, count: int) -> None:
            items = [job_dict(n) for n in range(first, first + count)]
            async with conn.transaction():
                ids = await queries.enqueue([KIND] * count, [dumps(item).encode() for item in items], [0] * count)
            assert len(ids) == count

        return run, conn.close

    return [
        Case(
            "single", "pgqueuer", "pgqueuer Queries.enqueue", "asyncpg",
            open_single, reset, "single:bare INSERT:asyncpg",
        ),
        Case(
            "single", "pgqueuer", "pgqueuer SyncQueries.enqueue", "psycopg",
            open_single_psycopg, reset, "single:bare INSERT:psycopg",
        ),
        Case(
            "single", "pgqueuer", "pgqueuer Queries.enqueue", "psycopg-async",
            open_single_psycopg_async, reset, "single:bare INSERT:psycopg-async",
        ),
        Case(
            "bulk", "pgqueuer", "pgqueuer Queries.enqueue (lists)", "asyncpg",
            open_bulk, reset, "bulk:bare COPY:asyncpg", "one INSERT ... SELECT FROM unnest(arrays)",
        ),
    ]  # fmt: skip


# ---- procrastinate (its own database, schema from its schema manager)


def procrastinate_cases(url: str, app: Any) -> list[Case]:
    reset = lambda: truncate(url, ["procrastinate_jobs", "procrastinate_events"])  # noqa: E731
    task = app.tasks[KIND]

    async def open_single() -> tuple[Run, Callable[[], Awaitable[None]]]:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)

        async def run(first: int, count: int) -> None:
            for n in range(first, first + count):
                async with single_tx(conn):
                    await task.configure(connection=conn).defer_async(**job_dict(n))

        return run, conn.close

    async def open_bulk() -> tuple[Run, Callable[[], Awaitable[None]]]:
        conn = await psycopg.AsyncConnection.connect(url, autocommit=True)

        async def run(first: int, count: int) -> None:
            items = [job_dict(n) for n in range(first, first + count)]
            async with conn.transaction():
                ids = await task.configure(connection=conn).batch_defer_async(*items)
            assert len(ids) == count

        return run, conn.close

    return [
        Case(
            "single", "procrastinate", "procrastinate defer_async", "psycopg-async",
            open_single, reset, "single:bare INSERT:psycopg-async", "on the caller's connection",
        ),
        Case(
            "bulk", "procrastinate", "procrastinate batch_defer_async", "psycopg-async",
            open_bulk, reset, None,
        ),
    ]  # fmt: skip


# -- setup of every system -----------------------------------------------------


@dataclass
class Setup:
    cases: list[Case]
    notes: list[str]
    cleanups: list[Callable[[], Awaitable[None]]]


async def setup_systems(dbs: Databases) -> Setup:
    notes: list[str] = []
    cleanups: list[Callable[[], Awaitable[None]]] = []

    url = dbs.create("awa_bridge")
    awa_bridge.migrate(url)
    cases = bridge_cases(url, notes) + framework_cases(url, notes)

    if _maybe_import("awa.bridge") is None:
        notes.append("awa-pg is not installed: skipped (pip install awa-pg==0.6.9)")
    else:
        import awa
        from bench_worker import awa_pg_url  # a sibling script: sqlx wants the socket directory as the host

        url = dbs.create("awa_pg")
        await awa.migrate(awa_pg_url(url))
        cases += awa_pg_cases(url)

    if _maybe_import("pgqueuer.queries") is None or _maybe_import("asyncpg") is None:
        notes.append("pgqueuer (or asyncpg) is not installed: skipped (pip install pgqueuer asyncpg)")
    else:
        import asyncpg
        from pgqueuer.db import AsyncpgDriver
        from pgqueuer.queries import Queries

        url = dbs.create("pgqueuer")
        conn = await asyncpg.connect(url)
        try:
            await Queries(AsyncpgDriver(conn)).install()
        finally:
            await conn.close()
        cases += pgqueuer_cases(url)

    procrastinate = _maybe_import("procrastinate")
    if procrastinate is None:
        notes.append("procrastinate is not installed: skipped (pip install procrastinate)")
    else:
        logging.getLogger("procrastinate").setLevel(logging.ERROR)
        url = dbs.create("procrastinate")
        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))
        app.task(name=KIND)(_procrastinate_task)
        await app.open_async()
        cleanups.append(app.close_async)
        await app.schema_manager.apply_schema_async()
        cases += procrastinate_cases(url, app)

    return Setup(cases, notes, cleanups)


def _procrastinate_task(**kwargs: Any) -> None:
    return None


# -- running -------------------------------------------------------------------

PHASE_DURABLE = "single-durable"
PHASE_NO_SYNC = "single-nosync"
PHASE_BULK = "bulk"


def _fail(case: Case, exc: BaseException) -> None:
    """A peer's failure must not hide everyone else's numbers."""
    case.error = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    print(f"  ! {case.label} ({case.driver}) failed: {case.error}", file=sys.stderr)


def set_synchronous_commit(dbs: Databases, value: str | None) -> None:
    """Per-database default for the connections opened next (None: back to the server's)."""
    with psycopg.connect(dbs.server_url, autocommit=True) as conn:
        for name in dbs.made:
            if value is None:
                conn.execute(f'ALTER DATABASE "{name}" RESET synchronous_commit')
            else:
                conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = {value}')


def next_order(previous: list[_T], shuffler: random.Random) -> list[_T]:
    """The cases' order for the next round of chunks: shuffled, and never starting with the case
    that ended the previous round.

    A case that ran two chunks back to back would run its second one with its connection, its
    server process and its code already warm; alternating forward and reversed rounds gave that
    to the first and the last case every time (the first being asyncpg's bare INSERT, a baseline).
    Shuffling also stops any case from always following the same other one.
    """
    order = list(previous)
    shuffler.shuffle(order)
    if len(order) > 1 and order[0] is previous[-1]:
        order[0], order[-1] = order[-1], order[0]
    return order


async def run_single_phase(phase: str, cases: list[Case], args: argparse.Namespace) -> None:
    """Every case keeps its connection; the timed jobs run round-robin in chunks.

    Commit latency (a WAL flush per transaction) drifts a lot on shared disks;
    interleaving small chunks makes every system see the same disk weather,
    so the ratios hold even when the absolute rates move.
    """
    opened: list[tuple[Case, Run, Callable[[], Awaitable[None]]]] = []
    try:
        for case in cases:
            if case.error:
                continue
            try:
                case.reset()
                run, close = await case.open()
                opened.append((case, run, close))
                await run(10_000_000, args.single_warmup)
                case.reset()
            except Exception as exc:
                _fail(case, exc)
        elapsed = {case.key: 0.0 for case, _, _ in opened}
        samples: dict[str, list[float]] = {case.key: [] for case, _, _ in opened}
        first = 0
        order = list(opened)
        shuffler = random.Random(SHUFFLE_SEED)
        while first < args.single:
            count = min(args.chunk, args.single - first)
            order = next_order(order, shuffler)
            for case, run, _ in order:
                if case.error:
                    continue
                try:
                    start = time.perf_counter()
                    await run(first, count)
                    took = time.perf_counter() - start
                except Exception as exc:
                    _fail(case, exc)
                    continue
                elapsed[case.key] += took
                samples[case.key].append(count / took)
            first += count
        for case, _, _ in opened:
            if not case.error:
                case.results[phase] = Measurement(args.single / elapsed[case.key], samples[case.key])
                print(
                    f"  {phase:15} {case.label} ({case.driver}): {case.results[phase].rate:,.0f} jobs/s",
                    file=sys.stderr,
                )
    finally:
        for _, _, close in opened:
            with contextlib.suppress(Exception):
                await close()


async def measure_bulk(case: Case, count: int, warmup: int) -> float:
    """Warm up, empty the tables, then time one call of ``count`` jobs; returns jobs/s."""
    case.reset()
    run, close = await case.open()
    try:
        if warmup:
            await run(10_000_000, warmup)
        case.reset()
        start = time.perf_counter()
        await run(0, count)
        elapsed = time.perf_counter() - start
    finally:
        await close()
    return count / elapsed


async def run_bulk_phase(cases: list[Case], args: argparse.Namespace) -> None:
    """Interleaved rounds (every case once, then again ...); the median round is reported."""
    samples: dict[str, list[float]] = {case.key: [] for case in cases}
    for round_no in range(1, args.rounds + 1):
        for case in cases:
            if case.error:
                continue
            try:
                rate = await measure_bulk(case, args.bulk, args.bulk_warmup)
            except Exception as exc:
                _fail(case, exc)
                continue
            samples[case.key].append(rate)
            print(
                f"  bulk round {round_no}/{args.rounds}  {case.label} ({case.driver}): {rate:,.0f} jobs/s",
                file=sys.stderr,
            )
    for case in cases:
        if samples[case.key] and not case.error:
            case.results[PHASE_BULK] = Measurement(statistics.median(samples[case.key]), samples[case.key])


# -- report --------------------------------------------------------------------


def ratio(value: float | None, base: float | None) -> str:
    if value is None or not base:
        return "-"
    return f"{value / base:.2f}x"


def rate_of(case: Case | None, phase: str) -> float | None:
    if case is None or case.error or phase not in case.results:
        return None
    return case.results[phase].rate


def spread(measurement: Measurement, phase: str) -> str:
    values = sorted(measurement.samples)
    if phase == PHASE_BULK or len(values) < 4:
        return f"{values[0]:,.0f} - {values[-1]:,.0f}"
    quartiles = statistics.quantiles(values, n=4)
    return f"{quartiles[0]:,.0f} - {quartiles[2]:,.0f}"


PEER = {
    "single": "single:pgqueuer Queries.enqueue:asyncpg",
    "bulk": "bulk:pgqueuer Queries.enqueue (lists):asyncpg",
}


def peer_of(by_key: dict[str, Case], case: Case) -> Case | None:
    """pgqueuer's case to compare ``case`` with: its single enqueue on the same driver where it
    runs on it (asyncpg, psycopg, psycopg async), else its asyncpg one."""
    if case.section == "single":
        same = next((c for c in by_key.values() if c.system == "pgqueuer" and c.section == "single"
                     and c.driver == case.driver), None)  # fmt: skip
        if same is not None:
            return same
    return by_key.get(PEER[case.section])


def render(cases: list[Case], args: argparse.Namespace, header: list[str], notes: list[str]) -> str:
    by_key = {case.key: case for case in cases}
    lines = [*header, ""]
    each = "insert alone (--autocommit)" if args.autocommit else "begin / insert / commit"
    tables = [
        (
            PHASE_DURABLE,
            "single",
            f"Single transactional enqueue, durable commits ({args.single:,} x {each}, "
            f"server default synchronous_commit)",
            "bare INSERT",
            "interquartile range of the per-chunk rates",
        ),
        (
            PHASE_NO_SYNC,
            "single",
            f"Single transactional enqueue, synchronous_commit=off ({args.single:,} x {each}; "
            "no wait for the WAL flush, so this is the client + server CPU cost)",
            "bare INSERT",
            "interquartile range of the per-chunk rates",
        ),
        (
            PHASE_BULK,
            "bulk",
            f"Bulk enqueue ({args.bulk:,} jobs in one call, in one transaction)",
            "bare COPY",
            f"min - max of {args.rounds} rounds; the median round is reported",
        ),
    ]
    for phase, section, title, base_name, spread_note in tables:
        section_cases = [c for c in cases if c.section == section]
        if not any(phase in c.results or c.error for c in section_cases):
            continue
        lines += [
            f"### {title}",
            "",
            f"| system | call | driver | jobs/s | spread | vs {base_name} (same driver) "
            "| vs pgqueuer (same driver, else asyncpg) | note |",
            "|---|---|---|---:|---:|---:|---:|---|",
        ]
        for case in section_cases:
            if case.error or phase not in case.results:
                lines.append(f"| {case.system} | {case.label} | {case.driver} | failed | | | | {case.error or ''} |")
                continue
            measured = case.results[phase]
            if case.system == "baseline":
                vs_base = "1.00x (baseline)"
            else:
                vs_base = ratio(measured.rate, rate_of(by_key.get(case.baseline or ""), phase))
            vs_peer = ratio(measured.rate, rate_of(peer_of(by_key, case), phase))
            lines.append(
                f"| {case.system} | {case.label} | {case.driver} | {measured.rate:,.0f} "
                f"| {spread(measured, phase)} | {vs_base} | {vs_peer} | {case.note} |"
            )
        lines += ["", f"Spread: {spread_note}.", ""]

    lines += ["### Targets (docs/design.md)", ""]
    lines += targets(by_key, cases)
    if notes:
        lines += ["", "Notes:", *[f"- {note}" for note in notes]]
    return "\n".join(lines)


def targets(by_key: dict[str, Case], cases: list[Case]) -> list[str]:
    out: list[str] = []

    def check(name: str, value: float | None, goal: float | None, what: str) -> None:
        if value is None or goal is None:
            out.append(f"- {name}: not measured ({what})")
            return
        mark = "met" if value >= goal else "MISSED"
        out.append(f"- {name}: {value:,.0f} jobs/s vs {what} {goal:,.0f} -> {value / goal:.3f}x **{mark}**")

    for case in cases:
        if case.system != "awa_bridge":
            continue
        if case.section == "single":
            for phase, tag in ((PHASE_DURABLE, "durable"), (PHASE_NO_SYNC, "sync-commit off")):
                value = rate_of(case, phase)
                base = rate_of(by_key.get(case.baseline or ""), phase)
                name = f"{case.label} ({case.driver}, {tag})"
                check(name, value, base * 0.9 if base else None, "90% of bare INSERT")
                bare = rate_of(by_key.get(f"single:{STATEMENT_LABEL}:{case.driver}"), phase)
                check(name, value, bare * 0.9 if bare else None, "90% of its own statement sent bare (its client path)")
                peer = peer_of(by_key, case)
                if peer is not None and peer.key != PEER["single"]:  # pgqueuer on this driver, not asyncpg
                    check(name, value, rate_of(peer, phase), f"pgqueuer single on {peer.driver}")
                check(name, value, rate_of(by_key.get(PEER["single"]), phase), "pgqueuer single on asyncpg")
        else:
            value = rate_of(case, PHASE_BULK)
            name = f"{case.label} ({case.driver})"
            check(name, value, 50_000.0, "the absolute target")
            check(name, value, rate_of(by_key.get(PEER["bulk"]), PHASE_BULK), "pgqueuer bulk")
    return out


def server_header(url: str, args: argparse.Namespace) -> list[str]:
    with psycopg.connect(url, autocommit=True) as conn:
        version = conn.execute("SHOW server_version").fetchone()[0]
        settings = {
            name: conn.execute(f"SHOW {name}").fetchone()[0]
            for name in ("synchronous_commit", "fsync", "wal_sync_method", "shared_buffers")
        }
    versions = ", ".join(
        f"{dist} {_version(dist)}"
        for dist in ("awa-bridge", "asyncpg", "psycopg", "awa-pg", "pgqueuer", "procrastinate")
    )
    return [
        "## awa_bridge enqueue benchmark",
        "",
        f"- PostgreSQL {version} ({', '.join(f'{k}={v}' for k, v in settings.items())})",
        f"- Python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs, "
        f"event loop: {'uvloop' if args.uvloop else 'asyncio'}, load average at the end: "
        f"{', '.join(f'{x:.2f}' for x in os.getloadavg())}",
        f"- {versions}",
        f"- single: {args.single:,} jobs per case, run round-robin across the cases in chunks of "
        f"{args.chunk} after a {args.single_warmup}-job warm-up; bulk: {args.rounds} interleaved rounds "
        f"after a {args.bulk_warmup}-job warm-up; every timed run starts from empty tables",
        "- each system has its own throwaway database; the bare-SQL baselines share awa_bridge's "
        "(the same awa.jobs table, indexes and NOTIFY trigger)",
    ]


# -- main ----------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--database-url",
        default=os.environ.get("DATABASE_URL"),
        help="any database on the server to use (throwaway databases are created beside it); "
        "default $DATABASE_URL, else an embedded PostgreSQL is started",
    )
    parser.add_argument("--single", type=int, default=10_000, help="transactions per single-enqueue case (10,000)")
    parser.add_argument("--bulk", type=int, default=50_000, help="jobs per bulk-enqueue call")
    parser.add_argument("--rounds", type=int, default=3, help="bulk rounds; the median is reported")
    parser.add_argument("--chunk", type=int, default=100, help="single-enqueue jobs per round-robin turn")
    parser.add_argument("--single-warmup", type=int, default=200)
    parser.add_argument("--bulk-warmup", type=int, default=2000)
    parser.add_argument(
        "--no-sync-off",
        action="store_true",
        help="skip the second single-enqueue pass with synchronous_commit=off",
    )
    parser.add_argument(
        "--autocommit",
        action="store_true",
        help="single enqueues without BEGIN / COMMIT around each (the INSERT is its own transaction)",
    )
    parser.add_argument("--skip-single", action="store_true")
    parser.add_argument("--skip-bulk", action="store_true")
    parser.add_argument("--only", default="", help="run only cases whose label contains this text")
    parser.add_argument("--uvloop", action="store_true", help="run asyncio on uvloop (if installed)")
    parser.add_argument("--json", dest="json_path", help="also write the raw results to this JSON file")
    args = parser.parse_args(argv)
    if min(args.single, args.bulk, args.rounds, args.chunk) < 1:
        parser.error("--single, --bulk, --rounds and --chunk must be at least 1")
    return args


async def amain(args: argparse.Namespace, server_url: str) -> str:
    dbs = Databases(server_url)
    try:
        setup = await setup_systems(dbs)
        always = ("baseline", "statement")
        cases = [c for c in setup.cases if args.only.lower() in c.label.lower() or c.system in always]
        try:
            single = [c for c in cases if c.section == "single"]
            if single and not args.skip_single:
                await run_single_phase(PHASE_DURABLE, single, args)
                if not args.no_sync_off:
                    set_synchronous_commit(dbs, "off")
                    try:
                        await run_single_phase(PHASE_NO_SYNC, single, args)
                    finally:
                        set_synchronous_commit(dbs, None)
            bulk = [c for c in cases if c.section == "bulk"]
            if bulk and not args.skip_bulk:
                await run_bulk_phase(bulk, args)
        finally:
            for cleanup in setup.cleanups:
                with contextlib.suppress(Exception):
                    await cleanup()
        report = render(cases, args, server_header(server_url, args), setup.notes)
        if args.json_path:
            with open(args.json_path, "w", encoding="utf-8") as handle:
                raw = [
                    {
                        "key": c.key,
                        "system": c.system,
                        "error": c.error,
                        "results": {phase: {"rate": m.rate, "samples": m.samples} for phase, m in c.results.items()},
                    }
                    for c in cases
                ]
                json.dump(raw, handle, indent=2)
        return report
    finally:
        dbs.drop_all()


def main(argv: list[str] | None = None) -> int:
    global SINGLE_IN_TRANSACTION
    args = parse_args(argv)
    SINGLE_IN_TRANSACTION = not args.autocommit
    url, server, _ = bp.server(args.database_url)
    if args.uvloop:
        uvloop = _maybe_import("uvloop")
        if uvloop is None:
            print("uvloop is not installed; using asyncio's default loop", file=sys.stderr)
            args.uvloop = False
        else:
            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
    try:
        print(asyncio.run(amain(args, url)))
    finally:
        if server is not None:
            server.cleanup()
    return 0


if __name__ == "__main__":
    bp.run_main(main, "interrupted: databases dropped")
