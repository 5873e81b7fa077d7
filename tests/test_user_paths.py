"""``python -m awa_bridge`` as a user types it: subprocesses, good and bad arguments, fresh databases.

A user who gets something wrong (no schema yet, a typo'd MODULE:CLIENT, a
SQLAlchemy URL, a queue name that does not exist) gets one line on stderr
saying what is wrong and what to do, and exit status 2; never a driver
traceback, never a worker that loops on the same error.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psycopg
import pytest

from awa_bridge import insert_job_sync
from awa_bridge.migrations import load_migrations

from .procs import unique_queue
from .test_pgbouncer import PGBOUNCER, bouncer_url  # noqa: F401 (bouncer_url: the fixture, for a test below)

REPO = Path(__file__).resolve().parent.parent


def awa(
    *args: str, url: str | None = None, timeout: float = 60, pythonpath: Path | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "DATABASE_URL"}
    if url is not None:
        env["DATABASE_URL"] = url
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), str(REPO)])
    return subprocess.run(
        [sys.executable, "-m", "awa_bridge", *args],
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def one_line_error(done: subprocess.CompletedProcess[str], *words: str) -> str:
    """Exit 2 with exactly one ``error: ...`` line on stderr containing ``words``."""
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), done.stderr
    assert "Traceback" not in done.stderr
    for word in words:
        assert word in lines[0], lines[0]
    return lines[0]


# -- good paths ---------------------------------------------------------------------------------


def test_help_and_usage() -> None:
    done = awa("--help")
    assert done.returncode == 0
    for command in ("migrate", "worker", "jobs", "queues", "cron"):
        assert command in done.stdout
    assert awa().returncode == 2  # no command: argparse's usage error
    worker_help = awa("worker", "--help")
    assert "--log-format" in worker_help.stdout and "--log-level" in worker_help.stdout


def test_migrate_a_fresh_database_then_list(make_database: Callable[[], str]) -> None:
    url = make_database()
    names = [m.name for m in load_migrations()]
    dry = awa("migrate", "--dry-run", url=url)
    assert dry.returncode == 0 and "would apply:" in dry.stdout and names[0] in dry.stdout
    done = awa("migrate", url=url)
    assert done.returncode == 0 and f"applied {len(names)} migration(s)" in done.stdout
    assert "up to date" in awa("migrate", "--database-url", url).stdout
    for command in (["jobs"], ["queues"], ["cron", "list"]):
        listed = awa(*command, url=url)
        assert listed.returncode == 0 and listed.stderr == "", listed.stderr
        assert "(none)" in listed.stdout or "(no schedules)" in listed.stdout


def failed_with(db_url: str, error_type: str, error: str, trace: str) -> int:
    """A job failed after one attempt whose error record is ``error_type: error`` with ``trace``; its id."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        job = insert_job_sync(conn, {"order": 7}, kind="charge_card", queue="billing")
        conn.execute(
            "UPDATE awa.jobs SET state = 'failed', attempt = 1, finalized_at = now(), errors = ARRAY["
            "jsonb_build_object('attempt', 1, 'type', %s::text, 'error', %s::text, 'traceback', %s::text,"
            " 'at', '2026-01-02T03:04:05+00:00')] WHERE id = %s",
            (error_type, error, trace, job.id),
        )
    return job.id


def test_jobs_id_prints_the_error_history_as_tracebacks(db_url: str) -> None:
    trace = 'Traceback (most recent call last):\n  File "shop/tasks.py", line 9, in send\nTimeoutError: smtp'
    job_id = failed_with(db_url, "TimeoutError", "smtp", trace)
    done = awa("jobs", "--id", str(job_id), url=db_url)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "errors (1):" in out
    assert "  attempt 1 at 2026-01-02T03:04:05+00:00: TimeoutError: smtp" in out
    assert "    Traceback (most recent call last):" in out
    assert '      File "shop/tasks.py", line 9, in send' in out
    assert "{'attempt'" not in out  # not the raw dict any more


def test_worker_json_logs_and_sigterm_exits_0(workers, probe, db_url: str) -> None:  # type: ignore[no-untyped-def]
    queue = unique_queue()
    worker = workers.start(queue, args=["--log-format", "json", "--log-level", "debug"])
    worker.wait_started()
    with psycopg.connect(db_url, autocommit=True) as conn:
        job = insert_job_sync(conn, {"role": "ledger"}, kind="ledger", queue=queue)
    from .procs import wait_for

    wait_for(lambda: probe.value("SELECT state::text FROM awa.jobs WHERE id = %s", (job.id,)) == "completed", 15)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    entries = [json.loads(line) for line in worker.lines if line.strip()]
    assert entries, worker.output
    assert all({"time", "level", "logger", "message"} <= set(e) for e in entries)
    assert any(e["message"].startswith("worker started") and e["level"] == "INFO" for e in entries)


