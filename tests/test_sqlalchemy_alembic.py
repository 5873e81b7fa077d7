"""Alembic support against a real PostgreSQL, in a real Alembic environment.

A throwaway Alembic project (alembic.ini, env.py, two revisions: the app's
``orders`` table, then ``upgrade_awa(op)``) is written to a temporary folder
and driven with the ``alembic`` command line, as a user would. Also
``migrate_connection``, the runner entry point the helpers use.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.ext.asyncio import create_async_engine
from sqlalchemy.orm import Session

import awa_bridge
from awa_bridge.migrations import load_migrations, migrate_connection

from .dbutil import with_driver

ENV_PY = '''
"""env.py of a typical application, with the awa filters."""
import asyncio
import os

from alembic import context
from sqlalchemy import create_engine, pool

from app_models import Base
from awa_sqlalchemy.alembic import include_name, include_object

URL = os.environ["APP_DATABASE_URL"]
FILTERS = {"include_name": include_name, "include_object": include_object}
if os.environ.get("APP_NO_AWA_FILTERS"):
    FILTERS = {}


def run_offline() -> None:
    context.configure(url=URL, target_metadata=Base.metadata, literal_binds=True, **FILTERS)
    with context.begin_transaction():
        context.run_migrations()


def run_with(connection) -> None:
    context.configure(connection=connection, target_metadata=Base.metadata, include_schemas=True, **FILTERS)
    with context.begin_transaction():
        context.run_migrations()


async def run_async() -> None:
    from sqlalchemy.ext.asyncio import create_async_engine

    engine = create_async_engine(URL, poolclass=pool.NullPool)
    async with engine.connect() as connection:
        await connection.run_sync(run_with)
    await engine.dispose()


if context.is_offline_mode():
    run_offline()
elif URL.startswith("postgresql+asyncpg"):
    asyncio.run(run_async())
else:
    engine = create_engine(URL, poolclass=pool.NullPool)
    with engine.connect() as connection:
        run_with(connection)
    engine.dispose()
'''

APP_MODELS = """
from datetime import datetime

from sqlalchemy import DateTime, Text, func
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"

    id: Mapped[int] = mapped_column(primary_key=True)
    customer: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), server_default=func.now())
"""

REV_ORDERS = '''
"""the application's orders table"""
import sqlalchemy as sa
from alembic import op

