"""AWA settings validation: every mistake names its key; good settings reach the worker as given."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from awa_bridge.worker import QueueConfig, WorkerConfig
from awa_django.conf import get_settings, parse_settings
from awa_django.errors import InvalidAwaSetting

pytestmark = pytest.mark.django


@pytest.mark.parametrize(
    ("awa", "key", "words"),
    [
        ({"DATABASE": "nope"}, "AWA['DATABASE']", "not in settings.DATABASES"),
        ({"QUEUES": []}, "AWA['QUEUES']", "must be a dict"),
        ({"QUEUES": {}}, "AWA['QUEUES']", "at least one queue"),
        ({"QUEUES": {"email": {"max_workers": 0}}}, "AWA['QUEUES']['email']['max_workers']", ">= 1, got 0"),
        (
            {"QUEUES": {"email": {"max_wokers": 2}}},
            "AWA['QUEUES']['email']['max_wokers']",
            "did you mean 'max_workers'",
        ),
        ({"QUEUES": {"email": {"deadline": -1}}}, "AWA['QUEUES']['email']['deadline']", "positive"),
        ({"QUEUES": {"email": {"rate_limit": 5}}}, "AWA['QUEUES']['email']['rate_limit']", "did you mean 'max_rate'"),
        ({"QUEUES": {"x" * 201: {}}}, "AWA['QUEUES']", "1 to 200 characters"),
        ({"WORKER": {"heartbeat_interval": "fast"}}, "AWA['WORKER']['heartbeat_interval']", "number of seconds"),
        (
            {"WORKER": {"heartbeat_interval": 30, "heartbeat_staleness": 40}},
            "AWA['WORKER']['heartbeat_staleness']",
            "at least 3 x heartbeat_interval",
        ),
        ({"WORKER": {"claim_batch": 0}}, "AWA['WORKER']['claim_batch']", "0"),
        ({"RETENTION": {"completed": 0}}, "AWA['RETENTION']['completed']", "positive"),
        ({"RETENTION": {"done": 5}}, "AWA['RETENTION']['done']", "unknown setting. Known: completed"),
        ({"PERIODIC": {"p": {"kind": "k"}}}, "AWA['PERIODIC']['p']['cron']", "required"),
        ({"PERIODIC": {"p": {"cron": "* * *", "kind": "k"}}}, "AWA['PERIODIC']['p']['cron']", "expected 5 fields"),
        (
            {"PERIODIC": {"p": {"cron": "0 * * * *", "kind": "k", "timezone": "Mars/Olympus"}}},
            "AWA['PERIODIC']['p']['timezone']",
            "not a known IANA timezone",
        ),
        ({"PERIODIC": {"p": {"cron": "0 * * * *"}}}, "AWA['PERIODIC']['p']", "exactly one of 'task'"),
        (
            {"PERIODIC": {"p": {"cron": "0 * * * *", "kind": "k", "priority": 9}}},
            "AWA['PERIODIC']['p']['priority']",
            "between 1 and 4",
        ),
        (
            {"PERIODIC": {"p": {"cron": "0 * * * *", "kind": "k", "missed_fire_policy": "all"}}},
            "AWA['PERIODIC']['p']['missed_fire_policy']",
            "coalesce",
        ),
        ({"PERIODIC": {"p": {"cron": "0 * * * *", "task": 7}}}, "AWA['PERIODIC']['p']['task']", "dotted path"),
        ({"WORKER": {"event_loop": "trio"}}, "AWA['WORKER']['event_loop']", "one of auto, uvloop, asyncio"),
        ({"QUEUE": {}}, "AWA['QUEUE']", "did you mean 'QUEUES'"),
        ({"DATABASE_URL": "mysql://x"}, "AWA['DATABASE_URL']", "postgresql://"),
        ({"TASK_MODULES": "shop.jobs"}, "AWA['TASK_MODULES']", "list of module paths"),
    ],
)
def test_a_bad_setting_names_its_key(awa: dict, key: str, words: str) -> None:
    with pytest.raises(ImproperlyConfigured) as info:
        parse_settings(awa)
    assert str(info.value).startswith(key), str(info.value)
    assert words in str(info.value)


def test_defaults_and_good_values_reach_the_worker_config() -> None:
    parsed = parse_settings(
        {
            "QUEUES": {"default": None, "email": 3, "reports": {"max_workers": 2, "deadline": timedelta(minutes=2)}},
            "WORKER": {"heartbeat_interval": 10, "drain_timeout": timedelta(seconds=5), "maintenance": False},
            "RETENTION": {"completed": timedelta(hours=1), "failed": 7200, "history": timedelta(days=7)},
            "PERIODIC": {"digest": {"cron": "0 8 * * *", "task": "tests.django.testapp.tasks.send_digest"}},
        }
    )
    assert [(q.name, q.max_workers) for q in parsed.queues] == [("default", 10), ("email", 3), ("reports", 2)]
    assert parsed.queue("reports").deadline == 120
    assert parsed.worker.heartbeat_interval == 10 and parsed.worker.maintenance is False
    assert parsed.worker.completed_retention == 3600 and parsed.worker.failed_retention == 7200
    assert parsed.worker.history_retention == 7 * 86400
    assert parsed.periodic["digest"]["task"].endswith("send_digest")
    assert parse_settings(None).queues[0].name == "default"


def test_startup_validation_raises_an_improperly_configured_subclass() -> None:
    from django.apps import apps

    with override_settings(AWA={"QUEUES": {"email": {"max_workers": -1}}}):
        with pytest.raises(InvalidAwaSetting) as info:
            apps.get_app_config("awa_django").ready()
        assert info.value.key == "AWA['QUEUES']['email']['max_workers']"
    assert get_settings().database == "default"  # the override is gone, the cache reset


@pytest.mark.django_db
def test_system_checks(settings) -> None:
    from django.core import checks

    assert not [m for m in checks.run_checks() if m.id and m.id.startswith("awa_django")]
    # With --database: the applied shared migrations match the packaged ones.
    assert not [m for m in checks.run_checks(databases=["default"]) if m.id and m.id.startswith("awa_django")]
    settings.AWA = {"DATABASE": "jobs"}
    settings.DATABASE_ROUTERS = []
    messages = {m.id: m for m in checks.run_checks() if m.id and m.id.startswith("awa_django")}
    assert "awa_django.W001" in messages
    assert "DATABASE_ROUTERS" in messages["awa_django.W001"].hint


def test_queue_overrides_take_the_deadline_and_other_options() -> None:
    """``awa_worker --queue email:3:deadline=60,executor=process`` overrides those options of AWA['QUEUES']."""
    from awa_django.worker import parse_queue_overrides

    parsed = parse_settings({"QUEUES": {"email": {"max_workers": 5, "deadline": 30, "poll_interval": 0.5}}})
    [email, other] = parse_queue_overrides(["email:3:deadline=60,executor=process", "other:deadline=2"], parsed)
    assert (email.max_workers, email.deadline, email.executor, email.poll_interval) == (3, 60.0, "process", 0.5)
    assert (other.max_workers, other.deadline) == (10, 2.0)
    [kept] = parse_queue_overrides(["email:deadline=90"], parsed)
    assert (kept.max_workers, kept.deadline) == (5, 90.0)
    settings = parse_settings({"QUEUES": {"email": {"deadline": 60, "executor": "process", "max_tasks_per_child": 9}}})
    assert settings.queue("email").max_tasks_per_child == 9


def test_every_seconds_setting_of_the_worker_takes_a_timedelta() -> None:
    """The worker config's one list of seconds-valued settings is what AWA reads (no second list here)."""
    from awa_bridge.worker.config import QUEUE_SECONDS, SECONDS_SETTINGS, WORKER_SECONDS

    assert set(QUEUE_SECONDS) | set(WORKER_SECONDS) == SECONDS_SETTINGS
    defaults, queue = WorkerConfig(), QueueConfig("q")
    from awa_django.conf import RETENTION_KEYS

    retention = {field: key for key, field in RETENTION_KEYS.items()}  # read from AWA["RETENTION"]
    worker = {k: timedelta(seconds=getattr(defaults, k) * 2) for k in WORKER_SECONDS if k not in retention}
    parsed = parse_settings(
        {
            "QUEUES": {"q": {k: timedelta(seconds=getattr(queue, k) * 2) for k in QUEUE_SECONDS}},
            "WORKER": worker,
            "RETENTION": {retention[k]: timedelta(seconds=getattr(defaults, k) * 2) for k in retention},
        }
    )
    assert all(getattr(parsed.worker, k) == getattr(defaults, k) * 2 for k in WORKER_SECONDS)
    assert all(getattr(parsed.queues[0], k) == getattr(queue, k) * 2 for k in QUEUE_SECONDS)


