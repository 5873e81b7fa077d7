"""Enqueue from ORM code: insert_job and @awa_django.task inside transaction.atomic()."""

from __future__ import annotations

import asyncio
import io
import unittest
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from django.core.exceptions import SynchronousOnlyOperation
from django.core.signals import request_finished, request_started
from django.db import DataError, connection, transaction
from django.test import SimpleTestCase
from django.test.testcases import DatabaseOperationForbidden
from django.test.utils import CaptureQueriesContext

import awa_bridge
import awa_django
from awa_bridge import UniqueConflict, ValidationError, admin
from awa_django.models import Job

from .testapp.models import Order
from .testapp.tasks import confirm_transactionally, send_confirmation

pytestmark = [pytest.mark.django, pytest.mark.django_db(transaction=True)]


def test_insert_job_commits_and_rolls_back_with_the_orm_writes(awa: None) -> None:
    with transaction.atomic():
        order = Order.objects.create(customer="ada@example.com")
        job = awa_django.insert_job({"order_id": order.id}, kind="send_receipt", queue="email")
    assert job.state == "available" and job.queue == "email"
    with pytest.raises(RuntimeError), transaction.atomic():
        Order.objects.create(customer="bob@example.com")
        awa_django.insert_job({"order_id": 0}, kind="send_receipt")
        raise RuntimeError("payment declined")
    assert list(Order.objects.values_list("customer", flat=True)) == ["ada@example.com"]
    assert list(Job.objects.values_list("id", "kind")) == [(job.id, "send_receipt")]


def test_a_rolled_back_savepoint_takes_only_its_job(awa: None) -> None:
    with transaction.atomic():
        awa_django.insert_job({"n": 1}, kind="k", unique=True)
        with pytest.raises(UniqueConflict), transaction.atomic():
            awa_django.insert_job({"n": 1}, kind="k", unique=True)
        awa_django.insert_job({"n": 2}, kind="k", using="default")
    assert sorted(Job.objects.values_list("args", flat=True), key=str) == [{"n": 1}, {"n": 2}]


def test_the_returned_job_has_aware_utc_times_whatever_use_tz_says(awa: None, settings: Any) -> None:
    """Under ``USE_TZ = False`` Django's loader reads a timestamptz as a naive local time; the ``Job``
    that insert_job returns has the same aware UTC times as on every other driver, equal to the row's."""
    settings.USE_TZ = False
    settings.TIME_ZONE = "Asia/Kolkata"  # +05:30: the session's, and the process's, time zone
    later = datetime(2031, 5, 6, 7, 8, 9, 123_456, tzinfo=UTC)
    now_job = awa_django.insert_job({"n": 1}, kind="k")
    later_job = awa_django.insert_job({"n": 2}, kind="k", run_at=later)
    returned = [(job.run_at, job.created_at) for job in (now_job, later_job)]
    assert all(time.tzinfo is UTC for pair in returned for time in pair)
    assert [tuple(map(_epoch_us, pair)) for pair in returned] == _row_times([now_job.id, later_job.id])
    assert later_job.run_at == later and now_job.run_at == now_job.created_at


