"""Apply the shared schema (the numbered SQL files in ``migrations/``).

One transaction under an advisory lock: a second process that runs at the
same time waits, then finds nothing left to do. Each applied file is recorded
in ``awa.bridge_migrations`` with a SHA-256 checksum; an applied file that was
edited afterwards stops the run. A database migrated by the real Awa (it has
rows in ``awa.schema_version``) is refused: its schema is Awa's to manage.

``migrate(url)`` opens its own connection and transaction.
``migrate_connection(conn)`` does the same work on a connection the caller
holds and inside the caller's transaction (psycopg, or a SQLAlchemy
``Connection`` such as Alembic's ``op.get_bind()``): one runner, one ledger,
whichever tool applies the files.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Generator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .drivers.connect import connect_sync
from .errors import ForeignSchema, MigrationChecksumMismatch, SchemaNotMigrated
from .sql import QUERIES

if TYPE_CHECKING:
    from .drivers.base import SyncDriver

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


def _unsupported(conn: Any, hint: str) -> TypeError:
    return TypeError(
        "migrate_connection needs a psycopg Connection or a SQLAlchemy Connection (for an AsyncConnection: "
        f"await conn.run_sync(migrate_connection)), got {type(conn).__module__}.{type(conn).__qualname__}; {hint}"
    )


def _driver(conn: Any) -> SyncDriver:
    """The driver for a psycopg connection or a SQLAlchemy ``Connection`` (in the caller's transaction)."""
    from .drivers import detect_sync

    module = type(conn).__module__.split(".")[0]
    if module == "sqlalchemy" and not hasattr(conn, "exec_driver_sql"):
        raise _unsupported(conn, "for a Session pass session.connection()")
    if module == "asyncpg" or type(conn).__name__ == "AsyncConnection":
        raise _unsupported(conn, "the runner is synchronous: pass a psycopg Connection, or a SQLAlchemy one")
    if module == "django":
        raise _unsupported(conn, "with Django, run `manage.py migrate awa_django`")
    if module == "psycopg":
        from .drivers.psycopg import idle_in_autocommit

        if idle_in_autocommit(conn):
            raise ValueError(
                "migrate_connection needs a transaction: this psycopg connection is in autocommit mode "
                "with none open; call it inside `with conn.transaction():`"
            )
    return detect_sync(conn)


# The checks below are written once as a plan of reads (a generator that yields a
# statement and receives its rows), run by a sync driver (the migration runner,
# the CLI) or an async one (the worker, on its own pool at start-up).
Reads = Generator[tuple[Any, dict[str, Any] | None], list[dict[str, Any]], Any]


def _run_sync(driver: SyncDriver, plan: Reads) -> Any:
    try:
        query, params = next(plan)
        while True:
            query, params = plan.send(driver.fetch_all(query, params))
    except StopIteration as done:
        return done.value


async def _run_async(driver: Any, plan: Reads) -> Any:
    try:
        query, params = next(plan)
        while True:
            query, params = plan.send(await driver.fetch_all(query, params))
    except StopIteration as done:
        return done.value


def _present(relation: str) -> Reads:
    rows = yield QUERIES["relation_exists"], {"name": relation}
    return bool(rows[0]["present"])


def _refuse_foreign() -> Reads:
    """Raise ``ForeignSchema`` on a database the real Awa migrated (its schema is not ours to change)."""
    if (yield from _present("awa.schema_version")) and (yield QUERIES["awa_schema_version_rows"], None)[0]["n"]:
        raise ForeignSchema(
            "this database was migrated by the real Awa (awa.schema_version has rows); "
            "awa_bridge will not change its schema. Use awa-pg's own migrations for it; "
            "the bridge's insert_job still works on it."
        )


def _pending_reads(available: list[Migration]) -> Reads:
    yield from _refuse_foreign()
    if not (yield from _present("awa.bridge_migrations")):
        return list(available)
    applied = {row["name"]: row["checksum"] for row in (yield QUERIES["applied_migrations"], None)}
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


def _pending(driver: SyncDriver, available: list[Migration]) -> list[Migration]:
    pending: list[Migration] = _run_sync(driver, _pending_reads(available))
    return pending


def pending_migrations(conn: Any, available: list[Migration]) -> list[Migration]:
    """Check the database and return what is left to apply (psycopg or SQLAlchemy connection, in a transaction)."""
    return _pending(_driver(conn), available)


def migrate_connection(
    conn: Any, *, dry_run: bool = False, directory: Path | None = None, target: str | None = None
) -> list[str]:
    """Apply what is pending on a connection the caller holds, inside the caller's transaction.

    For tools that own the transaction, such as an Alembic revision
    (``op.get_bind()``) or a deploy script that migrates and seeds at once.
    ``conn`` is a psycopg 3 ``Connection`` (in a transaction, or not in
    autocommit mode) or a SQLAlchemy ``Connection`` on the psycopg, psycopg2 or
    asyncpg dialect (for an
    ``AsyncConnection``: ``await conn.run_sync(migrate_connection)``); any
    other connection (asyncpg, a Session, Django's) is a TypeError saying
    what to pass, before anything runs. It
    never commits: the advisory lock is released and the applied files
    become visible when the caller commits, and a rollback undoes them.
    With ``target`` (a file name such as ``"v001_schema.sql"``) only the
    pending files up to and including it are applied; later ones stay pending
    (Django's migrations apply one file each this way).
    Returns the names of the files applied (or pending, on a dry run).
    """
    available = load_migrations(directory)
    if target is not None and target not in {m.name for m in available}:
        raise FileNotFoundError(f"no migration file named {target!r} in {directory or migrations_dir()}")
    driver = _driver(conn)
    driver.execute(QUERIES["migration_lock"])
    pending = _pending(driver, available)
    if target is not None:
        pending = [m for m in pending if m.name <= target]
    if dry_run or not pending:
        return [m.name for m in pending]
    driver.execute_script(QUERIES["create_migration_ledger"].pyformat)
    for migration in pending:
        driver.execute_script(migration.sql)
        driver.execute(QUERIES["record_migration"], {"name": migration.name, "checksum": migration.checksum})
    return [m.name for m in pending]


def drop_schema_connection(conn: Any) -> None:
    """Drop the ``awa`` schema (jobs, settings, ledger: everything), inside the caller's transaction.

    The one undo of the shared migrations, behind Django's ``migrate
    awa_django zero`` and Alembic's ``downgrade_awa``: both refuse, with
    ``ForeignSchema``, a database the real Awa migrated. Same connections as
    ``migrate_connection``.
    """
    driver = _driver(conn)
    driver.execute(QUERIES["migration_lock"])
    _run_sync(driver, _refuse_foreign())
    driver.execute_script(QUERIES["drop_awa_schema"].pyformat)


def migration_script(name: str, directory: Path | None = None) -> list[str]:
    """The statements ``migrate_connection`` runs to apply file ``name`` (for ``sqlmigrate`` and review).

    The lock, the ledger table, the file as shipped, and its ledger row. The
    runner adds what plain SQL cannot say: it skips a file the ledger already
    records and refuses a database the real Awa migrated.
    """
    found = {m.name: m for m in load_migrations(directory)}
    if name not in found:
        raise FileNotFoundError(f"no migration file named {name!r} in {directory or migrations_dir()}")
    migration = found[name]
    literals = {"name": f"'{migration.name}'", "checksum": f"'{migration.checksum}'"}
    return [
        QUERIES["migration_lock"].pyformat,
        QUERIES["create_migration_ledger"].pyformat,
        migration.sql.strip(),
        QUERIES["record_migration"].pyformat % literals,
    ]


def require_schema(database_url: str) -> None:
    """Raise ``SchemaNotMigrated`` unless the database has every file this package ships.

    A database the real Awa migrated passes: its own migrations keep it current.
    """
    with connect_sync(database_url, autocommit=False) as db, db.transaction():
        try:
            pending = _pending(db, load_migrations())
        except ForeignSchema:
            return
    _raise_pending(pending)


async def require_schema_async(driver: Any) -> None:
    """``require_schema`` on an async driver the caller holds (the worker's pool, at start-up).

    A worker calls it before it claims anything, so an unmigrated database
    stops it with one line saying what to run, instead of a loop of failing
    statements.
    """
    try:
        pending = await _run_async(driver, _pending_reads(load_migrations()))
    except ForeignSchema:
        return
    _raise_pending(pending)


def _raise_pending(pending: list[Migration]) -> None:
    if pending:
        names = ", ".join(m.name for m in pending)
        raise SchemaNotMigrated(f"the awa schema on this database lacks {names}")


def migrate(database_url: str, *, dry_run: bool = False, directory: Path | None = None) -> list[str]:
    """Bring the database up to date; return the names of the files applied (or pending, on a dry run)."""
    with connect_sync(database_url, autocommit=False) as db, db.transaction():
        return migrate_connection(db.conn, dry_run=dry_run, directory=directory)