def test_a_task_on_a_queue_awa_queues_does_not_declare_is_warned_of() -> None:
    """W004 for ``@awa_django.task(queue="emial")``: no worker runs that queue unless given with --queue."""
    from django.core import checks

    import awa_django
    from awa_django.tasks import TASKS

    @awa_django.task(kind="tests.typo_queue", queue="emial")
    def typo_queue() -> None: ...

    try:
        found = [m for m in checks.run_checks() if m.id == "awa_django.W004"]
    finally:
        del TASKS["tests.typo_queue"]
    assert len(found) == 1, found
    assert "'tests.typo_queue'" in found[0].msg and "'emial'" in found[0].msg, found[0].msg
    assert "did you mean 'email'?" in found[0].msg and "'default', 'email'" in found[0].msg
    assert not [m for m in checks.run_checks() if m.id == "awa_django.W004"]


@pytest.mark.parametrize(
    ("path", "words"),
    [
        ("tests.django.testapp.tasks.nope", "cannot import 'tests.django.testapp.tasks.nope'"),
        ("tests.django.testapp.tasks.add", "not an @awa_django.task"),
    ],
)
def test_a_periodic_task_path_is_checked_by_the_system_checks_not_at_startup(path: str, words: str) -> None:
    """E005 (a module that may not exist yet must not stop ``startapp``): parsing leaves the path alone."""
    from django.core import checks

    awa = {"PERIODIC": {"p": {"cron": "0 * * * *", "task": path}}}
    assert parse_settings(awa).periodic["p"]["task"] == path
    with override_settings(AWA=awa):
        found = [m for m in checks.run_checks() if m.id == "awa_django.E005"]
    assert len(found) == 1 and found[0].msg.startswith("AWA['PERIODIC']['p']['task']: "), found
    assert words in found[0].msg
