"""Set-based admin operations: retry / cancel / run now / delete over ids and over a filter,
one statement per batch, bounded and interruptible, with a summary and a timeline record."""

from __future__ import annotations

import getpass
import os
import subprocess
import sys
from typing import Any

import psycopg
import pytest

from awa_bridge import admin
from awa_bridge.errors import ValidationError

from .test_admin import force, insert, job_in, jobs_snapshot
from .waiting import job_state


def _many(url: str, count: int, state: str, kind: str = "bulk_job", queue: str = "bulk") -> list[int]:
    """``count`` jobs in ``state`` in one statement (test setup)."""
    finalized = "now()" if state in ("completed", "failed", "cancelled") else "NULL"
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "INSERT INTO awa.jobs (kind, queue, state, attempt, max_attempts, finalized_at) "
            f"SELECT %s, %s, CAST(%s AS awa.job_state), 1, 1, {finalized} FROM generate_series(1, %s) "
            "RETURNING id",
            [kind, queue, state, count],
        ).fetchall()
    return [r[0] for r in rows]


def _actions(url: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(url, autocommit=True) as conn:
        return conn.execute(
            "SELECT job_id, action, operator, prior_state::text FROM awa.job_actions ORDER BY id"
        ).fetchall()


def _count(url: str, where: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        return int(conn.execute(f"SELECT count(*) FROM awa.jobs WHERE {where}").fetchone()[0])


def test_retry_over_a_filter_changes_the_matching_set_in_batches_and_summarizes(db_url: str) -> None:
    failed = _many(db_url, 2500, "failed")
    other_kind = _many(db_url, 7, "failed", kind="other")
    other_queue = _many(db_url, 5, "failed", queue="elsewhere")
    _many(db_url, 30, "completed")

    result = admin.retry_jobs(db_url, state="failed", kind="bulk_job", queue="bulk", batch_size=1000)

    assert (result.changed, result.skipped, result.batches, result.stopped) == (2500, {}, 3, None)
    assert result.summary() == "2,500 retried"
    assert _count(db_url, f"id = ANY(ARRAY{failed}) AND state = 'available' AND attempt = 0") == 2500
    assert _count(db_url, f"id = ANY(ARRAY{other_kind + other_queue}) AND state = 'failed'") == 12
    assert _count(db_url, "state = 'completed'") == 30


def test_a_selection_reports_what_it_skipped_and_why(db_url: str) -> None:
    failed = _many(db_url, 24, "failed")
    completed = _many(db_url, 3, "completed")
    running = job_in(db_url, "running")

    result = admin.retry_jobs(db_url, [*failed, *completed, running, 999_999], operator="cli:ada")

    assert result.changed == 24
    assert result.skipped == {"completed": 3, "running": 1, "not found": 1}
    assert result.summary() == "24 retried; 5 skipped: 3 completed, 1 not found, 1 running"
    assert job_state(db_url, running) == "running"
    actions = _actions(db_url)
    assert len(actions) == 24 and {a[1:] for a in actions} == {("retry", "cli:ada", "failed")}

    one = admin.retry_jobs(db_url, completed[:1])
    assert one.summary() == "0 retried; 1 skipped: completed"


def test_deleting_a_running_job_is_skipped_not_reported_deleted(db_url: str) -> None:
    running = job_in(db_url, "running")
    done = job_in(db_url, "completed")
    result = admin.delete_jobs(db_url, [running, done], operator="admin:ada")
    assert result.summary() == "1 deleted; 1 skipped: running (cancel first)"
    assert _count(db_url, f"id = {running}") == 1 and _count(db_url, f"id = {done}") == 0
    assert _actions(db_url) == [(done, "delete", "admin:ada", "completed")]


def test_cancel_and_run_now_over_filters(db_url: str) -> None:
    scheduled = [insert(db_url, kind="later", queue="q", run_at="2099-01-01T00:00:00Z") for _ in range(3)]
    available = [insert(db_url, kind="now", queue="q") for _ in range(4)]
    assert admin.run_jobs_now(db_url, queue="q").summary() == "3 made available now"
    assert all(job_state(db_url, i) == "available" for i in scheduled)
    result = admin.cancel_jobs(db_url, state="available", kind="now")
    assert result.summary() == "4 cancelled"
    assert all(job_state(db_url, i) == "cancelled" for i in available)


def test_bounds_stop_between_batches_and_keep_what_was_done(db_url: str) -> None:
    _many(db_url, 50, "failed")
    capped = admin.retry_jobs(db_url, state="failed", batch_size=10, max_jobs=25)
    assert (capped.changed, capped.stopped) == (25, "max_jobs")
    assert "stopped: max_jobs" in capped.summary()
    calls = []
    stopped = admin.cancel_jobs(
        db_url, state="available", batch_size=10, should_stop=lambda: bool(calls.append(1)) or len(calls) >= 2
    )
    assert (stopped.changed, stopped.batches, stopped.stopped) == (20, 2, "interrupted")
    assert _count(db_url, "state = 'cancelled'") == 20
    rest = admin.retry_jobs(db_url, state="failed")
    assert (rest.changed, rest.stopped) == (25, None)


def test_retry_over_a_set_skips_jobs_whose_unique_key_is_held(db_url: str) -> None:
    live = insert(db_url, {"n": 1}, kind="uniq", unique={})
    force(db_url, live, "running")
    with psycopg.connect(db_url, autocommit=True) as conn:
        key = conn.execute("SELECT unique_key, unique_states FROM awa.jobs WHERE id = %s", [live]).fetchone()
        dup = conn.execute(
            "INSERT INTO awa.jobs (kind, state, unique_key, unique_states, finalized_at) "
            "VALUES ('uniq', 'failed', %s, %s, now()) RETURNING id",
            [key[0], key[1]],
        ).fetchone()[0]
    plain = _many(db_url, 2, "failed", kind="uniq")
    result = admin.retry_jobs(db_url, kind="uniq")
    assert result.summary() == "2 retried; 1 skipped: unique key held by another job"
    assert job_state(db_url, dup) == "failed" and all(job_state(db_url, i) == "available" for i in plain)


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda url: admin.retry_jobs(url, state="completed"), "state"),
        (lambda url: admin.retry_jobs(url, state="nope"), "state"),
        (lambda url: admin.retry_jobs(url, [1], kind="k"), "ids"),
        (lambda url: admin.retry_jobs(url, [0]), "job_id"),
        (lambda url: admin.cancel_jobs(url, kind="x" * 201), "kind"),
        (lambda url: admin.delete_jobs(url, state="completed", batch_size=0), "batch_size"),
        (lambda url: admin.run_jobs_now(url, queue="q", time_budget=-1), "time_budget"),
    ],
)
def test_bad_input_names_the_field_and_writes_nothing(db_url: str, call: Any, field: str) -> None:
    _many(db_url, 3, "failed")
    before = jobs_snapshot(db_url)
    with pytest.raises(ValidationError) as info:
        call(db_url)
    assert info.value.field == field
    assert jobs_snapshot(db_url) == before


