"""Configuration errors of the Django app: ``ImproperlyConfigured`` subclasses.

Each names the setting it is about (``AWA['QUEUES']['email']['max_workers']``)
so the message points at the line to fix.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured

from awa_bridge import AwaError


class AwaImproperlyConfigured(ImproperlyConfigured):
    """Base class of the app's configuration errors."""


class InvalidAwaSetting(AwaImproperlyConfigured):
    """A value in the ``AWA`` settings dict is missing, of the wrong type or out of range.

    ``key`` is the path of the offending value, e.g. ``AWA['QUEUES']['email']['max_workers']``.
    """

    def __init__(self, key: str, message: str) -> None:
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")


class InvalidTaskPath(AwaImproperlyConfigured):
    """A dotted path in the settings does not name an ``awa_django`` task."""


class ReadOnlyModel(AwaError, TypeError):
    """The awa models are read-only views of the queue; change jobs through ``awa_bridge`` operations."""
