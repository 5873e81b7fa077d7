"""Leader-only maintenance: promote, rescue, cleanup; one concern per module."""

from .leader import Maintenance

__all__ = ["Maintenance"]
