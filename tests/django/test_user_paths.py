"""A new Django user's first steps, typed in a shell: startproject, install the app, migrate, run jobs.

Every command is a subprocess in a fresh project on a fresh database, exactly
as docs/howto/django.md tells a user to type it; nothing reaches the package
through an internal door (``call_command`` skips the system checks, which is
how a check that blocked ``migrate`` once went unnoticed).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from io import StringIO
from pathlib import Path

import psycopg
import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.test import override_settings

from awa_bridge.migrations import load_migrations

from ..dbutil import django_database
from ..procs import wait_for

pytestmark = pytest.mark.django

REPO = Path(__file__).resolve().parents[2]
DJANGO_ADMIN = Path(sys.executable).with_name("django-admin")

JOBS_MODULE = """
from pathlib import Path

import awa_django


@awa_django.task(queue="default")
def greet(name: str) -> None:
    Path(__file__).with_name("greeted.txt").write_text(f"hello {name}")
"""


def clean_env() -> dict[str, str]:
    """The user's shell: no test settings module, no DATABASE_URL of the suite."""
    return {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "PYTHONPATH")}


def run(cwd: Path, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        list(args), cwd=cwd, env=clean_env(), stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=timeout
    )


def ok(done: subprocess.CompletedProcess[str]) -> str:
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout + done.stderr


@pytest.fixture
def project(tmp_path: Path, make_database: Callable[[], str]) -> tuple[Path, str]:
    """``django-admin startproject mysite`` + ``INSTALLED_APPS += ["awa_django"]`` + DATABASES on a fresh database."""
    url = make_database()
    ok(run(tmp_path, str(DJANGO_ADMIN), "startproject", "mysite"))
    root = tmp_path / "mysite"
    (root / "mysite" / "jobs.py").write_text(JOBS_MODULE)
    settings = root / "mysite" / "settings.py"
    database = {k: v for k, v in django_database(url).items()}
    settings.write_text(
        settings.read_text()
        + "\nINSTALLED_APPS += ['awa_django']\n"
        + f"DATABASES = {{'default': {database!r}}}\n"
        + "AWA = {'TASK_MODULES': ['mysite.jobs'], 'QUEUES': {'default': {'poll_interval': 0.2}}}\n"
    )
    return root, url


