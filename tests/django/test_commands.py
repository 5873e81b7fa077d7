"""Management commands: awa_worker as a real process (SIGTERM, exit codes), and the operation commands."""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command, load_command_class
from django.db import connection

import awa_django
from awa_bridge.cron import upsert_schedules_sync
from awa_django.conf import build_schedule, get_settings
from awa_django.db import database_url
from awa_django.models import Job, QueueMeta

from .conftest import job_state, running_worker, wait_for
from .testapp import tasks
from .testapp.models import Order

pytestmark = [pytest.mark.django, pytest.mark.django_db(transaction=True)]

REPO = Path(__file__).resolve().parents[2]


def manage(
    *args: str,
    settings: str = "tests.django.project.settings",
    pythonpath: Path | None = None,
    extra_env: dict[str, str] | None = None,
    **popen,
) -> subprocess.Popen:
    paths = [str(pythonpath)] if pythonpath is not None else []
    env = {
        **os.environ,
        "AWA_TEST_DATABASE_URL": database_url("default"),
        "PYTHONPATH": os.pathsep.join([*paths, str(REPO)]),
        **(extra_env or {}),
    }
    return subprocess.Popen(
        [sys.executable, "-m", "django", *args, "--settings", settings],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **popen,
    )


def manage_done(
    *args: str, settings: str = "tests.django.project.settings", pythonpath: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """``manage`` run to its end."""
    process = manage(*args, settings=settings, pythonpath=pythonpath)
    out, err = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def run(command: str, *args: str) -> str:
    out = StringIO()
    call_command(command, *args, stdout=out)
    return out.getvalue()


def test_awa_worker_runs_jobs_and_stops_gracefully_on_sigterm(awa: None) -> None:
    orders = [Order.objects.create(customer=f"c{i}@example.com") for i in range(3)]
    jobs = [tasks.send_confirmation.enqueue(order.id) for order in orders]
    out, err = worker_until(
        lambda: all(job_state(job.id) == "completed" for job in jobs), "--queue", "email:2", "--queue", "default"
    )
    assert "queues email (2), default (4)" in out
    assert "awa worker stopped" in out
    assert "shutting down" in err
    assert "event loop: asyncio.unix_events" in err  # AWA['WORKER']['event_loop'] defaults to asyncio's own
    assert "periodic jobs declared: nightly_digest (1 new or changed)" in err
    assert Order.objects.filter(confirmed=True).count() == 3


def test_awa_worker_deletes_a_schedule_removed_from_settings(awa: None) -> None:
    """Settings are the truth for AWA['PERIODIC']: the worker started after the last schedule was
    removed says so and deletes it (and its next fires) from the database."""
    _, err = worker_until(lambda: cron_names() == ["nightly_digest"], "--queue", "default")
    assert "periodic jobs declared: nightly_digest" in err, err
    _, err = worker_until(lambda: cron_names() == [], "--queue", "default", extra_env={"AWA_TEST_NO_PERIODIC": "1"})
    assert "no periodic jobs declared" in err, err
    assert "periodic jobs no longer declared, deleted: nightly_digest" in err, err


def worker_until(done: Callable[[], bool], *args: str, extra_env: dict[str, str] | None = None) -> tuple[str, str]:
    """Run ``manage.py awa_worker ARGS`` until ``done()``, stop it with SIGTERM; its stdout and stderr
    (it must still be running then, and exit 0)."""
    worker = manage("awa_worker", *args, extra_env=extra_env)
    try:
        wait_for(lambda: worker.poll() is not None or done())
        assert worker.poll() is None, worker.communicate()
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, err
    return out, err


def cron_names() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT name FROM awa.cron_jobs ORDER BY name")
        return [name for (name,) in cursor.fetchall()]


def test_awa_worker_refuses_bad_configuration(awa: None) -> None:
    bad = manage("awa_worker", settings="tests.django.project.settings_bad")
    _, err = bad.communicate(timeout=60)
    assert bad.returncode != 0
    assert "InvalidAwaSetting: AWA['QUEUES']['email']['max_workers']: must be" in err and "got 0" in err
    with pytest.raises(CommandError, match="--queue"):
        call_command("awa_worker", "--queue", "email:x")
    with pytest.raises(CommandError, match="given twice"):
        call_command("awa_worker", "--queue", "email", "--queue", "email:3")


def test_awa_worker_without_asyncpg_says_to_install_it(awa: None, tmp_path: Path) -> None:
    """A project that installed the django extra alone gets one CommandError line, not a traceback."""
    from tests.test_user_paths import not_installed

    absent = not_installed(tmp_path, "asyncpg")
    done = manage_done("awa_worker", "--queue", "email:1", pythonpath=absent)
    assert done.returncode == 1, done
    lines = done.stderr.strip().splitlines()
    assert lines[-1] == (
        "CommandError: asyncpg is not installed, and the worker and Client run on it: pip install asyncpg"
        " (or awa-bridge's extra [asyncpg])"
    ), done.stderr
    assert "Traceback" not in done.stderr
    assert any("(awa_django.W002) the worker needs asyncpg, which is not installed" in line for line in lines)


def test_check_says_which_worker_driver_is_missing(tmp_path: Path) -> None:
    """W002: a project that installed the django extra alone hears, before it starts a worker, what to
    install (the worker runs on asyncpg and psycopg_pool; enqueueing needs neither)."""
    from tests.test_user_paths import not_installed

    not_installed(tmp_path, "asyncpg")
    done = manage_done("check", pythonpath=not_installed(tmp_path, "psycopg_pool"))
    assert done.returncode == 0, done  # a warning: enqueueing works
    assert "?: (awa_django.W002) the worker needs asyncpg and psycopg_pool, which are not installed" in done.stderr
    assert "HINT: pip install asyncpg psycopg-pool (awa-bridge's extras [asyncpg,psycopg])" in done.stderr
    assert "awa_django.W002" not in manage_done("check").stderr


def test_awa_worker_help_explains_itself() -> None:
    helped = manage("awa_worker", "--help")
    out, _ = helped.communicate(timeout=60)
    assert helped.returncode == 0
    for words in ("--queue NAME[:N]", "AWA['QUEUES']", "SIGTERM", "drain", "exit"):
        assert words in out


@pytest.mark.parametrize(
    ("queue", "settings_lines", "error"),
    [
        (
            "email:5:executor=process",
            [],
            "CommandError: queues[email].executor: 'process' cannot run 'tests.django.testapp.tasks."
            "send_confirmation': awa_worker runs its tasks in worker threads",
        ),
        (
            "email:2:min_workers=2",
            ["AWA = {**AWA, 'WORKER': {**AWA['WORKER'], 'global_max_workers': 1}}  # noqa: F405"],
            "CommandError: global_max_workers: is 1, less than the queues' min_workers together (2)",
        ),
    ],
    ids=["process-executor", "min-workers-floor"],
)
def test_awa_worker_refuses_a_queue_it_cannot_run_before_printing_anything(
    awa: None, tmp_path: Path, queue: str, settings_lines: list[str], error: str
) -> None:
    """It printed its "awa worker on database ..." banner, then refused; and a process queue was refused
    as "not a module-level function" when the handler is one: the reason is that it runs in a thread."""
    (tmp_path / "worker_settings.py").write_text(
        "\n".join(["from tests.django.project.settings import *  # noqa: F403", *settings_lines]) + "\n"
    )
    done = manage_done("awa_worker", "--queue", queue, settings="worker_settings", pythonpath=tmp_path)
    assert (done.returncode, done.stdout) == (1, ""), done
    assert done.stderr.startswith(error) and "not a module-level function" not in done.stderr, done.stderr


def test_awa_jobs_help_names_every_state_an_action_accepts() -> None:
    """``retry --help`` said "failed, cancelled or retryable"; a waiting_external job is retried too."""
    done = manage_done("awa_jobs", "retry", "--help")
    assert done.returncode == 0, done
    text = " ".join(done.stdout.split())  # argparse wraps the description
    assert "make a failed, cancelled, retryable or waiting_external job available now" in text, text


def test_awa_jobs_list_show_retry_cancel_run_now_delete(awa: None) -> None:
    failing = tasks.always_fails.using(max_attempts=1).enqueue("nope")
    with connection.cursor() as cursor:  # a job that failed, as the worker would leave it
        cursor.execute(
            "UPDATE awa.jobs SET state = 'failed', attempt = 1, finalized_at = now(), "
            'errors = ARRAY[\'{"attempt": 1, "type": "ValueError", "error": "nope", '
            '"traceback": "Traceback ...", "at": "2026-01-01T00:00:00+00:00"}\'::jsonb] WHERE id = %s',
            [failing.id],
        )
    waiting = awa_django.insert_job({"n": 1}, kind="k", run_at="2099-01-01T00:00:00Z")
    listed = run("awa_jobs", "list", "--state", "failed")
    assert [line.split()[0] for line in listed.splitlines()[1:]] == [str(failing.id)]
    assert "always_fails" in listed
    shown = run("awa_jobs", "show", str(failing.id))
    assert "ValueError: nope" in shown and '"reason": "nope"' in shown
    assert f"job {failing.id}" in run("awa_jobs", "retry", str(failing.id))
    assert job_state(failing.id) == "available"
    assert "now scheduled" not in run("awa_jobs", "run-now", str(waiting.id))
    assert job_state(waiting.id) == "available"
    run("awa_jobs", "cancel", str(waiting.id))
    assert job_state(waiting.id) == "cancelled"
    with pytest.raises(CommandError, match="cancel"):
        call_command("awa_jobs", "cancel", str(waiting.id))
    run("awa_jobs", "delete", str(waiting.id))
    assert not Job.objects.filter(id=waiting.id).exists()
    with pytest.raises(CommandError, match="no job"):
        call_command("awa_jobs", "show", "424242")
    assert "retried 0 failed job(s)" in run("awa_jobs", "retry-failed")


def test_awa_jobs_show_puts_the_users_frames_first_as_the_admin_does(awa: None) -> None:
    """``show`` printed the traceback as Python writes it, awa's executor frames first; the admin's
    job page opens with the user's code. Both now start with the user's frames (cli_core.user_frames)."""
    job = tasks.always_fails.using(max_attempts=1).enqueue("card declined")
    with running_worker():
        wait_for(lambda: job_state(job.id) == "failed")
    done = manage_done("awa_jobs", "show", str(job.id))
    assert done.returncode == 0, done.stderr
    errors = done.stdout.split("errors (1):", 1)[1]
    frames = [line.strip() for line in errors.splitlines() if line.strip().startswith('File "')]
    user_file = str(Path(tasks.__file__))
    assert frames[0].startswith(f'File "{user_file}", line '), errors  # the handler that raised
    assert frames[0].endswith("in always_fails"), errors
    assert any("/awa_bridge/" in frame for frame in frames[1:]), errors  # the full traceback follows
    opening = errors.split("full traceback:", 1)[0].strip().splitlines()[1:]  # after "attempt 1 at ...: ..."
    assert opening[0].strip() == frames[0] and opening[-1].strip() == "ValueError: card declined", errors
    assert not any("/awa_bridge/" in line or "/awa_django/" in line for line in opening), errors


def test_awa_queues_stats_pause_resume(awa: None) -> None:
    tasks.send_confirmation.enqueue(1)
    stats = run("awa_queues", "stats")
    assert "email" in stats and "lag_seconds" in stats
    run("awa_queues", "pause", "email", "--by", "ops")
    assert QueueMeta.objects.get(queue="email").paused_by == "ops"
    assert "yes" in run("awa_queues", "stats", "email")
    run("awa_queues", "resume", "email")
    assert not QueueMeta.objects.get(queue="email").paused
    # A name nothing knows is refused (it once got a row, "resumed", and stayed in the admin for good).
    with pytest.raises(CommandError, match="unknown queue 'neverheard'"):
        call_command("awa_queues", "resume", "neverheard")
    assert not QueueMeta.objects.filter(queue="neverheard").exists()
    assert run("awa_queues", "resume", "email") == "queue email was not paused; nothing to do\n"


def test_awa_queues_stats_lists_every_configured_queue_and_refuses_an_unknown_name(awa: None) -> None:
    """A queue of AWA['QUEUES'] with no job yet was left out of the table, and ``stats NAME`` of a typo
    printed a row of zeros with exit 0, as for an idle queue."""
    rows = [line.split() for line in run("awa_queues", "stats").splitlines()[1:]]
    assert rows == [[name, "no", *["0"] * 7, "-"] for name in ("default", "email")]
    assert run("awa_queues", "stats", "email").splitlines()[1].split()[0] == "email"  # configured: known
    done = manage_done("awa_queues", "stats", "emial")
    assert (done.returncode, done.stdout) == (1, ""), done
    assert "CommandError: unknown queue 'emial': no job, pause or worker has used it" in done.stderr


def test_awa_jobs_on_several_ids_is_all_or_nothing(awa: None) -> None:
    """``retry 6 999`` retried 6, then stopped at 999; ``retry 999 6`` left 6 alone: the result
    depended on the order. Now an unknown id or a refused state changes none of them."""
    first, second = (awa_django.insert_job({"n": n}, kind="k", run_at="2099-01-01T00:00:00Z") for n in (1, 2))
    for ids in ([first.id, 424242], [424242, first.id]):
        done = manage_done("awa_jobs", "cancel", *map(str, ids))
        assert done.returncode == 1 and "no job with id 424242" in done.stderr, done.stderr
        assert done.stdout == ""  # nothing said done that was rolled back
        assert job_state(first.id) == "scheduled"
    done = manage_done("awa_jobs", "cancel", str(first.id), str(second.id))
    assert done.returncode == 0, done
    assert done.stdout.splitlines() == [f"job {job.id} (k, queue default): cancelled" for job in (first, second)]
    assert (job_state(first.id), job_state(second.id)) == ("cancelled", "cancelled")


def test_awa_cron_list_trigger_pause_resume(awa: None) -> None:
    settings = get_settings()
    upsert_schedules_sync(connection, [build_schedule(n, o) for n, o in settings.periodic.items()])
    listed = run("awa_cron", "list")
    assert "nightly_digest" in listed and "Europe/London" in listed
    triggered = run("awa_cron", "trigger", "nightly_digest")
    job = Job.objects.get(kind="send_digest")
    assert f"enqueued job {job.id}" in triggered and job.metadata["triggered_manually"] is True
    run("awa_cron", "pause", "nightly_digest")
    assert "yes" in run("awa_cron", "list")
    run("awa_cron", "resume", "nightly_digest")
    assert "yes" not in run("awa_cron", "list").splitlines()[1]
    with pytest.raises(CommandError, match="no schedule named 'nope'"):
        call_command("awa_cron", "trigger", "nope")


def test_manage_py_and_the_cli_draw_the_same_queue_and_schedule_tables(awa: None) -> None:
    """One table per listing, drawn by awa_bridge.cli_core: ``manage.py awa_queues stats`` prints what
    ``python -m awa_bridge queues stats`` prints (and the AWA['QUEUES'] queues with no job yet, in
    zeros), ``manage.py awa_cron list`` what ``... cron list`` does."""
    from datetime import UTC, datetime, timedelta

    from awa_bridge import admin, cron
    from awa_bridge.enqueue import insert_job_sync

    from .test_admin_operations import _manage

    upsert_schedules_sync(connection, [build_schedule(n, o) for n, o in get_settings().periodic.items()])
    cron.pause_schedule(connection, "nightly_digest", paused_by="ops")
    later = datetime.now(UTC) + timedelta(hours=1)  # scheduled, not available: no lag that ticks between runs
    insert_job_sync(connection, {"n": 1}, kind="report", queue="email", run_at=later)
    admin.pause_queue(connection, "email", paused_by="ops")
    url = database_url("default")
    tables = []
    for managed, typed in ((["awa_queues", "stats"], ["queues", "stats"]), (["awa_cron", "list"], ["cron", "list"])):
        django_out = _manage(*managed)
        cli_out = subprocess.run(
            [sys.executable, "-m", "awa_bridge", *typed, "--database-url", url],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert (django_out.returncode, cli_out.returncode) == (0, 0), django_out.stderr + cli_out.stderr
        tables.append((cli_out.stdout.splitlines(), django_out.stdout))
    (queues, django_queues), (schedules, django_schedules) = tables
    assert django_schedules == "\n".join(schedules) + "\n"
    assert queues[0].split()[:3] == ["queue", "paused", "available"]
    assert [line.split()[:5] for line in queues[1:]] == [["email", "yes", "0", "0", "1"]]
    # The configured "default" has no job: only manage.py lists it (the CLI knows no settings).
    unused = ["default", "no", *["0"] * 7, "-"]
    assert [line.split() for line in django_queues.splitlines()] == [queues[0].split(), unused, queues[1].split()]
    assert schedules[0].split()[:3] == ["name", "source", "cron_expr"]
    assert "nightly_digest" in schedules[1] and "yes (by ops)" in schedules[1]


@pytest.mark.parametrize(
    ("command", "shown"),
    [
        (["awa_jobs", "list"], "send_confirmation"),
        (["awa_queues", "stats"], "email"),
        (["awa_cron", "list"], "nightly"),
    ],
    ids=["awa_jobs", "awa_queues", "awa_cron"],
)
def test_djangos_common_options_work_after_the_subcommand(
    awa: None, command: list[str], shown: str, tmp_path: Path
) -> None:
    """``manage.py awa_jobs list -v 0 --settings mysite.settings``: accepted after the subcommand, as by
    every Django command, and meaning what they mean before it (``manage`` puts ``--settings`` last)."""
    awa_django.insert_job({}, kind="send_confirmation", queue="email", run_at="2099-01-01T00:00:00Z")  # no lag ticking
    upsert_schedules_sync(connection, [build_schedule(n, o) for n, o in get_settings().periodic.items()])
    name, action = command
    common = ["-v", "0", "--no-color", "--pythonpath", str(tmp_path)]
    after, before = manage_done(name, action, *common), manage_done(name, *common, action)
    assert (after.returncode, after.stderr) == (0, ""), after.stderr
    assert after.stdout == before.stdout and shown in after.stdout

    # --pythonpath and --settings after it find a settings module whose system check fails (E004),
    # drawn in color under --force-color; --skip-checks after it skips the checks.
    (tmp_path / "failing_checks.py").write_text(
        "from tests.django.project.settings import *  # noqa: F403\n"
        "AWA = {**AWA, 'TASK_MODULES': ['tests.django.testapp.nope']}  # noqa: F405\n"
    )
    failing = (name, action, "--pythonpath", str(tmp_path))
    checked = manage_done(*failing, settings="failing_checks")
    assert checked.returncode == 1 and "awa_django.E004" in checked.stderr, checked.stderr
    colored = manage_done(*failing, "--force-color", settings="failing_checks")
    assert "\x1b[" not in checked.stderr and "\x1b[" in colored.stderr and "awa_django.E004" in colored.stderr
    skipped = manage_done(*failing, "--skip-checks", settings="failing_checks")
    assert (skipped.returncode, skipped.stdout) == (0, after.stdout), skipped.stderr


def test_traceback_after_the_subcommand_shows_the_traceback_of_a_command_error(awa: None) -> None:
    """As before it: given before, the subcommand's copy of the option must not reset it."""
    plain = manage_done("awa_cron", "trigger", "nope")
    assert plain.returncode == 1 and "Traceback" not in plain.stderr
    assert plain.stderr.startswith("CommandError: no schedule named 'nope'"), plain.stderr
    for traced in (
        manage_done("awa_cron", "trigger", "nope", "--traceback"),
        manage_done("awa_cron", "--traceback", "trigger", "nope"),
    ):
        assert traced.returncode == 1 and "Traceback (most recent call last)" in traced.stderr, traced.stderr
        assert "CommandError: no schedule named 'nope'" in traced.stderr


def test_every_subcommand_parses_djangos_options_after_it_as_before_it() -> None:
    """Each subcommand of each awa command, each of Django's common options: the same parsed value
    after the subcommand as before it (``-v 0`` sets verbosity), on the parser ``run_from_argv`` builds."""
    given = [["-v", "0"], ["--verbosity", "3"], ["--traceback"], ["--no-color"], ["--force-color"], ["--skip-checks"]]
    given += [["--settings", "mysite.settings"], ["--pythonpath", "/srv/mysite"]]
    for name in ("awa_jobs", "awa_queues", "awa_cron"):

        def parse(*argv: str, name: str = name) -> dict[str, Any]:
            return vars(load_command_class("awa_django", name).create_parser("manage.py", name).parse_args(argv))

        parser = load_command_class("awa_django", name).create_parser("manage.py", name)
        actions = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
        for action, subparser in actions.choices.items():
            needed = ["1" for a in subparser._actions if not a.option_strings and a.nargs is None]  # ID / NAME
            for option in given:
                before, after = parse(*option, action, *needed), parse(action, *needed, *option)
                assert after == before != parse(action, *needed), (name, action, option)


def manage_env(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``manage`` run to its end with more environment (the test settings' switches)."""
    process = manage(*args, extra_env=env)
    out, err = process.communicate(timeout=60)
    return subprocess.CompletedProcess(process.args, process.returncode, out, err)


def test_check_warns_of_a_periodic_entry_on_a_queue_awa_queues_does_not_declare() -> None:
    """W004: ``"queue": "emial"`` in AWA['PERIODIC'] would wait for ever (no worker runs it): said, not fatal."""
    done = manage_env("check", AWA_TEST_PERIODIC_MISTAKE="queue")
    assert done.returncode == 0, done.stderr
    [line] = [line for line in done.stderr.splitlines() if "awa_django.W004" in line]
    assert "AWA['PERIODIC']['typo_digest']" in line and "'emial'" in line, line
    assert "'default', 'email'" in line and "did you mean 'email'?" in line, line
    assert "--queue emial" in done.stderr  # the hint
    assert "awa_django.W004" not in manage_done("check").stderr  # the test project's own tasks and schedule


def test_a_periodic_task_that_does_not_import_is_a_check_error_not_a_crash(tmp_path: Path) -> None:
    """E005: the how-to's PERIODIC block before ``startapp shop``: commands without checks work,
    those with checks stop on one line and a hint (as for TASK_MODULES, E004), never a traceback."""
    shell = manage_env("shell", "-c", "print(1)", AWA_TEST_PERIODIC_MISTAKE="task")
    assert shell.returncode == 0 and shell.stdout.splitlines()[-1] == "1", shell.stderr
    (tmp_path / "shop").mkdir()
    started = manage_env("startapp", "shop", str(tmp_path / "shop"), AWA_TEST_PERIODIC_MISTAKE="task")
    assert started.returncode == 0 and (tmp_path / "shop" / "apps.py").exists(), started.stderr
    for command in (["check"], ["awa_worker"]):
        done = manage_env(*command, AWA_TEST_PERIODIC_MISTAKE="task")
        assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
        lines = done.stderr.splitlines()
        [at] = [i for i, line in enumerate(lines) if "awa_django.E005" in line]
        assert lines[at] == (
            "?: (awa_django.E005) AWA['PERIODIC']['nightly_report']['task']: "
            "cannot import 'shop.tasks.nightly_report': No module named 'shop'"
        ), done.stderr
        assert lines[at + 1].strip().startswith("HINT: "), done.stderr
