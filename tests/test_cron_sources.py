"""Settings and code own the schedules they declare; operators own the ones they create.

A worker starting with a declaration set deletes the schedules its owner declared before and no
longer declares (they never fire again); database-only schedules are created, edited (validated
by croniter and zoneinfo) and deleted through awa_bridge.cron_edit and `python -m awa_bridge cron`.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest

from awa_bridge import cron, cron_edit
from awa_bridge.cron import PeriodicJob
from awa_bridge.errors import ValidationError
from awa_bridge.worker.maintenance.cron import fire_due_schedules


def _names(url: str) -> dict[str, tuple[str, str | None]]:
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT c.name, s.source, s.owner FROM awa.cron_jobs c "
            "LEFT JOIN awa.cron_job_sources s USING (name) ORDER BY 1"
        ).fetchall()
    return {name: (source, owner) for name, source, owner in rows}


async def _start(client: Any) -> None:
    await client.start(["default"])
    await client.shutdown(timeout=2)


async def test_a_schedule_removed_from_the_declarations_is_deleted_at_the_next_start(
    make_client: Any, db_url: str
) -> None:
    first = make_client()
    first.periodic("hourly_report", "0 * * * *", {}, kind="report")
    first.periodic("old_cleanup", "*/5 * * * *", {}, kind="cleanup")
    await _start(first)
    billing = make_client(schedule_owner="billing")
    billing.periodic("invoices", "0 1 * * *", {}, kind="invoice")
    await _start(billing)
    cron_edit.create_schedule(db_url, PeriodicJob("ad_hoc", "*/10 * * * *", {}, kind="adhoc"))
    assert _names(db_url) == {
        "ad_hoc": ("database", None),
        "hourly_report": ("declared", "default"),
        "invoices": ("declared", "billing"),
        "old_cleanup": ("declared", "default"),
    }

    second = make_client()
    second.periodic("hourly_report", "0 * * * *", {}, kind="report")
    await _start(second)

    assert set(_names(db_url)) == {"ad_hoc", "hourly_report", "invoices"}  # other owners and operators' stay
    tick = await _fire(db_url)
    assert "old_cleanup" not in tick.enqueued


async def _fire(url: str) -> Any:
    import asyncpg

    conn = await asyncpg.connect(url)
    try:
        return await fire_due_schedules(conn, now=datetime(2099, 1, 1, tzinfo=UTC))
    finally:
        await conn.close()


def test_database_schedules_are_created_edited_and_deleted_with_validation(db_url: str) -> None:
    cron_edit.create_schedule(
        db_url, PeriodicJob("ad_hoc", "0 9 * * 1-5", {"x": 1}, kind="adhoc", timezone="Europe/Paris")
    )
    with pytest.raises(ValidationError) as exists:
        cron_edit.create_schedule(db_url, PeriodicJob("ad_hoc", "0 9 * * *", {}, kind="adhoc"))
    assert exists.value.field == "name"
    with pytest.raises(ValidationError) as bad_cron:
        PeriodicJob("ad_hoc", "61 * * * *", {}, kind="adhoc")
    assert bad_cron.value.field == "cron_expr"
    with pytest.raises(ValidationError) as bad_zone:
        PeriodicJob("ad_hoc", "0 * * * *", {}, kind="adhoc", timezone="Mars/Olympus")
    assert bad_zone.value.field == "timezone"

    cron_edit.update_schedule(
        db_url, PeriodicJob("ad_hoc", "30 8 * * *", {"x": 2}, kind="adhoc", timezone="Asia/Tokyo")
    )
    info = cron.get_schedule(db_url, "ad_hoc")
    assert (info.cron_expr, info.timezone, info.args, info.source) == ("30 8 * * *", "Asia/Tokyo", {"x": 2}, "database")
    with pytest.raises(cron.ScheduleNotFound):
        cron_edit.update_schedule(db_url, PeriodicJob("ghost", "0 * * * *", {}, kind="k"))

    with psycopg.connect(db_url) as conn:
        cron.upsert_schedules_sync(conn, [PeriodicJob("declared_one", "0 * * * *", {}, kind="k")])
        conn.commit()
    with pytest.raises(cron_edit.DeclaredSchedule, match="declared in settings or code"):
        cron_edit.delete_schedule(db_url, "declared_one")
    with pytest.raises(cron_edit.DeclaredSchedule):
        cron_edit.update_schedule(db_url, PeriodicJob("declared_one", "5 * * * *", {}, kind="k"))
    assert cron.get_schedule(db_url, "declared_one").cron_expr == "0 * * * *"
    cron_edit.delete_schedule(db_url, "ad_hoc")
    assert set(_names(db_url)) == {"declared_one"}


def _cli(url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "awa_bridge", *argv], env=env, capture_output=True, text=True, timeout=60
    )


def test_cli_create_edit_delete(db_url: str) -> None:
    made = _cli(
        db_url,
        "cron",
        "create",
        "digest",
        "--cron",
        "0 7 * * *",
        "--timezone",
        "Europe/London",
        "--kind",
        "digest",
        "--args",
        '{"to": "staff"}',
    )
    assert made.returncode == 0, made.stderr
    listed = _cli(db_url, "cron", "list")
    assert "digest" in listed.stdout and "database" in listed.stdout
    edited = _cli(db_url, "cron", "edit", "digest", "--cron", "15 7 * * 1")
    assert edited.returncode == 0, edited.stderr
    info = cron.get_schedule(db_url, "digest")
    assert (info.cron_expr, info.timezone, info.args) == ("15 7 * * 1", "Europe/London", {"to": "staff"})
    bad = _cli(db_url, "cron", "edit", "digest", "--timezone", "Nowhere/Land")
    assert bad.returncode == 2 and "timezone" in bad.stderr
    bad = _cli(db_url, "cron", "create", "other", "--cron", "0 7 * * *")
    assert bad.returncode == 2 and "--kind: is required" in bad.stderr
    assert cron.get_schedule(db_url, "digest").timezone == "Europe/London"
    gone = _cli(db_url, "cron", "delete", "digest")
    assert gone.returncode == 0, gone.stderr
    assert _names(db_url) == {}