def _row_times(ids: list[int]) -> list[tuple[int, int]]:
    """(run_at, created_at) of the rows ``ids``, in id order, as microseconds since 1970: read so
    that neither the Django settings nor a loader's time zone can bend them."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT CAST(extract(epoch FROM run_at) * 1000000 AS bigint),"
            " CAST(extract(epoch FROM created_at) * 1000000 AS bigint) FROM awa.jobs WHERE id = ANY(%s) ORDER BY id",
            [ids],
        )
        return [tuple(row) for row in cursor.fetchall()]


def _epoch_us(time: datetime) -> int:
    return (time - datetime(1970, 1, 1, tzinfo=UTC)) // timedelta(microseconds=1)


def _inserts(sqls: list[str]) -> int:
    return sum("INSERT INTO awa.jobs" in sql for sql in sqls)


def test_every_insert_goes_through_djangos_cursor_wrapper(awa: None) -> None:
    """insert_job keeps one cursor per connection (and thread) rather than making one per call, yet
    each call still runs through Django's cursor wrapper: execute wrappers see it (on the kept
    cursor: the same one each time), a query log records it (on a debug cursor of its own), a
    ``connection.cursor`` replaced on the object is called, and a closed connection is opened again
    rather than its old cursor used; through ``django.db.connection`` (the README's door, a proxy
    every thread shares) as through ``awa_django.insert_job``."""
    cursors: list[Any] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        if "INSERT INTO awa.jobs" in sql:
            cursors.append(context["cursor"])
        return execute(sql, params, many, context)

    def insert(n: int) -> Job:
        if n % 2:
            return awa_django.insert_job({"n": n}, kind="k")
        return awa_bridge.insert_job(connection, {"n": n}, kind="k")

    with connection.execute_wrapper(wrapper):
        jobs = [insert(n) for n in range(3)]
        with CaptureQueriesContext(connection) as log:
            jobs.append(insert(3))
    assert _inserts([query["sql"] for query in log.captured_queries]) == 1
    assert len(cursors) == 4 and cursors[0] is cursors[1] is cursors[2] is not cursors[3]
    made: list[str] = []
    original = connection.cursor

    def recording_cursor(*args: Any, **kwargs: Any) -> Any:
        made.append("cursor")
        return original(*args, **kwargs)

    connection.cursor = recording_cursor  # type: ignore[method-assign]
    try:
        jobs += [insert(n) for n in (4, 5)]
    finally:
        del connection.cursor
    assert made == ["cursor", "cursor"]
    cursors.clear()
    connection.inc_thread_sharing()  # a connection lent to other threads: a cursor per call again
    try:
        with connection.execute_wrapper(wrapper):
            jobs += [insert(n) for n in (6, 7)]
    finally:
        connection.dec_thread_sharing()
    assert len(cursors) == 2 and cursors[0] is not cursors[1]
    connection.close()
    jobs.append(insert(8))
    assert [job.args["n"] for job in jobs] == list(range(9))
    assert all(job.created_at.tzinfo is UTC and job.run_at == job.created_at for job in jobs)
    returned = [(_epoch_us(job.run_at), _epoch_us(job.created_at)) for job in jobs]
    assert returned == _row_times([job.id for job in jobs])


def test_a_test_case_without_the_database_refuses_an_insert_on_the_kept_cursor(awa: None) -> None:
    """Django's ``SimpleTestCase`` refuses the database to its tests, and Django refuses its sync
    database API inside an event loop; an insert fails there as any query would, though a cursor was
    kept on the connection before, and the next insert after them uses the kept cursor again."""
    cursors: list[Any] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        cursors.append(context["cursor"])
        return execute(sql, params, many, context)

    class WithoutTheDatabase(SimpleTestCase):
        def test_insert(self) -> None:
            with self.assertRaises(DatabaseOperationForbidden):
                awa_bridge.insert_job(connection, {"n": 2}, kind="k")

    async def in_an_event_loop() -> None:
        with pytest.raises(SynchronousOnlyOperation):
            awa_bridge.insert_job(connection, {"n": 4}, kind="k")

    with connection.execute_wrapper(wrapper):
        awa_bridge.insert_job(connection, {"n": 1}, kind="k")
        result = unittest.TextTestRunner(stream=io.StringIO()).run(
            unittest.defaultTestLoader.loadTestsFromTestCase(WithoutTheDatabase)
        )
        asyncio.run(in_an_event_loop())  # Django's sync-only guard, as for any query
        awa_bridge.insert_job(connection, {"n": 3}, kind="k")
    assert result.wasSuccessful(), result.failures + result.errors
    assert len(cursors) == 2 and cursors[0] is cursors[1]
    assert sorted(Job.objects.values_list("args", flat=True), key=str) == [{"n": 1}, {"n": 3}]


def test_a_persistent_connection_the_server_dropped_is_replaced_before_an_insert(awa: None) -> None:
    """With ``CONN_MAX_AGE`` and ``CONN_HEALTH_CHECKS`` Django checks a kept connection at a request's
    first cursor; the insert's kept cursor takes that check too, so an insert in the next request
    after the server dropped the connection runs on a new one rather than failing."""
    connection.close()
    saved = dict(connection.settings_dict)
    connection.settings_dict.update(CONN_MAX_AGE=None, CONN_HEALTH_CHECKS=True)
    try:
        request_started.send(sender=None)
        first = awa_django.insert_job({"n": 1}, kind="k")
        dropped = connection.connection.info.backend_pid
        with psycopg.connect(**connection.get_connection_params(), autocommit=True) as admin_conn:
            admin_conn.execute("SELECT pg_terminate_backend(%s)", [dropped])
        request_finished.send(sender=None)
        request_started.send(sender=None)  # the next request: Django's close_old_connections runs
        second = awa_django.insert_job({"n": 2}, kind="k")
        assert connection.connection.info.backend_pid != dropped
    finally:
        connection.close()
        connection.settings_dict.clear()
        connection.settings_dict.update(saved)
    assert sorted(Job.objects.values_list("id", flat=True)) == [first.id, second.id]


def test_a_value_that_cannot_be_read_raises_djangos_error(awa: None) -> None:
    """A row's value that fails as it is fetched (a time past year 9999: 'infinity') raises Django's
    DataError, as the ORM's own fetch would, not the driver's."""
    job = awa_django.insert_job({"n": 1}, kind="parked")
    with connection.cursor() as cursor:
        cursor.execute("UPDATE awa.jobs SET state = 'scheduled', run_at = 'infinity' WHERE id = %s", [job.id])
    with pytest.raises(DataError, match="year"):
        admin.cancel_job(connection, job.id)
    with pytest.raises(DataError, match="year"):
        Job.objects.get(id=job.id)  # the ORM says the same of that row


def test_task_enqueue_binds_arguments_by_name(awa: None) -> None:
    with transaction.atomic():
        order = Order.objects.create(customer="ada@example.com")
        job = send_confirmation.enqueue(order.id)
        later = datetime.now(UTC) + timedelta(hours=1)
        scheduled = send_confirmation.using(priority=1, run_at=later, tags=["vip"]).enqueue(order.id, note="vip")
    assert job.kind == "tests.django.testapp.tasks.send_confirmation"
    assert job.args == {"order_id": order.id, "note": "confirmed"}
    assert job.queue == "email" and job.state == "available"
    assert scheduled.state == "scheduled" and scheduled.priority == 1 and scheduled.tags == ["vip"]
    assert scheduled.args == {"order_id": order.id, "note": "vip"}
    # Calling the task runs the function inline.
    send_confirmation(order.id)
    assert Order.objects.get(id=order.id).confirmed


def test_task_options_are_validated_early() -> None:
    with pytest.raises(ValidationError, match="priority"):
        send_confirmation.using(priority=9)
    with pytest.raises(TypeError, match="order_id"):
        send_confirmation.enqueue(nope=1)
    with pytest.raises(ValidationError, match=r"\*args"):

        @awa_django.task(kind="variadic")
        def variadic(*items: int) -> None: ...

    with pytest.raises(ValidationError, match="transactional"):

        @awa_django.task(kind="coro", transactional=True)
        async def coro() -> None: ...

    with pytest.raises(ValidationError, match="queue"):

        @awa_django.task(kind="empty_queue", queue="")
        def empty_queue() -> None: ...

    with pytest.raises(ValidationError, match="args"):
        send_confirmation.enqueue(1, note="nul\x00")
    with pytest.raises(ValidationError, match="module level"):

        @awa_django.task
        def local() -> None: ...

    assert confirm_transactionally.transactional


def test_insert_many_uses_copy_on_djangos_connection(awa: None) -> None:
    with transaction.atomic():
        result = awa_django.insert_many(
            [send_confirmation.prepare(i) for i in range(50)] + [send_confirmation.prepare(1)]
        )
    assert result.inserted == 51
    assert Job.objects.filter(queue="email").count() == 51
    assert connection.vendor == "postgresql"


def test_models_are_read_only(awa: None) -> None:
    job = awa_django.insert_job({}, kind="k")
    row = Job.objects.get(id=job.id)
    assert row.args == {} and row.errors == [] and row.tags == [] and row.state == "available"
    with pytest.raises(awa_django.ReadOnlyModel):
        row.save()
    with pytest.raises(awa_django.ReadOnlyModel):
        row.delete()
    with pytest.raises(awa_django.ReadOnlyModel):
        Job.objects.filter(id=job.id).update(state="completed")
    with pytest.raises(awa_django.ReadOnlyModel):
        Job.objects.all().delete()


def test_enqueue_on_an_unmigrated_jobs_alias_names_its_migrate(make_database: Any) -> None:
    """AWA['DATABASE'] = 'jobs' without the schema there: enqueueing from the application said to run
    plain `migrate`, which never touches that alias; it names `migrate --database jobs`, as the
    commands and check W003 do."""
    from .test_shell_migrate import manage

    default_url, jobs_url = make_database(), make_database()
    env = {"AWA_TEST_JOBS_DATABASE_URL": jobs_url, "AWA_TEST_AWA_DATABASE": "jobs"}
    code = "import awa_django; awa_django.insert_job({'n': 1}, kind='k')"
    done = manage(default_url, "shell", "-c", code, **env)
    assert done.returncode == 1, done
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("awa_bridge.errors.SchemaNotMigrated: the awa schema"), done.stderr
    assert last.endswith("; run `python manage.py migrate --database jobs`"), last
