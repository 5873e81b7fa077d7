"""The worker: ``python -m awa_bridge worker examples.celery_migration.worker:client``.

(It replaces ``celery -A examples.celery_migration.celery_app worker --beat``;
the beat schedule is fired by the workers' maintenance leader.)
"""

from .celery_app import app

client = app.client()
