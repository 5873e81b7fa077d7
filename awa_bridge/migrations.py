"""Apply the shared schema (the numbered SQL files in ``migrations/``).

One transaction under an advisory lock: a second process that runs at the
same time waits, then finds nothing left to do. Each applied file is recorded
in ``awa.bridge_migrations`` with a SHA-256 checksum; an applied file that was
edited afterwards stops the run. A database migrated by the real Awa (it has
rows in ``awa.schema_version``) is refused: its schema is Awa's to manage.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .errors import ForeignSchema, MigrationChecksumMismatch
from .sql import QUERIES

_FILE_NAME = re.compile(r"^v(\d{3})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode("utf-8")).hexdigest()


def migrations_dir() -> Path:
    """The packaged copy inside the wheel, or the repository's ``migrations/``."""
    packaged = Path(__file__).with_name("_migrations")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parent.parent / "migrations"


def load_migrations(directory: Path | None = None) -> list[Migration]:
    """All ``vNNN_name.sql`` files in order."""
    directory = directory or migrations_dir()
    files = sorted(p for p in directory.glob("v*.sql") if _FILE_NAME.match(p.name))
    if not files:
        raise FileNotFoundError(f"no migration files (vNNN_name.sql) in {directory}")
    return [Migration(p.name, p.read_text(encoding="utf-8")) for p in files]


def _fetch(conn: Any, query: str, params: dict[str, Any] | None = None) -> list[tuple[Any, ...]]:
    cursor = conn.execute(QUERIES[query].pyformat, params)
    return cursor.fetchall() if cursor.description else []


def pending_migrations(conn: Any, available: list[Migration]) -> list[Migration]:
    """Check the database and return what is left to apply (psycopg connection, in a transaction)."""
    if (
        _fetch(conn, "relation_exists", {"name": "awa.schema_version"})[0][0]
        and _fetch(conn, "awa_schema_version_rows")[0][0]
    ):
        raise ForeignSchema(
            "this database was migrated by the real Awa (awa.schema_version has rows); "
            "awa_bridge will not change its schema. Use awa-pg's own migrations for it; "
            "the bridge's insert_job still works on it."
        )
    if not _fetch(conn, "relation_exists", {"name": "awa.bridge_migrations"})[0][0]:
        return list(available)
    applied = dict(_fetch(conn, "applied_migrations"))
    known = {m.name: m for m in available}
    unknown = sorted(set(applied) - set(known))
    if unknown:
        raise MigrationChecksumMismatch(
            f"the database has migration {unknown[0]} applied, which this package does not ship; "
            "it was migrated by a newer version"
        )
    for name, checksum in applied.items():
        if known[name].checksum != checksum:
            raise MigrationChecksumMismatch(
                f"migration {name} was edited after it was applied (checksum {checksum[:12]}... in the "
                f"database, {known[name].checksum[:12]}... on disk); "
                "restore the file, or write a new migration"
            )
    return [m for m in available if m.name not in applied]


def migrate(database_url: str, *, dry_run: bool = False, directory: Path | None = None) -> list[str]:
    """Bring the database up to date; return the names of the files applied (or pending, on a dry run)."""
    import psycopg

    available = load_migrations(directory)
    with psycopg.connect(database_url, autocommit=False) as conn:
        with conn.transaction():
            _fetch(conn, "migration_lock")
            pending = pending_migrations(conn, available)
            if dry_run or not pending:
                return [m.name for m in pending]
            conn.execute(QUERIES["create_migration_ledger"].pyformat)
            for migration in pending:
                conn.execute(migration.sql.encode("utf-8"))
                _fetch(conn, "record_migration", {"name": migration.name, "checksum": migration.checksum})
        return [m.name for m in pending]
