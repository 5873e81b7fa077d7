"""Leader-only maintenance: the lease and its thread, and one small service per concern."""

from .leader import Maintenance

__all__ = ["Maintenance"]
