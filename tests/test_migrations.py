"""The migration runner on throwaway databases: ledger, checksums, refusal, concurrency (R8).

Each test gets empty databases from ``make_database`` and runs the real
runner (``awa_bridge.migrate``) or the real CLI in a subprocess.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from awa_bridge import ForeignSchema, MigrationChecksumMismatch, migrate

REPO = Path(__file__).resolve().parent.parent
MIGRATION_FILES = sorted(REPO.joinpath("migrations").glob("v*.sql"))
NAMES = [path.name for path in MIGRATION_FILES]

MakeDatabase = Callable[[], str]


def cli_env() -> dict[str, str]:
    """The CLI subprocesses get their URL from --database-url only."""
    return {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m awa_bridge ...`` in a subprocess."""
    return subprocess.run(
        [sys.executable, "-m", "awa_bridge", *args],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
    )


def fetch(url: str, sql: str) -> list[tuple]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(sql).fetchall()


def ledger(url: str) -> list[tuple[str, str]]:
    return fetch(url, "SELECT name, checksum FROM awa.bridge_migrations ORDER BY name")


def has_awa_schema(url: str) -> bool:
    return fetch(url, "SELECT to_regnamespace('awa') IS NOT NULL")[0][0]


def relations_in_awa(url: str) -> list[str]:
    rows = fetch(
        url,
        "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = 'awa' ORDER BY 1",
    )
    return [name for (name,) in rows]


def test_migrate_applies_and_records_checksums(make_database: MakeDatabase) -> None:
    assert NAMES and NAMES[0] == "v001_schema.sql"
    url = make_database()

    assert migrate(url) == NAMES
    assert ledger(url) == [(p.name, hashlib.sha256(p.read_bytes()).hexdigest()) for p in MIGRATION_FILES]
    assert fetch(url, "SELECT count(*) FROM awa.bridge_migrations WHERE applied_at IS NULL") == [(0,)]
    assert fetch(url, "SELECT to_regclass('awa.jobs') IS NOT NULL") == [(True,)]


def test_second_run_is_a_no_op(make_database: MakeDatabase) -> None:
    url = make_database()
    migrate(url)
    before = fetch(url, "SELECT name, checksum, applied_at FROM awa.bridge_migrations ORDER BY name")

    assert migrate(url) == []
    assert migrate(url, dry_run=True) == []
    assert fetch(url, "SELECT name, checksum, applied_at FROM awa.bridge_migrations ORDER BY name") == before


def test_dry_run_lists_pending_and_changes_nothing(make_database: MakeDatabase) -> None:
    url = make_database()
    assert migrate(url, dry_run=True) == NAMES
    assert not has_awa_schema(url)


