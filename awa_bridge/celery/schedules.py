"""``celery.schedules`` names: ``from awa_bridge.celery.schedules import crontab``."""

from .beat import crontab, schedule

__all__ = ["crontab", "schedule"]
