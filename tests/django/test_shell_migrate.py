"""``manage.py migrate`` typed in a shell (a subprocess, so Django runs its system checks first).

``call_command("migrate")`` skips the checks, which is how a database check
that blocked migrate went unnoticed: these tests run the commands the way a
user does, each on a fresh database.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from awa_bridge.migrations import load_migrations
from awa_bridge.sql import QUERIES

pytestmark = pytest.mark.django

REPO = Path(__file__).resolve().parents[2]
ALL_FILES = [m.name for m in load_migrations()]


def manage(url: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``python -m django ARGS`` on the test project, its databases on ``url``."""
    environ = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    environ.update(AWA_TEST_DATABASE_URL=url, DJANGO_SETTINGS_MODULE="tests.django.project.settings", **env)
    return subprocess.run(
        [sys.executable, "-m", "django", *args],
        cwd=REPO,
        env=environ,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


def ledger(url: str) -> list[str]:
    with psycopg.connect(url) as conn:
        if conn.execute("SELECT to_regclass('awa.bridge_migrations')").fetchone()[0] is None:
            return []
        return [row[0] for row in conn.execute("SELECT name FROM awa.bridge_migrations ORDER BY name")]


def test_migrate_from_the_shell_on_a_fresh_database_then_zero_then_again(
    make_database: Callable[[], str],
) -> None:
    url = make_database()
    out = ok(manage(url, "migrate"))
    assert "Applying awa_django.0001_v001_schema... OK" in out
    assert ledger(url) == ALL_FILES
    checked = ok(manage(url, "check", "--database", "default"))
    assert "awa_django" not in checked

    ok(manage(url, "migrate", "awa_django", "zero"))
    assert ledger(url) == []
    ok(manage(url, "migrate", "awa_django", "--database", "default"))  # the hint's own command
    assert ledger(url) == ALL_FILES


def test_a_new_shared_file_pending_is_a_warning_and_migrate_applies_it(make_database: Callable[[], str]) -> None:
    url = make_database()
    previous = f"{len(ALL_FILES) - 1:04d}"
    ok(manage(url, "migrate", "awa_django", previous))
    assert ledger(url) == ALL_FILES[:-1]
    checked = ok(manage(url, "check", "--database", "default"))  # exit 0: a warning, not an error
    assert "awa_django.W003" in checked and ALL_FILES[-1] in checked
    out = ok(manage(url, "migrate"))
    assert f"Applying awa_django.{len(ALL_FILES):04d}" in out
    assert ledger(url) == ALL_FILES


def test_sqlmigrate_prints_the_ddl_the_migration_runs(make_database: Callable[[], str]) -> None:
    url = make_database()
    out = ok(manage(url, "sqlmigrate", "awa_django", "0001"))
    first = load_migrations()[0]
    assert "CREATE TABLE awa.jobs" in out and "CREATE TYPE awa.job_state" in first.sql
    assert first.sql.strip() in out
    assert f"INSERT INTO awa.bridge_migrations (name, checksum) VALUES ('{first.name}', '{first.checksum}')" in out
    backwards = ok(manage(url, "sqlmigrate", "awa_django", "0001", "--backwards"))
    assert "DROP SCHEMA IF EXISTS awa CASCADE" in backwards
    assert ledger(url) == []  # printing changed nothing


def test_migrate_on_the_jobs_alias_with_the_router(make_database: Callable[[], str]) -> None:
    """docs/howto/django.md's two-database set-up: `migrate`, then `migrate --database jobs`."""
    default_url, jobs_url = make_database(), make_database()
    env = {"AWA_TEST_JOBS_DATABASE_URL": jobs_url, "AWA_TEST_AWA_DATABASE": "jobs"}
    ok(manage(default_url, "migrate", **env))
    assert ledger(default_url) == [] and ledger(jobs_url) == []
    ok(manage(default_url, "migrate", "--database", "jobs", **env))
    assert ledger(jobs_url) == ALL_FILES and ledger(default_url) == []
    checked = ok(manage(default_url, "check", "--database", "jobs", **env))
    assert "awa_django" not in checked


def test_an_unmigrated_jobs_alias_is_named_in_every_hint(make_database: Callable[[], str]) -> None:
    """AWA['DATABASE'] = 'jobs' without the schema there: plain `migrate` never touches that alias,
    so the commands' errors say what the check W003 says, `migrate --database jobs`, which fixes it."""
    default_url, jobs_url = make_database(), make_database()
    env = {"AWA_TEST_JOBS_DATABASE_URL": jobs_url, "AWA_TEST_AWA_DATABASE": "jobs"}
    for command in (["awa_jobs", "list"], ["awa_queues", "stats"], ["awa_cron", "list"], ["awa_worker"]):
        done = manage(default_url, *command, **env)
        errors = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 1 and len(errors) == 1, (command, done.stderr)
        assert errors[0].startswith("CommandError: the awa schema"), errors[0]
        assert errors[0].endswith("; run `python manage.py migrate --database jobs`"), errors[0]
    checked = ok(manage(default_url, "check", "--database", "jobs", **env))
    assert "awa_django.W003" in checked and "Run `python manage.py migrate --database jobs`" in checked
    ok(manage(default_url, "migrate", "--database", "jobs", **env))
    assert ok(manage(default_url, "awa_jobs", "list", **env)) == "(none)\n"


def test_zero_refuses_a_database_the_real_awa_migrated(make_database: Callable[[], str]) -> None:
    url = make_database()
    ok(manage(url, "migrate"))
    with psycopg.connect(url) as conn:
        conn.execute("CREATE TABLE awa.schema_version (version int PRIMARY KEY, description text NOT NULL)")
        conn.execute("INSERT INTO awa.schema_version VALUES (9, 'awa-pg 0.6.9')")
    done = manage(url, "migrate", "awa_django", "zero", "--skip-checks")
    assert done.returncode != 0
    assert "migrated by the real Awa" in done.stderr
    assert ledger(url) == ALL_FILES  # nothing dropped


def test_the_shop_example_migrates_from_the_shell(make_database: Callable[[], str]) -> None:
    url = make_database()
    environ = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    environ["DATABASE_URL"] = url
    done = subprocess.run(
        [sys.executable, "examples/django_shop/manage.py", "migrate"],
        cwd=REPO,
        env=environ,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert ledger(url) == ALL_FILES


# The key both runners wait on (queries.sql, migration_lock: SELECT pg_advisory_xact_lock(KEY)).
MIGRATION_LOCK = int(re.search(r"pg_advisory_xact_lock\((\d+)\)", QUERIES["migration_lock"].pyformat)[1])  # type: ignore[index]


def test_r8_manage_py_migrate_racing_a_bridge_migrate_converges(make_database: Callable[[], str]) -> None:
    """R8: ``manage.py migrate`` and ``python -m awa_bridge migrate`` on one fresh database at once.

    The test holds the migration lock until both processes wait on it, then lets them go together:
    both succeed, each shared file is applied once (one ledger row each), Django records every
    awa_django migration, and a second run of either has nothing to do."""
    url = make_database()
    environ = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    django_env = {**environ, "AWA_TEST_DATABASE_URL": url, "DJANGO_SETTINGS_MODULE": "tests.django.project.settings"}
    commands = [
        ([sys.executable, "-m", "django", "migrate"], django_env),
        ([sys.executable, "-m", "awa_bridge", "migrate", "--database-url", url], environ),
    ]
    with psycopg.connect(url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(%s)", (MIGRATION_LOCK,))
        procs = [
            subprocess.Popen(
                command, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True,
            )
            for command, env in commands
        ]  # fmt: skip
        try:
            waiting = 0
            for _ in range(600):  # both blocked on the lock (Django after its own apps' migrations)
                waiting = holder.execute(
                    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
                ).fetchone()[0]  # type: ignore[index]
                if waiting == 2 or any(proc.poll() is not None for proc in procs):
                    break
                time.sleep(0.1)
            if waiting != 2:
                for proc in procs:
                    proc.kill()
                outputs = [proc.communicate(timeout=30)[0] for proc in procs]
                raise AssertionError(f"{waiting} of the 2 runs waited on the migration lock: {outputs}")
        finally:
            holder.execute("SELECT pg_advisory_unlock(%s)", (MIGRATION_LOCK,))
        outputs = [proc.communicate(timeout=120)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0], outputs
    django_out, bridge_out = outputs
    assert "Applying awa_django.0001_v001_schema... OK" in django_out
    assert bridge_out.startswith(("applied", "nothing to apply")), bridge_out
    assert ledger(url) == ALL_FILES
    with psycopg.connect(url) as conn:
        recorded = conn.execute("SELECT count(*) FROM django_migrations WHERE app = 'awa_django'").fetchone()[0]  # type: ignore[index]
    assert recorded == len(ALL_FILES)
    assert "No migrations to apply" in ok(manage(url, "migrate"))
    assert "awa_django" not in ok(manage(url, "check", "--database", "default"))
    again = subprocess.run(
        commands[1][0], cwd=REPO, env=environ, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=60
    )
    assert again.returncode == 0 and "nothing to apply" in again.stdout, again
