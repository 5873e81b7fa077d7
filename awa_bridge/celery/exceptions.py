"""``celery.exceptions`` names: ``from awa_bridge.celery.exceptions import Retry, MaxRetriesExceededError``."""

from .errors import (
    CeleryError,
    ImproperlyConfigured,
    MaxRetriesExceededError,
    NotRegistered,
    Retry,
    TaskError,
    TaskRevokedError,
    TimeoutError,
)

__all__ = [
    "CeleryError",
    "ImproperlyConfigured",
    "MaxRetriesExceededError",
    "NotRegistered",
    "Retry",
    "TaskError",
    "TaskRevokedError",
    "TimeoutError",
]