def test_on_a_connection_the_batches_run_in_the_callers_transaction(db_url: str) -> None:
    _many(db_url, 30, "failed")
    with psycopg.connect(db_url) as conn:
        assert admin.retry_jobs(conn, state="failed", batch_size=7).changed == 30
        conn.rollback()
    assert _count(db_url, "state = 'failed'") == 30


async def test_the_async_form(db_url: str) -> None:
    ids = _many(db_url, 12, "failed")
    result = await admin.bulk_async(db_url, "delete", ids[:5], operator="ops")
    assert result.summary() == "5 deleted"
    assert _count(db_url, "true") == 7


def _cli(url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m awa_bridge ...`` as an operator types it."""
    env = {**os.environ, "DATABASE_URL": url}
    return subprocess.run(
        [sys.executable, "-m", "awa_bridge", *argv], env=env, capture_output=True, text=True, timeout=60
    )


def test_cli_set_actions_print_one_summary_and_record_the_operator(db_url: str) -> None:
    _many(db_url, 40, "failed", kind="K", queue="Q")
    _many(db_url, 3, "failed", kind="K", queue="other")
    done = _cli(db_url, "jobs", "retry", "--state", "failed", "--kind", "K", "--queue", "Q", "--operator", "ada")
    assert (done.returncode, done.stdout) == (0, "40 retried\n"), done.stderr
    assert {a[2] for a in _actions(db_url)} == {"ada"}
    done = _cli(db_url, "jobs", "cancel", "--kind", "K", "--queue", "Q", "--batch-size", "7")
    assert (done.returncode, done.stdout) == (0, "40 cancelled\n"), done.stderr
    assert {a[2] for a in _actions(db_url) if a[1] == "cancel"} == {f"cli:{getpass.getuser()}"}
    done = _cli(db_url, "jobs", "delete", "--state", "cancelled")
    assert (done.returncode, done.stdout) == (0, "40 deleted\n"), done.stderr
    assert _count(db_url, "true") == 3
    refused = _cli(db_url, "jobs", "retry", "--state", "completed")
    assert refused.returncode == 2 and "state: retry applies to jobs in" in refused.stderr
    refused = _cli(db_url, "jobs", "retry")
    assert refused.returncode == 2 and "needs a job id or a filter" in refused.stderr


def test_sqlalchemy_sessions_and_asyncpg_connections(db_url: str) -> None:
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    from .dbutil import with_driver

    ids = _many(db_url, 9, "failed")
    engine = create_engine(with_driver(db_url, "psycopg"))
    try:
        with Session(engine) as session:
            result = admin.retry_jobs(session, state="failed", batch_size=4, operator="sa")
            assert (result.changed, result.batches) == (9, 3)
            session.commit()
    finally:
        engine.dispose()
    assert all(job_state(db_url, i) == "available" for i in ids)


async def test_the_async_form_on_asyncpg(db_url: str) -> None:
    import asyncpg

    ids = _many(db_url, 6, "scheduled")
    conn = await asyncpg.connect(db_url)
    try:
        async with conn.transaction():
            result = await admin.bulk_async(conn, "run_now", queue="bulk", operator="ops")
    finally:
        await conn.close()
    assert result.summary() == "6 made available now"
    assert all(job_state(db_url, i) == "available" for i in ids)


def test_ctrl_c_stops_the_cli_after_the_current_batch(db_url: str) -> None:
    import signal
    import time

    _many(db_url, 100_000, "failed", kind="big")
    env = {**os.environ, "DATABASE_URL": db_url}
    proc = subprocess.Popen(
        [sys.executable, "-m", "awa_bridge", "jobs", "retry", "--kind", "big", "--batch-size", "100"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    deadline = time.monotonic() + 60
    while _count(db_url, "state = 'available'") == 0:  # the first batches are in
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.02)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    done = _count(db_url, "state = 'available'")
    assert proc.returncode == 1, (out, err)
    assert out.startswith(f"{done:,} retried") and "stopped: interrupted" in out
    assert 0 < done < 100_000 and done % 100 == 0  # whole batches only


def test_cli_bounds_reached_exit_0_and_bad_bounds_name_the_flag(db_url: str) -> None:
    """``--max-jobs`` reached exited 0 and ``--time-budget`` reached 1: both are limits the user set, not
    errors (Ctrl-C stays 1). ``--max-jobs 0`` said "max_jobs: ... or None": the flag is named."""
    _many(db_url, 2000, "failed", kind="K")
    retry = ["jobs", "retry", "--state", "failed", "--kind", "K"]
    capped = _cli(db_url, *retry, "--max-jobs", "30", "--batch-size", "10")
    assert capped.returncode == 0, (capped.stdout, capped.stderr)
    assert capped.stdout == "30 retried (stopped: max_jobs; more jobs may match, run it again to go on)\n"
    budget = _cli(db_url, *retry, "--time-budget", "0.001", "--batch-size", "1")
    assert budget.returncode == 0, (budget.stdout, budget.stderr)
    assert "(stopped: time budget; more jobs may match" in budget.stdout
    for flag, value, message in [
        ("--max-jobs", "0", "error: --max-jobs: must be a positive integer, got 0\n"),
        ("--time-budget", "0", "error: --time-budget: must be a positive number of seconds, got 0.0\n"),
        ("--batch-size", "0", "error: --batch-size: must be an integer from 1 to 100000, got 0\n"),
    ]:
        refused = _cli(db_url, "jobs", "retry", "--state", "failed", flag, value)
        assert (refused.returncode, refused.stderr) == (2, message)
