"""Alembic helpers: apply the shared awa migrations from a revision, keep ``awa`` out of autogenerate.

The awa schema is defined once, by the numbered SQL files in ``migrations/``
(shipped in the wheel). An Alembic project installs it from one revision of
its own, so ``alembic upgrade head`` sets up the application's tables and
the job queue together, in Alembic's transaction::

    # migrations/versions/0002_awa.py
    from alembic import op
    from awa_sqlalchemy.alembic import downgrade_awa, upgrade_awa

    revision = "0002_awa"
    down_revision = "0001_orders"

    def upgrade() -> None:
        upgrade_awa(op)

    def downgrade() -> None:
        downgrade_awa(op)

``upgrade_awa`` applies only the files that ``awa.bridge_migrations`` does not
list yet, recording each with its checksum exactly as ``awa_bridge.migrate``
does (it is the same code), so the two can be mixed: a database set up by
``python -m awa_bridge migrate`` is up to date for Alembic and vice versa.
When a later release of this package ships ``v002_*.sql``, add a revision
that calls ``upgrade_awa(op)`` again.

In ``env.py`` pass the filters, so autogenerate never proposes to create,
alter or drop anything in the ``awa`` schema::

    from awa_sqlalchemy.alembic import include_name, include_object

    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        include_schemas=True,          # optional; the filters matter most with it
        include_name=include_name,
        include_object=include_object,
    )
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from awa_bridge.migrations import drop_schema_connection, load_migrations, migrate_connection

from .models import AWA_SCHEMA

__all__ = ["AWA_SCHEMA", "downgrade_awa", "include_name", "include_object", "upgrade_awa"]


def _op(op: Any) -> Any:
    if op is not None:
        return op
    from alembic import op as alembic_op

    return alembic_op


def upgrade_awa(op: Any = None, *, directory: Path | None = None) -> list[str]:
    """Apply the pending shared migrations inside the current Alembic revision's transaction.

    ``op`` is ``alembic.op`` (the default). Online, it runs on
    ``op.get_bind()`` (psycopg or asyncpg dialect, sync or async ``env.py``)
    under the runner's advisory lock, and returns the names of
    the files it applied. The work commits or rolls back with the revision.

    Offline (``alembic upgrade --sql``) nothing can be read from the database,
    so the script gets every file and its ledger row: apply it to a database
    that has no awa schema yet.
    """
    op = _op(op)
    context = op.get_context()
    if context.as_sql:
        return _emit_offline(context, directory)
    return migrate_connection(op.get_bind(), directory=directory)


def _emit_offline(context: Any, directory: Path | None) -> list[str]:
    from awa_bridge.sql import QUERIES

    migrations = load_migrations(directory)
    impl = context.impl
    impl.static_output(QUERIES["migration_lock"].pyformat + ";")
    impl.static_output(QUERIES["create_migration_ledger"].pyformat + ";")
    for migration in migrations:
        impl.static_output(migration.sql.rstrip())
        # Names match ^v\d{3}_[a-z0-9_]+\.sql$ and checksums are hex: safe as literals.
        impl.static_output(
            f"INSERT INTO awa.bridge_migrations (name, checksum) VALUES ('{migration.name}', '{migration.checksum}');"
        )
    return [m.name for m in migrations]


def downgrade_awa(op: Any = None) -> None:
    """Remove the awa schema: ``DROP SCHEMA awa CASCADE``, refused on a database the real Awa migrated.

    Irreversible: every job, queue setting, cron schedule and the migration
    ledger go with it, and so does anything of the application's that
    depends on awa objects (CASCADE). It exists so ``alembic downgrade base``
    leaves an empty database; think twice before running it in production.
    Online it is ``awa_bridge.migrations.drop_schema_connection``, the same
    guarded drop as Django's ``migrate awa_django zero``: it raises
    ``ForeignSchema`` (and drops nothing) when ``awa.schema_version`` has rows.
    Offline (``--sql``) it writes the statement.
    """
    op = _op(op)
    context = op.get_context()
    if context.as_sql:
        from awa_bridge.sql import QUERIES

        context.impl.static_output(QUERIES["drop_awa_schema"].pyformat + ";")
        return
    drop_schema_connection(op.get_bind())


def include_name(name: str | None, type_: str, parent_names: dict[str, Any]) -> bool:
    """Alembic ``include_name`` hook: do not reflect the ``awa`` schema or its tables.

    Combine with a filter of your own as
    ``include_name=lambda *a: include_name(*a) and mine(*a)``.
    """
    if type_ == "schema":
        return name != AWA_SCHEMA
    return parent_names.get("schema_name") != AWA_SCHEMA


def include_object(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Alembic ``include_object`` hook: ignore tables, columns, indexes and constraints in ``awa``.

    Needed when the awa models' metadata reaches autogenerate (for example
    ``target_metadata=[Base.metadata, AwaBase.metadata]``), where Alembic
    would otherwise propose to create or alter awa tables.
    """
    return _schema_of(obj) != AWA_SCHEMA


def _schema_of(obj: Any) -> str | None:
    schema = getattr(obj, "schema", None)
    if schema is None:
        table = getattr(obj, "table", None)
        schema = getattr(table, "schema", None)
    return schema if isinstance(schema, str) else None
