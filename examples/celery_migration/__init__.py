"""A small Celery project moved to awa by changing imports (see docs/howto/celery.md)."""
