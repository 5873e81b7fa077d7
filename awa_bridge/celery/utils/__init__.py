"""``celery.utils`` names that projects import (``awa_bridge.celery.utils.log.get_task_logger``)."""