def test_worker_log_level_warning_hides_info(workers, probe, db_url: str) -> None:  # type: ignore[no-untyped-def]
    from .procs import wait_for

    queue = unique_queue()
    worker = workers.start(queue, args=["--log-level", "warning"])
    with psycopg.connect(db_url, autocommit=True) as conn:
        job = insert_job_sync(conn, {"role": "ledger"}, kind="ledger", queue=queue)
    wait_for(lambda: probe.value("SELECT state::text FROM awa.jobs WHERE id = %s", (job.id,)) == "completed", 15)
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    assert not worker.logged(" INFO "), worker.output


def test_worker_database_url_flag(workers, probe, db_url: str, server_url: str) -> None:  # type: ignore[no-untyped-def]
    """``--database-url`` as the other commands take it: with no $DATABASE_URL at all (the module's
    ``Client()`` builds with it), and in place of a different one."""
    from .dbutil import with_dbname
    from .procs import wait_for

    queue = unique_queue()
    elsewhere = with_dbname(server_url, "awa_no_such_database")
    finished = "SELECT state::text = 'completed' FROM awa.jobs WHERE id = %s"
    for env_url in ("", elsewhere):
        worker = workers.start(queue, url=env_url, args=["--database-url", db_url])
        worker.wait_started()
        with psycopg.connect(db_url, autocommit=True) as conn:
            job = insert_job_sync(conn, {"role": "ledger"}, kind="ledger", queue=queue)
        wait_for(lambda job_id=job.id: probe.value(finished, (job_id,)), 15)
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0, worker.output


def test_worker_on_a_queue_nothing_knows_warns_of_a_typo(workers, db_url: str) -> None:  # type: ignore[no-untyped-def]
    """``--queue emial``: a worker that would wait for ever on a misspelt queue says so at start; one on
    a queue a job has used does not."""
    typo, used = unique_queue(), unique_queue()
    with psycopg.connect(db_url, autocommit=True) as conn:
        insert_job_sync(conn, {"role": "ledger"}, kind="ledger", queue=used)
    warned = workers.start(typo).wait_started()
    quiet = workers.start(used).wait_started()
    line = next((line for line in warned.lines if f"queue {typo!r}:" in line), None)
    assert line is not None and " WARNING " in line, warned.output
    assert "no handler is registered on it, and no job, pause or worker has used it; a typo?" in line
    assert "(the handlers' queues: default)" in line
    assert not quiet.logged("a typo?"), quiet.output
    for worker in (warned, quiet):
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0, worker.output


def test_queues_pause_an_unknown_queue_needs_create(db_url: str) -> None:
    with psycopg.connect(db_url, autocommit=True) as conn:
        insert_job_sync(conn, {}, kind="k", queue="email")
    one_line_error(awa("queues", "pause", "emial", url=db_url), "unknown queue 'emial'", "email", "--create")
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM awa.queue_meta").fetchone()[0] == 0  # nothing written
    assert awa("queues", "pause", "email", url=db_url).returncode == 0  # a known queue
    created = awa("queues", "pause", "reports", "--create", url=db_url)
    assert created.returncode == 0 and "queue reports paused" in created.stdout
    with psycopg.connect(db_url) as conn:
        rows = conn.execute("SELECT queue, paused FROM awa.queue_meta ORDER BY queue").fetchall()
    assert rows == [("email", True), ("reports", True)]


def test_queues_resume_refuses_an_unknown_queue_and_writes_nothing(db_url: str) -> None:
    """``resume`` once upserted its row: a typo'd name was "resumed" and then listed for good."""
    with psycopg.connect(db_url, autocommit=True) as conn:
        insert_job_sync(conn, {}, kind="k", queue="email")
    one_line_error(awa("queues", "resume", "emial", url=db_url), "unknown queue 'emial'", "known: email")
    not_paused = awa("queues", "resume", "email", url=db_url)
    assert (not_paused.returncode, not_paused.stdout) == (0, "queue email was not paused; nothing to do\n")
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT count(*) FROM awa.queue_meta").fetchone()[0] == 0  # nothing written
    assert awa("queues", "pause", "email", url=db_url).returncode == 0
    resumed = awa("queues", "resume", "email", url=db_url)
    assert (resumed.returncode, resumed.stdout) == (0, "queue email resumed\n")
    with psycopg.connect(db_url) as conn:
        assert conn.execute("SELECT queue, paused FROM awa.queue_meta").fetchall() == [("email", False)]


