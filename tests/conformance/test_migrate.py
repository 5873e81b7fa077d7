"""``migrate_connection`` (awa_bridge/migrations.py) on every connection type.

Documented for a psycopg ``Connection`` and a SQLAlchemy ``Connection``
(Alembic's ``op.get_bind()``), and for a SQLAlchemy ``AsyncConnection``
through ``await conn.run_sync(migrate_connection)``. There it applies the
shipped files in the caller's transaction: visible after the commit, gone
after a rollback. Every other connection type is refused with a TypeError
that names the type and says what to pass instead, before anything runs.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from awa_bridge.migrations import load_migrations, migrate_connection

from ..drivers import HANDLES, Handle, sync_result
from .support import rows

DIRECT = {"psycopg", "sqlalchemy-connection", "sqlalchemy-connection-psycopg2"}
RUN_SYNC = {"sqlalchemy-async-connection-asyncpg", "sqlalchemy-async-connection-psycopg"}


@pytest.fixture(params=sorted(HANDLES))
async def fresh(request: pytest.FixtureRequest, make_database: Callable[[], str]) -> AsyncIterator[tuple[Handle, str]]:
    """A connection of each type on an empty database of its own (Django's alias pointed at it)."""
    url = make_database()
    entry: dict[str, Any] = {}
    if request.param == "django":
        from django.db import connections

        from ..dbutil import django_database

        request.getfixturevalue("django_setup")
        entry = connections["default"].settings_dict
        saved = dict(entry)
        entry.update(django_database(url))
    handle = HANDLES[request.param]()
    await handle.open(url)
    try:
        yield handle, url
    finally:
        await handle.close()
        if entry:
            entry.update(saved)


def applied(url: str) -> list[str]:
    if rows(url, "SELECT to_regclass('awa.bridge_migrations')") == [(None,)]:
        return []
    return [name for (name,) in rows(url, "SELECT name FROM awa.bridge_migrations ORDER BY name")]


async def migrate(handle: Handle, **options: Any) -> list[str]:
    """The documented call for the connection type."""
    if handle.name in RUN_SYNC:
        return list(await handle.conn.run_sync(lambda conn: migrate_connection(conn, **options)))
    return list(sync_result(migrate_connection(handle.conn, **options)))


async def test_applies_in_the_callers_transaction_or_refuses_clearly(fresh: tuple[Handle, str]) -> None:
    handle, url = fresh
    shipped = [m.name for m in load_migrations()]
    if handle.name not in DIRECT:
        with pytest.raises(TypeError) as info:
            migrate_connection(handle.conn)
        message = str(info.value)
        assert "migrate_connection needs a psycopg Connection or a SQLAlchemy Connection" in message
        assert type(handle.conn).__qualname__ in message
        assert rows(url, "SELECT to_regnamespace('awa')") == [(None,)]
    if handle.name not in DIRECT | RUN_SYNC:
        return
    await handle.begin()
    assert await migrate(handle, dry_run=True) == shipped
    assert await migrate(handle) == shipped
    assert applied(url) == [], "nothing is visible before the caller commits"
    await handle.rollback()
    assert rows(url, "SELECT to_regnamespace('awa')") == [(None,)]
    await handle.begin()
    assert await migrate(handle, target=shipped[0]) == shipped[:1]
    assert await migrate(handle) == shipped[1:]
    await handle.commit()
    assert applied(url) == shipped
    await handle.begin()
    assert await migrate(handle) == []
    await handle.commit()
