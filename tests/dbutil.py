"""Test-side helpers for URLs and throwaway databases (real PostgreSQL only)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import psycopg

#: Empties every awa table a test may have written (the schema stays).
# Every table of the awa schema but the migration runner's record, read from the catalog: a list
# written out missed awa.celery_chords, added by a later migration, and a chord row one test left
# made a later test's "nothing written" check fail, depending on which test ran before it.
EMPTY_AWA_TABLES = """
DO $$ BEGIN
    EXECUTE (SELECT 'TRUNCATE ' || string_agg(format('awa.%I', tablename), ', ') || ' RESTART IDENTITY CASCADE'
             FROM pg_tables WHERE schemaname = 'awa' AND tablename <> 'bridge_migrations');
END $$
"""


def with_dbname(url: str, dbname: str) -> str:
    """Same server and credentials, another database."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + dbname))


def with_driver(url: str, driver: str) -> str:
    """``postgresql://`` → ``postgresql+<driver>://`` for SQLAlchemy."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(scheme=f"postgresql+{driver}"))


def django_database(url: str) -> dict[str, object]:
    """A Django DATABASES entry for a URL (host may be a socket directory in ?host=)."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    host = query.get("host", [parts.hostname or ""])[0]
    return {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": parts.path.lstrip("/"),
        "USER": parts.username or "postgres",
        "PASSWORD": parts.password or "",
        "HOST": host,
        "PORT": str(parts.port or ""),
    }


def create_database(server_url: str, prefix: str = "awa_test", template: str | None = None) -> str:
    """A new database of a unique name; a copy of the database at URL ``template`` when given
    (much faster than migrating again: a schema of many migrations is copied file by file)."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        if template is None:
            conn.execute(f'CREATE DATABASE "{name}"')
        else:
            source = urlsplit(template).path.lstrip("/")
            # A copy needs the source to itself: a pool that closed may leave its backends a moment.
            conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s", (source,))
            conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{source}"')
    return with_dbname(server_url, name)


def drop_database(server_url: str, url: str) -> None:
    name = urlsplit(url).path.lstrip("/")
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@contextmanager
def statistics(conn: psycopg.Connection[Any], tables: list[str], analyzed: bool) -> Iterator[None]:
    """Around filling ``tables`` (autocommit): then ANALYZE them, or leave them as a bulk load does
    before autovacuum's first ANALYZE, which must not come meanwhile (checked: no statistics at all)."""
    if not analyzed:
        for table in tables:
            conn.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    yield
    if analyzed:
        conn.execute(f"ANALYZE {', '.join(tables)}")
    else:
        names = [table.split(".")[-1] for table in tables]
        found = conn.execute(
            "SELECT count(*) FROM pg_stats WHERE schemaname = 'awa' AND tablename = ANY(%s)", (names,)
        ).fetchone()
        assert found == (0,), found