# -- bad paths ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [["jobs"], ["jobs", "--id", "1"], ["jobs", "retry", "1"], ["queues"], ["queues", "pause", "q"], ["cron", "list"]],
)
def test_commands_on_an_unmigrated_database_say_to_migrate(
    make_database: Callable[[], str], command: list[str]
) -> None:
    url = make_database()
    one_line_error(awa(*command, url=url), "awa schema", "python -m awa_bridge migrate")


def test_worker_on_an_unmigrated_database_exits_at_once(make_database: Callable[[], str]) -> None:
    url = make_database()
    done = awa("worker", "tests.worker_app:client", url=url, timeout=30)
    one_line_error(done, "lacks v001_schema.sql", "python -m awa_bridge migrate")
    with psycopg.connect(url) as conn:  # it created nothing
        assert conn.execute("SELECT to_regclass('awa.jobs')").fetchone()[0] is None


@pytest.mark.parametrize(
    ("target", "words"),
    [
        ("nosuch.module:client", ["no module named 'nosuch.module'"]),
        ("tests.worker_app:nope", ["'tests.worker_app' has no attribute 'nope'"]),
        ("tests.worker_app:os", ["tests.worker_app:os is not an awa_bridge.worker.Client (it is a 'module' object)"]),
        ("tests.worker_app", ["expected MODULE:CLIENT", "'tests.worker_app'"]),
        (
            "tests.cli_broken_app:client",
            ["importing tests.cli_broken_app failed", "No module named 'awa_bridge_no_such_dependency'"],
        ),
    ],
)
def test_a_wrong_module_client_is_one_line(db_url: str, target: str, words: list[str]) -> None:
    one_line_error(awa("worker", target, url=db_url, timeout=30), *words)


@pytest.mark.parametrize("command", [["jobs", "--id", "-5"], ["jobs", "--id", "0"], ["jobs", "cancel", str(2**70)]])
def test_a_job_id_out_of_range_is_named_as_such(db_url: str, command: list[str]) -> None:
    """Not "no job with id -5", nor "must be a positive integer" for a positive one too big for a bigint."""
    one_line_error(awa(*command, url=db_url), "job_id: must be a job id, an integer from 1 to 9223372036854775807")


def not_installed(tmp_path: Path, module: str) -> Path:
    """A directory that, first on PYTHONPATH, makes ``module`` absent as an uninstalled package is:
    ``import`` raises ModuleNotFoundError naming it, and ``importlib.util.find_spec`` returns None
    (what checks that must not import it ask). A ``sitecustomize`` marks it so in ``sys.modules``."""
    folder = tmp_path / "absent"
    folder.mkdir(exist_ok=True)
    with (folder / "sitecustomize.py").open("a") as marks:
        marks.write(f"import sys\nsys.modules[{module!r}] = None\n")
    return folder


def test_the_worker_without_asyncpg_says_to_install_it(db_url: str, tmp_path: Path) -> None:
    """The worker runs on asyncpg, an extra: a psycopg-only install (the SQLAlchemy how-to's) once
    ended in a 28-line traceback."""
    absent = not_installed(tmp_path, "asyncpg")
    done = awa("worker", "tests.worker_app:client", url=db_url, timeout=30, pythonpath=absent)
    one_line_error(done, "asyncpg is not installed, and the worker and Client run on it", "pip install asyncpg")


def test_cron_create_without_croniter_says_to_install_it(db_url: str, tmp_path: Path) -> None:
    absent = not_installed(tmp_path, "croniter")
    done = awa("cron", "create", "nightly", "--cron", "0 3 * * *", "--kind", "k", url=db_url, pythonpath=absent)
    one_line_error(done, "croniter is not installed, and periodic jobs need it", "pip install croniter", "[cron]")
    with psycopg.connect(db_url) as conn:  # nothing written
        assert conn.execute("SELECT count(*) FROM awa.cron_jobs").fetchone()[0] == 0
    assert awa("cron", "list", url=db_url, pythonpath=absent).returncode == 0  # listing needs no croniter


