"""``get_task_logger`` as in ``celery.utils.log``: a logger under ``celery.task`` per task module.

Records carry ``task_id`` and ``task_name`` of the task running in this thread
(``"???"`` outside one), so Celery's ``worker_task_log_format``-style formats
(``%(task_name)s[%(task_id)s]``) keep working.
"""

from __future__ import annotations

import logging


class _TaskFilter(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        from ..worker import current_task_ids

        name, task_id = current_task_ids()
        record.task_name = name
        record.task_id = task_id
        return True


_FILTER = _TaskFilter()


def get_task_logger(name: str) -> logging.Logger:
    """The logger ``name`` under ``celery.task`` (Celery's parent for task loggers)."""
    if name in ("celery", "celery.task"):
        raise RuntimeError(f"logger name {name!r} is reserved for Celery's own loggers")
    logger = logging.getLogger(name)
    logger.parent = logging.getLogger("celery.task")
    if _FILTER not in logger.filters:
        logger.addFilter(_FILTER)
    return logger


def get_logger(name: str) -> logging.Logger:
    return logging.getLogger(name)


__all__ = ["get_logger", "get_task_logger"]
