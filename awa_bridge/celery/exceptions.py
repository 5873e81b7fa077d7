"""``celery.exceptions`` names: ``from awa_bridge.celery.exceptions import Retry, MaxRetriesExceededError``."""

from .errors import (
    CeleryError,
    ChordError,
    ImproperlyConfigured,
    MaxRetriesExceededError,
    NotRegistered,
    Retry,
    SoftTimeLimitExceeded,
    TaskError,
    TaskRevokedError,
    TimeLimitExceeded,
    TimeoutError,
    WorkerLostError,
)

__all__ = [
    "CeleryError",
    "ChordError",
    "ImproperlyConfigured",
    "MaxRetriesExceededError",
    "NotRegistered",
    "Retry",
    "SoftTimeLimitExceeded",
    "TaskError",
    "TaskRevokedError",
    "TimeLimitExceeded",
    "TimeoutError",
    "WorkerLostError",
]
