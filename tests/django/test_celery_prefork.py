"""cookiecutter-django's Celery limits with ``CELERY_WORKER_POOL = "prefork"``, typed as a user would:
a fresh ``startproject`` with Celery's Django layout (imports changed to ``awa_django.celery``),
``manage.py migrate``, ``manage.py awa_worker``, tasks enqueued from ``manage.py shell``. A task
using the ORM runs in a child process (which set Django up first); one stuck in ``time.sleep``
that ignores ``CELERY_TASK_SOFT_TIME_LIMIT`` has its child killed at ``CELERY_TASK_TIME_LIMIT``
and fails with ``TimeLimitExceeded``.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import psycopg
import pytest

from ..procs import wait_for
from .test_user_paths import DJANGO_ADMIN, clean_env, ok, run

pytestmark = pytest.mark.django

CELERY_MODULE = """
import os

from awa_django.celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "mysite.settings")
app = Celery("mysite")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
"""

TASKS_MODULE = """
import os
import time

from django.contrib.auth.models import User  # needs Django set up: in a child, before this import

from awa_bridge.celery import SoftTimeLimitExceeded, shared_task


@shared_task
def count_users():
    return {"users": User.objects.count(), "pid": os.getpid()}


@shared_task
def stuck():
    try:
        time.sleep(3600)
    except SoftTimeLimitExceeded:  # the soft limit interrupted the sleep; this one ignores it
        time.sleep(3600)
"""


def last_line(done: subprocess.CompletedProcess[str]) -> list[str]:
    """The words of what the shell command printed last (Django's shell may print a banner first)."""
    return ok(done).strip().splitlines()[-1].split()


ENQUEUE = "from shop.tasks import count_users, stuck; print(count_users.delay().id, stuck.delay().id)"


def test_prefork_children_set_django_up_and_are_killed_at_the_time_limit(tmp_path: Path, make_database: object) -> None:
    from ..dbutil import django_database

    url = make_database()  # type: ignore[operator]
    ok(run(tmp_path, str(DJANGO_ADMIN), "startproject", "mysite"))
    root = tmp_path / "mysite"
    (root / "mysite" / "celery.py").write_text(CELERY_MODULE)
    (root / "mysite" / "__init__.py").write_text("from .celery import app as celery_app\n")
    (root / "shop").mkdir()
    (root / "shop" / "__init__.py").write_text("")
    (root / "shop" / "tasks.py").write_text(TASKS_MODULE)
    settings = root / "mysite" / "settings.py"
    settings.write_text(
        settings.read_text()
        + "\nINSTALLED_APPS += ['awa_django', 'shop']\n"
        + f"DATABASES = {{'default': {django_database(url)!r}}}\n"
        + "AWA = {'QUEUES': {'default': {'poll_interval': 0.2}}}\n"
        + "CELERY_WORKER_POOL = 'prefork'\nCELERY_TASK_TIME_LIMIT = 2\nCELERY_TASK_SOFT_TIME_LIMIT = 1\n"
    )
    ok(run(root, sys.executable, "manage.py", "migrate"))
    worker = subprocess.Popen(
        [sys.executable, "manage.py", "awa_worker"],
        cwd=root,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        users_id, stuck_id = last_line(run(root, sys.executable, "manage.py", "shell", "-c", ENQUEUE))

        def state(job_id: str) -> str | None:
            with psycopg.connect(url) as conn:
                row = conn.execute("SELECT state::text FROM awa.jobs WHERE id = %s", (int(job_id),)).fetchone()
            return None if row is None else row[0]

        def settled() -> bool:
            done = ("completed", "failed")
            return (state(users_id) in done and state(stuck_id) in done) or worker.poll() is not None

        wait_for(settled, 40, "both jobs to end")
        assert worker.poll() is None, worker.communicate()[0]
        read = "from shop.tasks import stuck; r = stuck.AsyncResult('{}'); print(r.state, type(r.result).__name__)"
        with psycopg.connect(url) as conn:
            job = (int(users_id),)
            (errors,) = conn.execute("SELECT errors FROM awa.jobs WHERE id = %s", job).fetchone()
            (result,) = conn.execute("SELECT result FROM awa.job_results WHERE job_id = %s", job).fetchone()
        shell = [sys.executable, "manage.py", "shell", "-c"]
        assert last_line(run(root, *shell, read.format(users_id)))[0] == "SUCCESS", errors
        assert last_line(run(root, *shell, read.format(stuck_id))) == ["FAILURE", "TimeLimitExceeded"]
        assert result["users"] == 0 and result["pid"] != worker.pid  # the ORM worked, in a child process
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
            worker.communicate()