@pytest.mark.parametrize(
    ("url", "words"),
    [
        ("nonsense", ["the database URL is not valid", "postgresql://USER@HOST:PORT/DBNAME"]),
        ("mysql://localhost/shop", ["must start with postgresql://", "mysql://"]),
        ("postgresql+psycopg://localhost/shop", ["SQLAlchemy scheme 'postgresql+psycopg'"]),
        ("postgresql://postgres@127.0.0.1:1/x", ["cannot reach the database", "port 1"]),
    ],
)
def test_a_wrong_database_url_is_one_line(url: str, words: list[str]) -> None:
    for command in (["jobs", "--database-url", url], ["migrate", "--database-url", url], ["cron", "list"]):
        env_url = url if command[0] == "cron" else None
        one_line_error(awa(*command, url=env_url), *words)
    # The worker connects with asyncpg, whose refusal names the address its own way.
    one_line_error(awa("worker", "tests.worker_app:client", "--database-url", url, timeout=30), words[0])


def test_a_database_that_does_not_exist_is_one_line(server_url: str) -> None:
    from .dbutil import with_dbname

    url = with_dbname(server_url, "awa_no_such_database")
    one_line_error(awa("jobs", "--database-url", url), "cannot reach the database", "awa_no_such_database")
    one_line_error(awa("worker", "tests.worker_app:client", url=url, timeout=30), "awa_no_such_database")


def test_no_database_url_at_all() -> None:
    one_line_error(awa("jobs"), "--database-url", "DATABASE_URL")


# -- the README's commands ----------------------------------------------------------------------


