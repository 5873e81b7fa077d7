"""Signal receivers, as a Celery project connects them for its monitoring.

-from celery.signals import task_failure, task_retry, task_success
+from awa_bridge.celery.signals import task_failure, task_retry, task_success
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from awa_bridge.celery.signals import task_failure, task_retry, task_success
from awa_bridge.celery.utils.log import get_task_logger

logger = get_task_logger(__name__)

#: What a metrics client would be sent: outcomes per task name.
outcomes: Counter[tuple[str, str]] = Counter()
#: Failed task ids with their error, as an error tracker would receive them.
failures: list[tuple[str, str, str]] = []


@task_success.connect
def count_success(sender: Any = None, result: Any = None, **kwargs: Any) -> None:
    outcomes[(sender.name, "success")] += 1


@task_retry.connect
def count_retry(sender: Any = None, reason: Any = None, **kwargs: Any) -> None:
    outcomes[(sender.name, "retry")] += 1


@task_failure.connect
def report_failure(sender: Any = None, task_id: Any = None, exception: Any = None, **kwargs: Any) -> None:
    outcomes[(sender.name, "failure")] += 1
    failures.append((sender.name, str(task_id), f"{type(exception).__name__}: {exception}"))
    logger.error("task %s[%s] failed: %s", sender.name, task_id, exception)
