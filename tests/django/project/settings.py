"""Settings of the pytest-django test project (tests/django).

The database server is the one the rest of the suite uses: tests/conftest.py
(``django_db_modify_db_settings``) points every alias at it (``DATABASE_URL``
or the embedded PostgreSQL) under a name of its own for this run, before
pytest-django creates the test databases. A subprocess (``python -m django
awa_worker --settings tests.django.project.settings``) gets the test database's
URL in ``AWA_TEST_DATABASE_URL`` (and, for the two-database set-up,
``AWA_TEST_JOBS_DATABASE_URL`` with ``AWA_TEST_AWA_DATABASE=jobs``).
"""

import os

from awa_django.db import database_settings

_URL = os.environ.get("AWA_TEST_DATABASE_URL", "postgresql://postgres@127.0.0.1:5432/awa_django_tests")

SECRET_KEY = "awa-django-tests"
DEBUG = False
ALLOWED_HOSTS = ["*"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "tests.django.project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "awa_django",
    "tests.django.testapp",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

STATIC_URL = "/static/"

DATABASES = {
    "default": database_settings(_URL),
    # A second alias for the non-default-alias tests (awa on "jobs" with the router).
    "jobs": database_settings(os.environ.get("AWA_TEST_JOBS_DATABASE_URL", _URL)),
}
DATABASE_ROUTERS = ["awa_django.routers.AwaRouter"]

AWA = {
    "DATABASE": os.environ.get("AWA_TEST_AWA_DATABASE", "default"),  # "jobs": the two-database set-up
    "QUEUES": {"default": {"max_workers": 4, "poll_interval": 0.2}, "email": {"max_workers": 2, "poll_interval": 0.2}},
    # AWA_TEST_NO_PERIODIC: a project that has removed its last schedule from settings.
    "PERIODIC": {}
    if os.environ.get("AWA_TEST_NO_PERIODIC")
    else {
        "nightly_digest": {
            "cron": "30 2 * * *",
            "timezone": "Europe/London",
            "task": "tests.django.testapp.tasks.send_digest",
            "args": {"audience": "staff"},
        },
    },
    "WORKER": {
        "heartbeat_interval": 0.2,
        "heartbeat_staleness": 1.0,
        "rescue_interval": 0.2,
        "promote_interval": 0.1,
        "leader_election_interval": 0.2,
        "drain_timeout": 5,
    },
}

# AWA_TEST_PERIODIC_MISTAKE: one more AWA['PERIODIC'] entry, as typed with a mistake in it (for the
# system checks' tests): "queue", on a misspelt queue (awa_django.W004); "task", a task path that does
# not import (awa_django.E005). Unset: no such entry.
_MISTAKE = os.environ.get("AWA_TEST_PERIODIC_MISTAKE")
if _MISTAKE == "queue":
    AWA["PERIODIC"]["typo_digest"] = {
        "cron": "0 8 * * *",
        "task": "tests.django.testapp.tasks.send_digest",
        "args": {"audience": "ops"},
        "queue": "emial",
    }
elif _MISTAKE == "task":
    AWA["PERIODIC"]["nightly_report"] = {"cron": "30 2 * * *", "task": "shop.tasks.nightly_report"}

_TASKS_BACKEND = {
    "BACKEND": "awa_django.backends.AwaBackend",
    "QUEUES": ["default", "email"],
    "OPTIONS": {"MAX_ATTEMPTS": 2},
}
TASKS = {"default": _TASKS_BACKEND}

try:  # Django 5.2: the django-tasks backport provides the same API as django_tasks.
    import django.tasks  # noqa: F401
except ImportError:
    INSTALLED_APPS.append("django_tasks")

# A test project's users are made by the hundred (pytest-django's admin_client, one per test):
# PBKDF2 at Django's production iterations costs about 0.3 s a user; the tests check pages, not hashes.
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