def readme_commands() -> list[str]:
    """The ``python -m awa_bridge ...`` lines of the README's bash blocks, comments dropped."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    lines = []
    for block in re.findall(r"^```bash\n(.*?)^```", text, re.MULTILINE | re.DOTALL):
        for line in block.splitlines():
            command = line.split("  #", 1)[0].strip()
            if command.startswith("python -m awa_bridge "):
                lines.append(command)
    return lines


def test_the_readme_commands_as_typed(make_database: Callable[[], str], tmp_path: Path) -> None:
    """Set up a database, write the README's myapp/jobs.py, run its worker, inspect: each line as printed.

    (The two install-and-run lines are covered by tests/django/test_example_shop.py, which runs the
    demo they end with, and by running this suite.)
    """
    import time

    from .test_docs import blocks

    commands = readme_commands()
    migrate = [c for c in commands if " migrate " in c]
    assert len(migrate) == 2 and len(commands) >= 5
    url = make_database()
    for command in migrate:
        argv = shlex.split(command.replace("postgresql://user@host/db", url))
        done = subprocess.run(
            [sys.executable, *argv[1:]], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr
    with psycopg.connect(url) as conn:
        applied = [r[0] for r in conn.execute("SELECT name FROM awa.bridge_migrations ORDER BY name")]
    assert applied == [m.name for m in load_migrations()]
    assert "nothing to apply" in done.stdout  # the dry run, after the apply

    # myapp/jobs.py exactly as the README writes it: a complete file, nothing added.
    readme = blocks("README.md")
    jobs_block = next(b.code for b in readme if b.code.startswith("# myapp/jobs.py"))
    (tmp_path / "myapp").mkdir()
    (tmp_path / "myapp" / "__init__.py").write_text("")
    (tmp_path / "myapp" / "jobs.py").write_text(jobs_block)
    env = {**os.environ, "DATABASE_URL": url}
    # An order and its job, enqueued as the README's psycopg quickstart does it.
    args_block = next(b.code for b in readme if "class SendConfirmationEmail" in b.code and "Client" not in b.code)
    enqueue_block = next(b.code for b in readme if "import psycopg\n" in b.code and "SendConfirmationEmail(" in b.code)
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CREATE TABLE orders (id serial PRIMARY KEY, customer text, paid boolean NOT NULL DEFAULT false)")
    quickstart: dict[str, object] = {"__name__": "readme_quickstart", "url": url, "email": "ada@example.com"}
    code = compile(args_block + "\n" + enqueue_block, "README.md", "exec", dont_inherit=True)
    exec(code, quickstart)  # the repository's own README, without this module's __future__ import
    job_id = quickstart["job"].id  # type: ignore[attr-defined]
    for command in commands:
        if command.startswith("python -m awa_bridge worker "):
            worker = subprocess.Popen(
                [sys.executable, *shlex.split(command)[1:]],
                cwd=tmp_path,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            try:
                first = worker.stdout.readline() if worker.stdout else ""
                assert "worker started" in first or worker.poll() is None, first
                # The job is on the queue its handler serves, so this worker runs it.
                with psycopg.connect(url, autocommit=True) as conn:
                    deadline = time.monotonic() + 30
                    while time.monotonic() < deadline:
                        query = "SELECT queue, state::text FROM awa.jobs WHERE id = %s"
                        state = conn.execute(query, (job_id,)).fetchone()
                        if state is None or state[1] == "completed":
                            break
                        time.sleep(0.05)  # polling the job's state, not ordering events
                assert state == ("email", "completed"), state
                worker.send_signal(signal.SIGTERM)
                out = first + worker.communicate(timeout=30)[0]
            finally:
                if worker.poll() is None:
                    worker.kill()
                    worker.communicate()
            assert worker.returncode == 0, out
            assert "worker started: queues email (20 workers), default (5 workers)" in out, out
            assert "confirmation of order 1 sent to ada@example.com" in out, out  # the stand-in mailer
        elif " migrate " not in command:
            done = subprocess.run(
                [sys.executable, *shlex.split(command)[1:]], cwd=tmp_path, env=env, capture_output=True, text=True
            )
            assert done.returncode == 0 and done.stderr == "", (command, done.stderr)


def test_jobs_id_opens_each_traceback_with_the_users_frames(db_url: str) -> None:
    """As the Django admin's job page does: the user's frames and the exception, then the full traceback."""
    trace = (
        "Traceback (most recent call last):\n"
        '  File "/venv/lib/python3.12/site-packages/awa_bridge/worker/executor.py", line 188, in run_attempt\n'
        "    result = await handler(ctx)\n"
        '  File "/srv/shop/billing.py", line 42, in charge_card\n'
        "    gateway.charge(order.total)\n"
        '  File "/venv/lib/python3.12/site-packages/stripe/api.py", line 311, in charge\n'
        "    raise CardError(message)\n"
        "stripe.error.CardError: card declined"
    )
    job_id = failed_with(db_url, "CardError", "card declined", trace)
    done = awa("jobs", "--id", str(job_id), url=db_url)
    assert done.returncode == 0, done.stderr
    errors = done.stdout.split("errors (1):\n", 1)[1].splitlines()
    assert errors[:5] == [
        "  attempt 1 at 2026-01-02T03:04:05+00:00: CardError: card declined",
        '      File "/srv/shop/billing.py", line 42, in charge_card',
        "        gateway.charge(order.total)",
        "    stripe.error.CardError: card declined",
        "    full traceback:",
    ], done.stdout
    assert errors[5:] == ["      " + line for line in trace.splitlines()], done.stdout


def test_a_job_id_as_action_and_a_missing_command_are_one_line() -> None:
    """``jobs 11`` said "invalid choice: '11'"; ``cron`` alone "required: cron_command" (an internal name)."""
    assert one_line_error(awa("jobs", "11")) == "error: to show job 11: python -m awa_bridge jobs --id 11"
    cron = one_line_error(awa("cron"), "cron needs a command: list, pause, resume, trigger, create, edit, delete")
    assert "cron_command" not in cron
    one_line_error(awa(), "python -m awa_bridge needs a command: migrate, worker, jobs, queues, cron")
    for command, typo in (("jobs", "retyr"), ("queues", "pasue")):  # argparse's usage error, as before
        done = awa(command, typo)
        assert done.returncode == 2, done.stderr
        assert f"argument ACTION: invalid choice: {typo!r} (choose from 'list', " in done.stderr


def test_the_top_level_help_is_plain_text() -> None:
    """``--help`` showed the module docstring's RST (````python -m awa_bridge````)."""
    done = awa("--help")
    assert done.returncode == 0 and "``" not in done.stdout, done.stdout
    assert "Operate awa from a shell" in done.stdout


def test_the_worker_pointed_at_pgbouncer_says_it_needs_the_server(db_url: str, request: pytest.FixtureRequest) -> None:
    """Through PgBouncer (transaction mode) the worker said "cannot reach the database: unsupported startup
    parameter: plan_cache_mode": the server was reached, and refused a session setting."""
    if PGBOUNCER is None:
        pytest.skip("no pgbouncer binary installed (Debian: apt-get install pgbouncer)")
    through_bouncer = request.getfixturevalue("bouncer_url")
    done = awa("worker", "tests.worker_app:client", "--queue", unique_queue(), url=through_bouncer)
    line = one_line_error(done, "this looks like PgBouncer")
    assert line == (
        "error: the server refused the startup parameter plan_cache_mode: this looks like PgBouncer; the worker "
        "needs a direct connection to PostgreSQL (LISTEN/NOTIFY, session settings): give it the server's own URL "
        "(docs/howto/scaling.md)"
    )


