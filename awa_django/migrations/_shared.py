"""The operation behind every awa_django migration: apply one file of ``migrations/``.

Each Django migration of this app wraps exactly one ``vNNN_*.sql`` file
(``python -m awa_django.migrations._generate`` writes the wrapper of a new
file). The file is applied by ``awa_bridge.migrations.migrate_connection``
inside the Django migration's transaction, through the same runner and ledger
(``awa.bridge_migrations``) as ``python -m awa_bridge migrate``, so the two
can be mixed: a file already applied by one is skipped by the other.

Reversing: the first migration drops the ``awa`` schema (``migrate awa_django
zero`` removes everything the package installed, jobs included); the later
ones have no SQL undo of their own and leave the schema as it is (a partial
rollback is not supported, and re-applying them is then a no-op).
"""

from __future__ import annotations

from typing import Any

from django.db import migrations

DROP_SCHEMA = "DROP SCHEMA IF EXISTS awa CASCADE"


def apply_sql(file_name: str, *, first: bool = False) -> migrations.RunPython:
    """A ``RunPython`` that applies ``file_name`` (and reverses as described above)."""

    def forward(apps: Any, schema_editor: Any) -> None:
        from awa_bridge.migrations import migrate_connection

        connection = schema_editor.connection
        connection.ensure_connection()
        migrate_connection(connection.connection, target=file_name)

    def backward(apps: Any, schema_editor: Any) -> None:
        if not first:
            return
        from awa_bridge.migrations import load_migrations, pending_migrations

        connection = schema_editor.connection
        connection.ensure_connection()
        # Raises ForeignSchema on a database the real Awa migrated: that schema is not ours to drop.
        pending_migrations(connection.connection, load_migrations())
        with connection.cursor() as cursor:
            cursor.execute(DROP_SCHEMA)

    forward.__qualname__ = forward.__name__ = f"apply_{file_name.removesuffix('.sql')}"
    backward.__qualname__ = backward.__name__ = f"unapply_{file_name.removesuffix('.sql')}"
    return migrations.RunPython(forward, backward, hints={"awa_sql_file": file_name}, elidable=False)
