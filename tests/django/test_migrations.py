"""Django migrations: one thin wrapper per SQL file, `migrate` installs the schema, `zero` removes it."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command
from django.db import connections
from django.test import override_settings

from awa_bridge.migrations import load_migrations
from awa_django.migrations import _generate

pytestmark = pytest.mark.django


def test_every_sql_file_has_exactly_one_wrapper_in_order() -> None:
    wrappers = _generate.wrappers()
    applied = [file for _, file in wrappers if file]
    assert applied == [m.name for m in load_migrations()], "run: python -m awa_django.migrations._generate"
    assert len(set(applied)) == len(applied)
    names = [name for name, _ in wrappers]
    assert [int(n[:4]) for n in names] == list(range(1, len(names) + 1))
    for name, file in wrappers:
        if file:
            assert re.sub(r"^\d{4}_", "", name) == file.removesuffix(".sql")
    assert _generate.main(["--check"]) == 0


@pytest.mark.django_db(databases=["default", "jobs"])
def test_models_match_the_migrations() -> None:
    call_command("makemigrations", "awa_django", "--check", "--dry-run", verbosity=0)


def _schema_tables(alias: str) -> set[str]:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = 'awa'")
        return {row[0] for row in cursor.fetchall()}


def _ledger(alias: str) -> list[str]:
    with connections[alias].cursor() as cursor:
        cursor.execute("SELECT name FROM awa.bridge_migrations ORDER BY name")
        return [row[0] for row in cursor.fetchall()]


@pytest.mark.django_db
def test_the_test_database_was_migrated_through_django() -> None:
    assert {"jobs", "queue_meta", "cron_jobs", "bridge_migrations"} <= _schema_tables("default")
    assert _ledger("default") == [m.name for m in load_migrations()]


@pytest.mark.django_db(databases=["default", "jobs"], transaction=True)
def test_migrate_on_a_non_default_alias_and_zero_removes_it() -> None:
    """AWA['DATABASE'] = 'jobs' with AwaRouter: the schema goes to jobs only, and zero drops it there."""
    import awa_bridge
    from awa_django.db import database_url

    # The test database of "jobs" was created while AWA['DATABASE'] was "default":
    # Django recorded the awa migrations there without running them (the router said no).
    assert _schema_tables("jobs") == set()
    with override_settings(AWA={"DATABASE": "jobs"}):
        call_command("migrate", "awa_django", "zero", database="jobs", verbosity=0)
        call_command("migrate", "awa_django", database="jobs", verbosity=0)
        assert {"jobs", "queue_meta", "cron_jobs"} <= _schema_tables("jobs")
        assert _ledger("jobs") == [m.name for m in load_migrations()]
        # `manage.py migrate` on default leaves it alone (the router sends awa to jobs).
        call_command("migrate", "awa_django", "zero", database="default", verbosity=0)
        assert "jobs" in _schema_tables("default")
        call_command("migrate", "awa_django", database="default", verbosity=0)

        call_command("migrate", "awa_django", "zero", database="jobs", verbosity=0)
        assert _schema_tables("jobs") == set()

        # The Django migrations and `python -m awa_bridge migrate` share one ledger.
        assert awa_bridge.migrate(database_url("jobs")) == [m.name for m in load_migrations()]
        call_command("migrate", "awa_django", database="jobs", verbosity=0)
        assert _ledger("jobs") == [m.name for m in load_migrations()]
        call_command("migrate", "awa_django", "zero", database="jobs", verbosity=0)
    assert _schema_tables("jobs") == set()
    assert "jobs" in _schema_tables("default")
    connections["jobs"].close()