revision = "0001_orders"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "orders",
        sa.Column("id", sa.Integer(), primary_key=True),
        sa.Column("customer", sa.Text(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("orders")
'''

REV_AWA = '''
"""the awa job queue schema"""
from alembic import op

from awa_sqlalchemy.alembic import downgrade_awa, upgrade_awa

revision = "0002_awa"
down_revision = "0001_orders"
branch_labels = None
depends_on = None


def upgrade() -> None:
    upgrade_awa(op)


def downgrade() -> None:
    downgrade_awa(op)
'''

ALEMBIC_INI = """
[alembic]
script_location = %(here)s/migrations
prepend_sys_path = .
path_separator = os
"""


class AlembicProject:
    """An Alembic project in a folder, run through the ``alembic`` command line."""

    def __init__(self, root: Path, url: str) -> None:
        self.root = root
        self.url = url
        (root / "migrations" / "versions").mkdir(parents=True)
        (root / "alembic.ini").write_text(ALEMBIC_INI)
        (root / "app_models.py").write_text(APP_MODELS)
        (root / "migrations" / "env.py").write_text(ENV_PY)
        (root / "migrations" / "script.py.mako").write_text(_script_template())
        (root / "migrations" / "versions" / "0001_orders.py").write_text(REV_ORDERS)
        (root / "migrations" / "versions" / "0002_awa.py").write_text(REV_AWA)

    def run(self, *args: str, no_filters: bool = False) -> str:
        env = {"APP_DATABASE_URL": self.url, "PATH": "/usr/bin:/bin"}
        if no_filters:
            env["APP_NO_AWA_FILTERS"] = "1"
        done = subprocess.run(
            [sys.executable, "-m", "alembic", "-c", "alembic.ini", *args],
            cwd=self.root,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, f"alembic {' '.join(args)} failed:\n{done.stdout}\n{done.stderr}"
        return done.stdout

    def autogenerate(self, message: str, *, no_filters: bool = False) -> str:
        """The text of the revision autogenerate writes (the file is removed again)."""
        before = set((self.root / "migrations" / "versions").glob("*.py"))
        self.run("revision", "--autogenerate", "-m", message, no_filters=no_filters)
        (created,) = set((self.root / "migrations" / "versions").glob("*.py")) - before
        source = created.read_text()
        created.unlink()
        return source


def _script_template() -> str:
    import alembic

    return (Path(alembic.__file__).parent / "templates" / "generic" / "script.py.mako").read_text()


def upgrade_body(source: str) -> str:
    return source.split("def upgrade()", 1)[1].split("def downgrade()", 1)[0]


def schema_state(url: str) -> tuple[bool, bool, list[tuple[str, str]]]:
    """(awa schema exists, orders exists, ledger rows)."""
    with psycopg.connect(url, autocommit=True) as conn:
        awa = conn.execute("SELECT to_regnamespace('awa') IS NOT NULL").fetchone()[0]
        orders = conn.execute("SELECT to_regclass('public.orders') IS NOT NULL").fetchone()[0]
        ledger = (
            conn.execute("SELECT name, checksum FROM awa.bridge_migrations ORDER BY name").fetchall() if awa else []
        )
    return awa, orders, ledger


def expected_ledger() -> list[tuple[str, str]]:
    """Every shipped migration file with its checksum (read now: the list grows with releases)."""
    return [(m.name, m.checksum) for m in load_migrations()]


def shipped() -> list[str]:
    return [name for name, _ in expected_ledger()]


def test_alembic_upgrade_autogenerate_downgrade(tmp_path: Path, make_database) -> None:
    url = make_database()
    project = AlembicProject(tmp_path, with_driver(url, "psycopg"))

    project.run("upgrade", "head")
    assert schema_state(url) == (True, True, expected_ledger())
    assert awa_bridge.migrate(url) == [], "the runner and Alembic share one ledger"
    with psycopg.connect(url) as conn:
        job = awa_bridge.insert_job_sync(conn, {"order": 1}, kind="send_receipt")
        conn.commit()
    assert job.id == 1

    generated = project.autogenerate("nothing to do")
    body = upgrade_body(generated)
    assert "op." not in body and "pass" in body, generated
    operations = generated.split("def upgrade()", 1)[1]  # upgrade and downgrade bodies
    assert "op." not in operations and "awa" not in operations, generated

    # Control: the same autogenerate without the filters does see the awa schema.
    unfiltered = project.autogenerate("without filters", no_filters=True)
    assert "schema='awa'" in upgrade_body(unfiltered) and "op.drop_table('jobs', schema='awa')" in unfiltered

    project.run("downgrade", "base")
    assert schema_state(url) == (False, False, [])
    project.run("upgrade", "head")  # and back, on the same database
    assert schema_state(url) == (True, True, expected_ledger())


def test_alembic_async_env_on_asyncpg(tmp_path: Path, make_database) -> None:
    """The async env.py template (run_sync on asyncpg) applies and removes the schema too."""
    url = make_database()
    project = AlembicProject(tmp_path, with_driver(url, "asyncpg"))
    project.run("upgrade", "head")
    assert schema_state(url) == (True, True, expected_ledger())
    assert awa_bridge.migrate(url) == []
    project.run("downgrade", "0001_orders")
    assert schema_state(url) == (False, True, [])
    project.run("downgrade", "base")
    assert schema_state(url) == (False, False, [])


# -- migrate_connection: the runner on a connection the caller holds --------------------------


def test_migrate_connection_joins_a_sqlalchemy_transaction(make_database) -> None:
    url = make_database()
    engine = create_engine(with_driver(url, "psycopg"))
    try:
        with engine.connect() as conn:
            with conn.begin() as tx:
                assert migrate_connection(conn, dry_run=True) == shipped()
                assert migrate_connection(conn) == shipped()
                conn.execute(text("CREATE TABLE seeded (id int)"))
                tx.rollback()
            assert schema_state(url)[0] is False, "a rollback undoes the migration with the caller's work"
            with conn.begin():
                assert migrate_connection(conn) == shipped()
            with conn.begin():
                assert migrate_connection(conn) == []
        with Session(engine) as session, pytest.raises(TypeError, match=r"session\.connection\(\)"):
            migrate_connection(session)
    finally:
        engine.dispose()
    assert schema_state(url) == (True, False, expected_ledger())
    assert awa_bridge.migrate(url) == []


async def test_migrate_connection_on_asyncpg_via_run_sync(make_database) -> None:
    url = make_database()
    engine = create_async_engine(with_driver(url, "asyncpg"))
    try:
        async with engine.begin() as conn:
            assert await conn.run_sync(migrate_connection) == shipped()
            assert await conn.run_sync(migrate_connection) == []
    finally:
        await engine.dispose()
    assert schema_state(url) == (True, False, expected_ledger())


def test_migrate_connection_on_psycopg(make_database) -> None:
    url = make_database()
    with psycopg.connect(url, autocommit=True) as conn:
        with pytest.raises(ValueError, match="autocommit mode"):
            migrate_connection(conn)
        with conn.transaction():
            assert migrate_connection(conn) == shipped()
    assert schema_state(url) == (True, False, expected_ledger())


def test_offline_script_applies_with_psql_semantics(tmp_path: Path, make_database) -> None:
    """The ``--sql`` script is plain SQL: run as one script it builds the same schema and ledger."""
    url = make_database()
    project = AlembicProject(tmp_path, with_driver(url, "psycopg"))
    script = project.run("upgrade", "head", "--sql")
    assert "CREATE TABLE orders" in script and script.count("CREATE TABLE awa.jobs") == 1
    for name, checksum in expected_ledger():
        assert f"VALUES ('{name}', '{checksum}')" in script
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(script.encode())
    assert schema_state(url) == (True, True, expected_ledger())
    assert awa_bridge.migrate(url) == []


@pytest.mark.parametrize("driver", ["psycopg", "asyncpg"])
async def test_downgrade_awa_is_the_guarded_drop(make_database, driver: str) -> None:
    """downgrade_awa refuses a database the real Awa migrated (as Django's zero does) and drops ours."""
    from alembic.migration import MigrationContext
    from alembic.operations import Operations

    from awa_sqlalchemy.alembic import downgrade_awa

    url = make_database()
    awa_bridge.migrate(url)
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE awa.schema_version (version int PRIMARY KEY, description text NOT NULL)")
        conn.execute("INSERT INTO awa.schema_version VALUES (9, 'awa-pg 0.6.9')")

    def downgrade(connection) -> None:  # type: ignore[no-untyped-def]
        downgrade_awa(Operations(MigrationContext.configure(connection)))

    if driver == "psycopg":
        engine = create_engine(with_driver(url, "psycopg"))
        with pytest.raises(awa_bridge.ForeignSchema), engine.begin() as connection:
            downgrade(connection)
        assert schema_exists(url)
        with psycopg.connect(url) as conn:
            conn.execute("DROP TABLE awa.schema_version")
        with engine.begin() as connection:
            downgrade(connection)
        engine.dispose()
    else:
        aengine = create_async_engine(with_driver(url, "asyncpg"))
        with pytest.raises(awa_bridge.ForeignSchema):
            async with aengine.begin() as connection:
                await connection.run_sync(downgrade)
        assert schema_exists(url)
        with psycopg.connect(url) as conn:
            conn.execute("DROP TABLE awa.schema_version")
        async with aengine.begin() as connection:
            await connection.run_sync(downgrade)
        await aengine.dispose()
    assert not schema_exists(url)


def schema_exists(url: str) -> bool:
    with psycopg.connect(url) as conn:
        return bool(conn.execute("SELECT count(*) FROM pg_namespace WHERE nspname = 'awa'").fetchone()[0])