def test_queues_pause_knows_a_queue_from_its_recorded_throughput(db_url: str) -> None:
    """A worker ran the queue and its jobs were deleted since: ``queues pause`` called it unknown
    although awa.queue_rollups has its throughput. queue_known reads it with one index probe."""
    from awa_bridge.sql import QUERIES

    queue = unique_queue()
    with psycopg.connect(db_url, autocommit=True) as conn:
        # What workers leave: a minute's counts per queue, here 50 queues over 2 days (and ours once).
        conn.execute(
            "INSERT INTO awa.queue_rollups (queue, minute, completed)"
            " SELECT 'other_' || q, date_trunc('minute', now()) - make_interval(mins => m), 1"
            " FROM generate_series(1, 50) AS q, generate_series(1, 2880) AS m"
        )
        conn.execute(
            "INSERT INTO awa.queue_rollups (queue, minute, completed) VALUES (%s, date_trunc('minute', now()), 3)",
            (queue,),
        )
        conn.execute("ANALYZE awa.queue_rollups")
        (raw,) = conn.execute("EXPLAIN (FORMAT JSON) " + QUERIES["queue_known"].pyformat, {"queue": queue}).fetchone()
    plan = json.dumps(raw)
    assert '"Relation Name": "queue_rollups"' in plan and "queue_rollups_pkey" in plan, plan
    assert not re.search(r'"Node Type": "Seq Scan", [^{}]*"Relation Name": "queue_rollups"', plan), plan
    done = awa("queues", "pause", queue, url=db_url)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    assert f"queue {queue} paused" in done.stdout
    one_line_error(awa("queues", "pause", "emial", url=db_url), "unknown queue 'emial'")


def celery_shop(folder: Path, include: bool) -> Path:
    """The layout of docs/howto/celery.md: ``shop/celery_app.py`` (the app, a beat entry), ``shop/tasks.py``,
    ``shop/worker.py`` (``client = app.client()``); the app names its tasks module only with ``include``."""
    shop = folder / "shop"
    shop.mkdir(parents=True)
    (shop / "__init__.py").write_text("")
    options = ", include=['shop.tasks']" if include else ""
    (shop / "celery_app.py").write_text(
        "from datetime import timedelta\n"
        "from awa_bridge.celery import Celery\n"
        f"app = Celery('shop'{options})\n"
        "app.conf.beat_schedule = {'nightly-add': {'task': 'shop.tasks.add', 'schedule': timedelta(days=1)}}\n"
    )
    (shop / "tasks.py").write_text("from .celery_app import app\n\n\n@app.task\ndef add(x, y):\n    return x + y\n")
    (shop / "worker.py").write_text("from .celery_app import app\n\nclient = app.client()\n")
    return folder


def test_a_celery_worker_that_imported_no_task_warns_at_start(workers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """``worker shop.worker:client`` with tasks in shop/tasks.py that the app never imports: every call
    would fail as an unknown job kind, so the worker says so at start; with ``include=[...]`` it is quiet."""
    bare = workers.start(
        unique_queue(), env={"PYTHONPATH": str(celery_shop(tmp_path / "bare", False))}, target="shop.worker:client"
    )
    bare.wait_log("beat_schedule entry")
    warnings = [line for line in bare.lines if " WARNING " in line]
    assert any(
        "no tasks registered on this app ('shop'): import your tasks module (include=[...]" in line for line in warnings
    ), bare.output
    assert any(
        "beat_schedule entry 'nightly-add': task 'shop.tasks.add' is not registered on this worker" in line
        for line in warnings
    ), bare.output
    included = workers.start(
        unique_queue(), env={"PYTHONPATH": str(celery_shop(tmp_path / "included", True))}, target="shop.worker:client"
    ).wait_started()
    for worker in (bare, included):
        worker.signal(signal.SIGTERM)
        assert worker.wait(30) == 0, worker.output
    assert not included.logged("no tasks registered") and not included.logged("beat_schedule entry"), included.output