def test_startproject_migrate_check_worker_and_an_enqueue_from_the_shell(project: tuple[Path, str]) -> None:
    root, url = project
    python = sys.executable
    migrated = ok(run(root, python, "manage.py", "migrate"))
    assert "Applying awa_django.0001_v001_schema... OK" in migrated
    checked = ok(run(root, python, "manage.py", "check", "--database", "default"))
    assert "no issues" in checked
    with psycopg.connect(url) as conn:
        applied = [r[0] for r in conn.execute("SELECT name FROM awa.bridge_migrations ORDER BY name")]
    assert applied == [m.name for m in load_migrations()]

    worker = subprocess.Popen(
        [python, "manage.py", "awa_worker", "--log-format", "json"],
        cwd=root,
        env=clean_env(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        enqueue = "from mysite.jobs import greet; print(greet.enqueue('ada').id)"
        shell = ok(run(root, python, "manage.py", "shell", "-c", enqueue))
        job_id = int(shell.strip().splitlines()[-1])

        def state() -> str | None:
            with psycopg.connect(url) as conn:
                row = conn.execute("SELECT state::text FROM awa.jobs WHERE id = %s", (job_id,)).fetchone()
            return None if row is None else row[0]

        wait_for(lambda: state() == "completed" or worker.poll() is not None, 30, "the job to complete")
        assert worker.poll() is None, worker.communicate()
        assert (root / "mysite" / "greeted.txt").read_text() == "hello ada"
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
            worker.communicate()
    assert worker.returncode == 0, out + err
    assert "awa worker stopped" in out and "Traceback" not in err
    logged = [json.loads(line) for line in err.splitlines() if line.strip()]  # every line is JSON
    assert any(entry["message"].startswith("worker started") for entry in logged), err


def test_manage_py_prints_the_tables_python_m_awa_bridge_prints(project: tuple[Path, str]) -> None:
    """``python manage.py awa_queues stats`` / ``awa_cron list`` in a fresh project: the same tables
    as ``python -m awa_bridge queues stats`` / ``cron list`` (one drawing, in cli_core), byte for byte
    but for the queue of AWA['QUEUES'] no job has used yet, which only manage.py knows (in zeros)."""
    root, url = project
    python = sys.executable
    ok(run(root, python, "manage.py", "migrate"))
    ok(run(root, python, "-m", "awa_bridge", "queues", "pause", "reports", "--create", "--database-url", url))
    made = [
        "cron", "create", "digest", "--cron", "0 8 * * *", "--kind", "mysite.jobs.greet", "--timezone", "Asia/Tokyo"
    ]  # fmt: skip
    ok(run(root, python, "-m", "awa_bridge", *made, "--database-url", url))
    ok(run(root, python, "-m", "awa_bridge", "cron", "pause", "digest", "--by", "ops", "--database-url", url))
    tables = []
    for managed, typed in ((["awa_queues", "stats"], ["queues", "stats"]), (["awa_cron", "list"], ["cron", "list"])):
        django_out = ok(run(root, python, "manage.py", *managed))
        cli_out = ok(run(root, python, "-m", "awa_bridge", *typed, "--database-url", url))
        tables.append((django_out, cli_out))
    (django_queues, cli_queues), (django_cron, cli_cron) = tables
    assert django_cron == cli_cron, (django_cron, cli_cron)
    header, reports = cli_queues.splitlines()
    unused = ["default", "no", *["0"] * 7, "-"]
    assert [line.split() for line in django_queues.splitlines()] == [header.split(), unused, reports.split()]
    assert reports.split()[:2] == ["reports", "yes"]
    listed = ok(run(root, python, "manage.py", "awa_cron", "list")).splitlines()
    assert listed[0].split()[:3] == ["name", "source", "cron_expr"] and "yes (by ops)" in listed[1]


def test_commands_on_an_unmigrated_project_say_to_migrate(project: tuple[Path, str]) -> None:
    root, _ = project
    for command in (["awa_jobs", "list"], ["awa_queues", "stats"], ["awa_cron", "list"], ["awa_worker"]):
        done = run(root, sys.executable, "manage.py", *command, timeout=60)
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        assert "Traceback" not in done.stderr, done.stderr
        errors = [line for line in done.stderr.splitlines() if line.strip()]
        assert len(errors) == 1 and errors[0].startswith("CommandError: "), done.stderr
        assert "manage.py migrate" in errors[0]
    # The check names what is pending (a warning: it does not block migrate).
    checked = ok(run(root, sys.executable, "manage.py", "check", "--database", "default"))
    assert "awa_django.W003" in checked and "v001_schema.sql" in checked


def test_a_task_module_that_does_not_import_stops_startup(project: tuple[Path, str]) -> None:
    root, _ = project
    settings = root / "mysite" / "settings.py"
    settings.write_text(settings.read_text() + "AWA['TASK_MODULES'] = ['mysite.jbos']\n")
    for command in (["check"], ["awa_worker"]):
        done = run(root, sys.executable, "manage.py", *command, timeout=60)
        assert done.returncode == 1, done.stdout + done.stderr
        assert "awa_django.E004" in done.stderr and "'mysite.jbos' cannot be imported" in done.stderr
        assert "Traceback" not in done.stderr


def test_task_modules_check_in_process() -> None:
    with override_settings(AWA={"TASK_MODULES": ["tests.django.testapp.tasks", "tests.django.testapp.nope"]}):
        found = [m for m in checks.run_checks() if m.id == "awa_django.E004"]
    assert len(found) == 1 and "tests.django.testapp.nope" in found[0].msg


@pytest.mark.django_db(transaction=True)
def test_awa_queues_pause_an_unknown_queue_needs_create(awa: None) -> None:
    from awa_django.models import QueueMeta

    with pytest.raises(CommandError, match=r"unknown queue 'emial'.*--create"):
        call_command("awa_queues", "pause", "emial")
    assert not QueueMeta.objects.exists()
    call_command("awa_queues", "pause", "email", stdout=StringIO())  # in AWA['QUEUES']
    call_command("awa_queues", "pause", "later", "--create", stdout=StringIO())
    assert sorted(QueueMeta.objects.values_list("queue", flat=True)) == ["email", "later"]


@pytest.mark.django_db(transaction=True)
def test_manage_py_and_the_cli_print_the_same_for_the_same_action(awa: None, capsys) -> None:  # type: ignore[no-untyped-def]
    """One core (awa_bridge.cli_core) behind both: the Django commands only supply the connection."""
    import awa_django
    from awa_bridge import cli
    from awa_django.db import database_url

    url = database_url("default")
    job = awa_django.insert_job({"to": "ada@example.com"}, kind="send_email", queue="email")

    def both(manage_args: list[str], cli_args: list[str]) -> tuple[str, str]:
        out = StringIO()
        call_command(*manage_args, stdout=out)
        assert cli.main([*cli_args, "--database-url", url]) == 0
        return out.getvalue(), capsys.readouterr().out

    shown, printed = both(["awa_jobs", "show", str(job.id)], ["jobs", "--id", str(job.id)])
    assert shown == printed and '"to": "ada@example.com"' in shown and "errors (0):" in shown
    cancelled, _ = both(["awa_jobs", "cancel", str(job.id)], ["jobs", "retry", str(job.id)])
    assert cancelled.startswith(f"job {job.id} (send_email, queue email): cancelled")
    listed, printed = both(["awa_jobs", "list"], ["jobs"])
    assert listed == printed and str(job.id) in listed
    paused, printed = both(["awa_queues", "pause", "email"], ["queues", "pause", "email"])
    assert (
        paused == printed == "queue email paused: workers stop claiming within one poll interval; running jobs finish\n"
    )
