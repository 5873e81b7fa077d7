"""The app and its beat schedule, written the Celery way.

Moving from Celery changed two import lines (and dropped ``broker=``/``backend=``:
jobs and results live in PostgreSQL, ``$DATABASE_URL``)::

    -from celery import Celery
    -from celery.schedules import crontab
    +from awa_bridge.celery import Celery
    +from awa_bridge.celery.schedules import crontab

    -app = Celery("shop", broker="redis://localhost:6379/0", backend="redis://localhost:6379/1")
    +app = Celery("shop")
"""

from datetime import timedelta

from awa_bridge.celery import Celery
from awa_bridge.celery.schedules import crontab

from . import monitoring  # noqa: F401  (connects the signal receivers, as a Celery project would)

app = Celery("shop", include=["examples.celery_migration.tasks"])
app.conf.update(
    timezone="Europe/London",
    # cookiecutter-django's limits: a task is told at 60 s (SoftTimeLimitExceeded), stopped at 300 s.
    task_time_limit=5 * 60,
    task_soft_time_limit=60,
    task_routes={"examples.celery_migration.tasks.send_receipt": {"queue": "email"}},
    beat_schedule={
        "nightly-sales-report": {
            "task": "examples.celery_migration.tasks.sales_report",
            "schedule": crontab(hour=2, minute=30),
            "kwargs": {"period": "day"},
            "options": {"expires": 3600},  # a report nobody ran within the hour is skipped
        },
        "refresh-exchange-rates": {
            "task": "examples.celery_migration.tasks.refresh_rates",
            "schedule": timedelta(minutes=15),
            "args": ("EUR",),
        },
    },
)
