"""Unique keys, byte-identical to awa-pg's.

BLAKE3 over ``kind``; then, when enabled, a NUL byte and the queue, a NUL byte
and the canonical JSON of the args, a NUL byte and the ``by_period`` integer as
8 little-endian signed bytes; truncated to 16 bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import blake3

from .errors import ValidationError
from .types import DEFAULT_UNIQUE_STATES, STATE_ORDER, JobState

UNIQUE_OPTIONS = ("by_queue", "by_args", "by_period", "states")


@dataclass(frozen=True)
class UniqueOpts:
    """What makes two jobs duplicates, and in which states that is enforced."""

    by_queue: bool = False
    by_args: bool = True
    by_period: int | None = None
    states: frozenset[JobState] = DEFAULT_UNIQUE_STATES

    @property
    def states_bits(self) -> str:
        """The ``bit(8)`` literal: leftmost bit is ``scheduled``."""
        return "".join("1" if state in self.states else "0" for state in STATE_ORDER)


def parse_unique(value: Any) -> UniqueOpts | None:
    """Accept ``True``, a ``UniqueOpts``, or a dict of the four known options."""
    if value is None or value is False:
        return None
    if value is True:
        return UniqueOpts()
    if isinstance(value, UniqueOpts):
        return value
    if not isinstance(value, Mapping):
        raise ValidationError("unique", f"expected True, a dict or UniqueOpts, got {type(value).__name__}")
    unknown = sorted(set(value) - set(UNIQUE_OPTIONS))
    if unknown:
        raise ValidationError("unique", f"unknown option {unknown[0]!r}; the options are {', '.join(UNIQUE_OPTIONS)}")
    for flag in ("by_queue", "by_args"):
        if flag in value and not isinstance(value[flag], bool):
            raise ValidationError(f"unique.{flag}", f"must be True or False, got {value[flag]!r}")
    period = value.get("by_period")
    if period is not None and (isinstance(period, bool) or not isinstance(period, int)):
        raise ValidationError("unique.by_period", f"must be an integer, got {period!r}")
    if period is not None and not -(2**63) <= period < 2**63:
        raise ValidationError("unique.by_period", "must fit in a signed 64-bit integer")
    states = _parse_states(value["states"]) if "states" in value else DEFAULT_UNIQUE_STATES
    return UniqueOpts(
        by_queue=value.get("by_queue", False),
        by_args=value.get("by_args", True),
        by_period=period,
        states=states,
    )


def _parse_states(raw: Any) -> frozenset[JobState]:
    if isinstance(raw, int) and not isinstance(raw, bool):
        # awa-pg's integer form: bit i (value 1 << i) is state i in enum order.
        if not 0 < raw < 256:
            raise ValidationError("unique.states", "an integer mask must be between 1 and 255")
        return frozenset(state for i, state in enumerate(STATE_ORDER) if raw & (1 << i))
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Iterable):
        raise ValidationError("unique.states", "must be a collection of job states")
    states = set()
    for item in raw:
        try:
            states.add(JobState(item))
        except ValueError:
            names = ", ".join(s.value for s in STATE_ORDER)
            raise ValidationError("unique.states", f"unknown state {item!r}; states are {names}") from None
    if not states:
        raise ValidationError("unique.states", "must name at least one state")
    return frozenset(states)


def unique_key(kind: str, queue: str, args_json: str, opts: UniqueOpts) -> bytes:
    """Compute the 16-byte key awa-pg would store for the same inputs."""
    hasher = blake3.blake3(kind.encode("utf-8"))
    if opts.by_queue:
        hasher.update(b"\x00" + queue.encode("utf-8"))
    if opts.by_args:
        hasher.update(b"\x00" + args_json.encode("utf-8"))
    if opts.by_period is not None:
        hasher.update(b"\x00" + opts.by_period.to_bytes(8, "little", signed=True))
    return hasher.digest(length=16)
