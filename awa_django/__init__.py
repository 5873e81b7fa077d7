"""awa_django: the awa job queue as a Django app.

``INSTALLED_APPS += ["awa_django"]``, then ``manage.py migrate`` installs the
schema. Enqueue inside ``transaction.atomic()``::

    import awa_django

    @awa_django.task(queue="email")
    def send_confirmation_email(order_id: int) -> None: ...

    with transaction.atomic():
        order = Order.objects.create(...)
        send_confirmation_email.enqueue(order.id)          # or:
        awa_django.insert_job({"order_id": order.id}, kind="send_confirmation_email")

and run ``manage.py awa_worker``. Settings: one ``AWA`` dict (``awa_django.conf``).
Guide: docs/howto/django.md.
"""

from .enqueue import insert_job, insert_many
from .errors import AwaImproperlyConfigured, InvalidAwaSetting, InvalidTaskPath, ReadOnlyModel
from .tasks import AwaTask, task

__all__ = [
    "AwaImproperlyConfigured",
    "AwaTask",
    "InvalidAwaSetting",
    "InvalidTaskPath",
    "ReadOnlyModel",
    "insert_job",
    "insert_many",
    "task",
]
