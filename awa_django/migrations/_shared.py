"""The operation behind every awa_django migration: apply one file of ``migrations/``.

Each Django migration of this app wraps exactly one ``vNNN_*.sql`` file
(``python -m awa_django.migrations._generate`` writes the wrapper of a new
file). The operation is a ``RunSQL`` whose statements are the file and its
ledger row, so ``manage.py sqlmigrate awa_django 0001`` prints the DDL. When
it runs, the file is applied by ``awa_bridge.migrations.migrate_connection``
inside the Django migration's transaction, through the same runner and ledger
(``awa.bridge_migrations``) as ``python -m awa_bridge migrate``, so the two
can be mixed: a file already applied by one is skipped by the other, and a
database the real Awa migrated is refused.

Reversing: the first migration drops the ``awa`` schema (``migrate awa_django
zero`` removes everything the package installed, jobs included; refused on a
database the real Awa migrated); the later ones have no SQL undo of their own
and leave the schema as it is (a partial rollback is not supported, and
re-applying them is then a no-op).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations, router


class ApplySQLFile(migrations.RunSQL):
    """``RunSQL`` of one shared file, run through the bridge's migration runner."""

    def __init__(self, file_name: str, *, first: bool = False) -> None:
        from awa_bridge.migrations import migration_script
        from awa_bridge.sql import QUERIES

        self.file_name = file_name
        self.first = first
        super().__init__(
            sql=tuple(migration_script(file_name)),
            reverse_sql=(QUERIES["drop_awa_schema"].pyformat,) if first else migrations.RunSQL.noop,
            hints={"awa_sql_file": file_name},
            elidable=False,
        )

    def deconstruct(self) -> tuple[str, list[Any], dict[str, Any]]:
        return (f"{__name__}.{type(self).__qualname__}", [self.file_name], {"first": self.first} if self.first else {})

    def describe(self) -> str:
        return f"Apply {self.file_name} to the awa schema"

    def database_forwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.collect_sql:  # sqlmigrate: print the statements
            super().database_forwards(app_label, schema_editor, from_state, to_state)
            return
        if not router.allow_migrate(schema_editor.connection.alias, app_label, **self.hints):
            return
        from awa_bridge.migrations import migrate_connection

        connection = schema_editor.connection
        connection.ensure_connection()
        migrate_connection(connection.connection, target=self.file_name)

    def database_backwards(self, app_label: str, schema_editor: Any, from_state: Any, to_state: Any) -> None:
        if schema_editor.collect_sql or not self.first:
            super().database_backwards(app_label, schema_editor, from_state, to_state)
            return
        if not router.allow_migrate(schema_editor.connection.alias, app_label, **self.hints):
            return
        from awa_bridge.migrations import drop_schema_connection

        connection = schema_editor.connection
        connection.ensure_connection()
        drop_schema_connection(connection.connection)


def apply_sql(file_name: str, *, first: bool = False) -> ApplySQLFile:
    """The operation that applies ``file_name`` (and reverses as described above)."""
    return ApplySQLFile(file_name, first=first)
