"""examples/django_shop end to end: the one-command demo the README starts with."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

pytestmark = pytest.mark.django

REPO = Path(__file__).resolve().parents[2]


def test_run_demo_migrates_places_orders_and_runs_the_worker(make_database: Callable[[], str]) -> None:
    url = make_database()
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    env["DATABASE_URL"] = url
    done = subprocess.run(
        [sys.executable, "examples/django_shop/run_demo.py", "--timeout", "60"],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "rolled back; no order and no job left behind" in out
    assert "completed on attempt 2, after 1 failed attempt(s): SMTP server timed out" in out
    assert "worker stopped on SIGTERM with exit code 0" in out
    assert "every order confirmed exactly once" in out
    assert "--serve" in out and "admin / admin" in out
    with psycopg.connect(url) as conn:
        states = conn.execute("SELECT state::text, count(*) FROM awa.jobs GROUP BY 1").fetchall()
        outbox = conn.execute("SELECT count(*) FROM shop_sentemail").fetchone()[0]
        schedules = conn.execute("SELECT name FROM awa.cron_jobs").fetchall()
    assert states == [("completed", 3)] and outbox == 3 and schedules == [("daily_sales_report",)]