def test_cli_dry_run_then_apply_then_nothing(make_database: MakeDatabase) -> None:
    url = make_database()

    dry = cli("migrate", "--database-url", url, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert "would apply" in dry.stdout
    assert all(name in dry.stdout for name in NAMES)
    assert not has_awa_schema(url)

    real = cli("migrate", "--database-url", url)
    assert real.returncode == 0, real.stderr
    assert "applied" in real.stdout
    assert all(name in real.stdout for name in NAMES)
    assert [name for name, _ in ledger(url)] == NAMES

    again = cli("migrate", "--database-url", url)
    assert again.returncode == 0, again.stderr
    assert "nothing to apply" in again.stdout


def test_edited_ledger_checksum_is_refused(make_database: MakeDatabase) -> None:
    url = make_database()
    migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("UPDATE awa.bridge_migrations SET checksum = 'x' WHERE name = %s", (NAMES[0],))

    with pytest.raises(MigrationChecksumMismatch, match=re.escape(NAMES[0])):
        migrate(url)
    with pytest.raises(MigrationChecksumMismatch, match=re.escape(NAMES[0])):
        migrate(url, dry_run=True)

    result = cli("migrate", "--database-url", url)
    assert result.returncode == 2
    assert NAMES[0] in result.stderr
    assert "edited after it was applied" in result.stderr
    assert result.stdout == ""


def test_edited_file_on_disk_is_refused(make_database: MakeDatabase, tmp_path: Path) -> None:
    url = make_database()
    for path in MIGRATION_FILES:
        shutil.copy(path, tmp_path / path.name)
    assert migrate(url, directory=tmp_path) == NAMES
    recorded = ledger(url)

    edited = tmp_path / NAMES[0]
    edited.write_text(edited.read_text(encoding="utf-8") + "\n-- an afterthought\n", encoding="utf-8")
    with pytest.raises(MigrationChecksumMismatch, match=re.escape(NAMES[0])) as info:
        migrate(url, directory=tmp_path)
    assert "edited" in str(info.value)
    assert ledger(url) == recorded


def test_migration_unknown_to_this_package_is_refused(make_database: MakeDatabase) -> None:
    """A ledger row for a file we do not ship means a newer version migrated this database."""
    url = make_database()
    migrate(url)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("INSERT INTO awa.bridge_migrations (name, checksum) VALUES ('v999_future.sql', 'x')")
    with pytest.raises(MigrationChecksumMismatch, match=re.escape("v999_future.sql")):
        migrate(url)


def test_database_migrated_by_real_awa_is_left_untouched(make_database: MakeDatabase) -> None:
    url = make_database()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE SCHEMA awa")
        conn.execute(
            "CREATE TABLE awa.schema_version (version int PRIMARY KEY, description text NOT NULL, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        conn.execute("INSERT INTO awa.schema_version (version, description) VALUES (9, 'awa-pg 0.6.9')")
    before = fetch(url, "SELECT version, description, applied_at FROM awa.schema_version")

    with pytest.raises(ForeignSchema, match=r"awa\.schema_version"):
        migrate(url)
    with pytest.raises(ForeignSchema):
        migrate(url, dry_run=True)
    result = cli("migrate", "--database-url", url)
    assert result.returncode == 2
    assert "real Awa" in result.stderr

    assert relations_in_awa(url) == ["schema_version", "schema_version_pkey"]
    assert fetch(url, "SELECT to_regtype('awa.job_state') IS NULL") == [(True,)]
    assert fetch(url, "SELECT version, description, applied_at FROM awa.schema_version") == before


def assert_ledger_converged(url: str) -> None:
    """R8 invariant: one ledger row per shipped file, no duplicates, up to the packaged version."""
    total, distinct, newest = fetch(url, "SELECT count(*), count(DISTINCT name), max(name) FROM awa.bridge_migrations")[
        0
    ]
    assert (total, distinct, newest) == (len(NAMES), len(NAMES), NAMES[-1])
    assert fetch(url, "SELECT count(*) FROM pg_type WHERE typname = 'job_state'") == [(1,)]


def test_r8_concurrent_migrate_converges(make_database: MakeDatabase) -> None:
    """docs/reliability.md R8: 8 threads, each with its own connection, migrate a fresh database at once."""
    url = make_database()
    threads = 8
    barrier = threading.Barrier(threads, timeout=30)
    results: list[list[str] | BaseException | None] = [None] * threads

    def run(i: int) -> None:
        try:
            barrier.wait()
            results[i] = migrate(url)
        except BaseException as exc:
            results[i] = exc

    workers = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(timeout=60)
    assert not any(worker.is_alive() for worker in workers), "a migrate() call hung"

    errors = [r for r in results if isinstance(r, BaseException)]
    assert not errors, errors
    assert sorted(results, key=len) == [[]] * (threads - 1) + [NAMES]
    assert_ledger_converged(url)


def test_r8_concurrent_cli_processes(make_database: MakeDatabase) -> None:
    url = make_database()
    command = [sys.executable, "-m", "awa_bridge", "migrate", "--database-url", url]
    procs = [
        subprocess.Popen(command, cwd=REPO, env=cli_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=60) for proc in procs]

    assert [proc.returncode for proc in procs] == [0, 0], outputs
    stdouts = sorted(out for out, _err in outputs)
    assert stdouts[0].startswith("applied") and stdouts[1].startswith("nothing to apply"), outputs
    assert_ledger_converged(url)


def test_schema_not_migrated_keeps_its_problem_apart_from_the_advice(make_database: Callable[[], str]) -> None:
    """What is missing (``problem``) and how to migrate, apart, so a framework words its own advice;
    it survives a pickle (an error crossing to or from a child process) without doubling the advice."""
    import pickle

    from awa_bridge import SchemaNotMigrated
    from awa_bridge.migrations import require_schema

    with pytest.raises(SchemaNotMigrated) as caught:
        require_schema(make_database())
    error = caught.value
    assert error.problem.startswith("the awa schema on this database lacks v001_schema.sql")
    assert (
        str(error)
        == f"{error.problem}; run `python -m awa_bridge migrate` (in a Django project: `python manage.py migrate`)"
    )
    again = pickle.loads(pickle.dumps(error))
    assert (again.problem, str(again)) == (error.problem, str(error))
