"""The pure-Python worker runtime."""

from ..callbacks import WaitForCallback
from .client import Client
from .config import QueueConfig, WorkerConfig
from .context import JobContext
from .gctuning import tune_gc
from .outcomes import Cancel, RetryAfter, Snooze, TerminalError, backoff_seconds

__all__ = [
    "Cancel",
    "Client",
    "JobContext",
    "QueueConfig",
    "RetryAfter",
    "Snooze",
    "TerminalError",
    "WaitForCallback",
    "WorkerConfig",
    "backoff_seconds",
    "tune_gc",
]
