"""The one place the bridge opens connections from a URL.

The worker's loop uses asyncpg (``connect_async``, ``create_pool``); the CLI,
the admin and cron functions given a URL, the heartbeat thread, migrations and
the Celery layer use psycopg (``connect_sync``); sync transactional handlers
get psycopg connections from ``create_sync_pool``. Each hands back the
adapter of ``drivers`` (``Asyncpg``, ``PsycopgSync``, pools that yield them),
so no module outside ``drivers`` imports a driver or runs a statement itself.
``application_name`` names the connection in ``pg_stat_activity``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any

from ..errors import ValidationError, require
from .detect import detect_async, detect_sync

if TYPE_CHECKING:  # imported when used: ``import awa_bridge`` imports no driver
    import asyncpg

    from .asyncpg import Asyncpg, AsyncpgPool
    from .base import AsyncDriver, SyncDriver
    from .psycopg import PsycopgAsync, PsycopgPool, PsycopgSync


def require_asyncpg() -> Any:
    """asyncpg, which the worker and ``Client`` run on, or one line saying to install it."""
    return require("asyncpg", "asyncpg", "the worker and Client run on it")


async def connect_async(
    url: str, *, application_name: str | None = None, settings: dict[str, str] | None = None
) -> Asyncpg:
    """A new asyncpg connection (close it with ``await db.close()``), with session ``settings`` if given."""
    from .asyncpg import Asyncpg

    return Asyncpg(await connect_asyncpg(url, application_name=application_name, settings=settings))


async def connect_asyncpg(
    url: str, *, application_name: str | None = None, settings: dict[str, str] | None = None
) -> asyncpg.Connection[Any]:
    """A new bare asyncpg connection, for the one caller that hands it on as asyncpg itself.

    ``Client.insert``'s connections (``insert_pool``) are passed to
    ``insert_job`` as the caller's own connection would be, and need their
    server pid; every other caller wants the adapter (``connect_async``).
    """
    driver = require_asyncpg()
    url = plain_url(url)
    server_settings = {**(settings or {}), **({"application_name": application_name} if application_name else {})}
    conn: asyncpg.Connection[Any] = await driver.connect(url, server_settings=server_settings or None)
    return conn


# The maintenance leader's session. Under PostgreSQL's default plan_cache_mode (auto) a statement
# executed five times on an empty, never-analyzed awa.jobs (a fresh install's first seconds)
# switches to a generic plan made then and keeps it until an ANALYZE: retention's delete_finished
# found its batch's rows by reading the whole table at every batch (tests/test_maintenance_plans.py).
# enable_seqscan = off keeps such plans on their indexes and row addresses, as in the worker's pool
# (below). Planning every execution instead (plan_cache_mode = force_custom_plan) fixed it too, but
# on PostgreSQL 18, which caches the plans of SQL functions, it re-planned awa.unique_key_holder
# for every due job: promote_due took 74-75 ms a batch of 1,000 against 22-31 ms (2026-12-07).
LEADER_SETTINGS = {"enable_seqscan": "off"}


async def connect_async_psycopg(url: str) -> PsycopgAsync:
    """A new autocommit psycopg ``AsyncConnection`` (``async with`` closes it): the async admin on a URL."""
    import psycopg

    from .psycopg import PsycopgAsync

    return PsycopgAsync(await psycopg.AsyncConnection.connect(plain_url(url), autocommit=True))


def connect_sync(url: str, *, autocommit: bool = True, application_name: str | None = None) -> PsycopgSync:
    """A new psycopg connection; ``with connect_sync(url) as db:`` commits on a clean exit and closes it."""
    import psycopg

    from .psycopg import PsycopgSync

    extra: dict[str, Any] = {"application_name": application_name} if application_name else {}
    return PsycopgSync(psycopg.connect(plain_url(url), autocommit=autocommit, **extra))


# The session settings of the worker's own pool (claims, completions, progress), which runs only
# this package's statements:
# * plan_cache_mode: each prepared statement is planned once, not at every execution. PostgreSQL
#   would otherwise re-plan the claim at every execution (its LIMIT is a parameter, which a generic
#   plan costs as a tenth of the table): about a tenth of the server's work per job in a drain.
# * enable_sort = off: the claim must read its candidates in dispatch order from jobs_dispatch_idx,
#   a LIMIT's worth of index entries. When the statistics are guessed (a backlog bulk-loaded before
#   any ANALYZE) or say that hardly any job is available (taken while the queue was empty, a burst
#   since: autovacuum re-analyzes a table of ten million retained jobs only after a million
#   changes), both ways of reading the candidates cost about the same to the planner, and it chose
#   jobs_queue_state_idx and a sort of every available job of the queue, at every claim: a
#   200,000-job backlog on 16 slots drained at 606 jobs/s instead of 8,570 (benchmarks/README.md,
#   2026-12-06). None of the pool's statements needs a sort that an index cannot give; one that
#   did would still sort (the setting makes a sort a last resort, not impossible).
# * jit = off: every statement of the pool reads or writes a few rows, which compiling costs more
#   than it saves; and before PostgreSQL 18 a disabled sort counts 10^10 in a plan's cost, so a
#   statement that had to sort would be compiled (and optimised) at every execution (a benchmark
#   loop whose claim sorted its last row ran at 1,515 jobs/s instead of 34,309).
# * enable_seqscan = off: a worker started on a fresh install plans its statements while awa.jobs is
#   empty and has never been analyzed. The planner then takes the table for ten pages, which it
#   reads whole more cheaply than through an index, and each connection keeps that plan until an
#   ANALYZE (never, on a server with autovacuum off): the claim found its ids, and the completion
#   its jobs, by reading every row of awa.jobs, and a sustained 16,000 jobs/s of bench_storage.py's
#   SQL-only loop fell to 1,020-1,340 a second in the half minute before autovacuum's first
#   ANALYZE (2026-12-07). Every statement of the pool reads a few rows through an index; a
#   sequential scan stays possible where no index serves (a last resort, as a sort is).
OWN_STATEMENT_SETTINGS = {
    "plan_cache_mode": "force_generic_plan",
    "enable_sort": "off",
    "enable_seqscan": "off",
    "jit": "off",
}


async def create_pool(
    url: str,
    *,
    min_size: int,
    max_size: int,
    application_name: str | None = None,
    keep_session: bool = False,
    own_statements: bool = False,
) -> AsyncpgPool:
    """An asyncpg pool; ``keep_session=True`` skips asyncpg's reset on release.

    For pools whose connections only ever run this package's own statements (no
    LISTEN, advisory locks, cursors or settings): asyncpg still rolls back a
    transaction left open, and skipping its default reset (RESET ALL, UNLISTEN
    *, ...) saves a round trip on every release.

    ``own_statements=True`` gives its connections ``OWN_STATEMENT_SETTINGS``. Only
    for pools that run this package's own statements, each written so that its
    generic plan is as good as a custom one (tests/test_worker_plans.py reads
    them).
    """
    driver = require_asyncpg()
    from .asyncpg import AsyncpgPool

    options: dict[str, Any] = {"min_size": min_size, "max_size": max_size}
    settings: dict[str, str] = {}
    if application_name:
        settings["application_name"] = application_name
    if own_statements:
        settings.update(OWN_STATEMENT_SETTINGS)
    if settings:
        options["server_settings"] = settings
    if keep_session:
        options["reset"] = _keep_session
    return AsyncpgPool(await driver.create_pool(plain_url(url), **options))


async def _keep_session(conn: object) -> None:
    """asyncpg's pool ``reset`` hook, doing nothing (see ``create_pool``)."""


