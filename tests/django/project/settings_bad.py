"""The test project with a mistake in AWA: every command must refuse to start."""

from .settings import *  # noqa: F403

AWA = {"QUEUES": {"email": {"max_workers": 0}}}