def create_sync_pool(url: str, *, min_size: int, max_size: int, application_name: str) -> PsycopgPool:
    """A psycopg_pool pool, opened now; each connection is checked when taken."""
    from psycopg_pool import ConnectionPool

    from .psycopg import PsycopgPool

    pool: ConnectionPool[Any] = ConnectionPool(
        plain_url(url),
        min_size=min_size,
        max_size=max_size,
        open=True,
        # A connection the server dropped while idle would cost a handler its attempt.
        check=ConnectionPool.check_connection,
        kwargs={"application_name": application_name},
    )
    return PsycopgPool(pool)


@contextmanager
def sync_driver_for(conn_or_url: Any) -> Iterator[SyncDriver]:
    """The caller's sync connection (in its transaction), or a new autocommit one from a URL, closed after.

    For the functions that take either (admin, dashboard, CLI): on a URL each
    statement commits on its own.
    """
    if isinstance(conn_or_url, str):
        with connect_sync(conn_or_url) as db:
            yield db
    else:
        yield detect_sync(conn_or_url)


@asynccontextmanager
async def async_driver_for(conn_or_url: Any) -> AsyncIterator[AsyncDriver]:
    """The async form of ``sync_driver_for`` (a URL opens an autocommit psycopg ``AsyncConnection``)."""
    if isinstance(conn_or_url, str):
        async with await connect_async_psycopg(conn_or_url) as db:
            yield db
    else:
        yield detect_async(conn_or_url)


def scheme_problem(url: str) -> str | None:
    """What is wrong with a URL's scheme (a SQLAlchemy one, another database's), or None."""
    scheme, sep, _ = url.partition("://")
    if not sep or scheme in ("postgresql", "postgres"):
        return None  # a libpq key=value string, or the plain form
    if scheme.startswith(("postgresql+", "postgres+")):
        return (
            f"the database URL has the SQLAlchemy scheme {scheme!r}; give the plain postgresql:// form"
            " (from an engine: engine.url.set(drivername='postgresql').render_as_string(hide_password=False))"
        )
    return f"the database URL must start with postgresql://, got {scheme}://..."


def plain_url(url: str) -> str:
    """``url``, refused with ``ValidationError`` before any driver reads it if its scheme is not PostgreSQL's.

    A SQLAlchemy application's URL (``postgresql+asyncpg://``) handed to a function that opens
    its own connection gave libpq's "missing '=' after ... in connection info string"."""
    problem = scheme_problem(url) if isinstance(url, str) else None
    if problem is not None:
        raise ValidationError("url", problem)
    return url


def url_problem(url: str) -> str | None:
    """What is wrong with a postgresql:// URL's syntax (libpq's own words), or None; never connects."""
    from psycopg import ProgrammingError
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(url)
    except ProgrammingError as exc:
        return str(exc).strip()
    return None
