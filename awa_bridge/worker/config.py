"""Worker and queue settings, with awa's defaults and validation up front.

Bad settings raise ``ValidationError`` naming the setting when the worker is
configured, never halfway through a run.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import ValidationError
from ..validation import as_seconds, check_count, check_name
from .aio import loop_factory

if TYPE_CHECKING:
    from .registry import Handler

DEFAULT_MAX_WORKERS = 10
DEFAULT_DEADLINE_SECONDS = 300.0
DEFAULT_POLL_INTERVAL_SECONDS = 1.0
DEFAULT_PRIORITY_AGING_SECONDS = 60.0
DEFAULT_HEARTBEAT_INTERVAL_SECONDS = 30.0
DEFAULT_HEARTBEAT_STALENESS_SECONDS = 90.0
DEFAULT_RESCUE_INTERVAL_SECONDS = 30.0
DEFAULT_PROMOTE_INTERVAL_SECONDS = 1.0
DEFAULT_LEADER_ELECTION_INTERVAL_SECONDS = 5.0
DEFAULT_LEADER_LEASE_SECONDS = 15.0
DEFAULT_CLEANUP_INTERVAL_SECONDS = 10.0
DEFAULT_COMPLETED_RETENTION_SECONDS = 24 * 3600.0
DEFAULT_FAILED_RETENTION_SECONDS = 72 * 3600.0
# Operator actions and attempt records (the job timeline's history).
DEFAULT_HISTORY_RETENTION_SECONDS = 30 * 24 * 3600.0
DEFAULT_DRAIN_TIMEOUT_SECONDS = 30.0
DEFAULT_CLAIM_BATCH = 200
DEFAULT_COMPLETION_BATCH = 500
DEFAULT_COMPLETION_FLUSH_SECONDS = 0.002
MAINTENANCE_BATCH = 1000
# A maintenance service repeats its batch until one comes back short, for at
# most this long per pass; a pass cut short runs again at the next tick.
MAINTENANCE_BUDGET_SECONDS = 0.5
EXECUTORS = ("thread", "process")
# The event loop ``Client.run`` runs the worker on: asyncio's own by default; "uvloop" (the
# ``awa-bridge[uvloop]`` extra) opts in, "auto" takes uvloop when it is installed.
EVENT_LOOPS = ("auto", "uvloop", "asyncio")
# The settings given in seconds, the one list every front end reads (awa_django's AWA settings
# accept a number or a timedelta for exactly these).
QUEUE_SECONDS = ("deadline", "poll_interval", "priority_aging")
WORKER_SECONDS = (
    "heartbeat_interval",
    "heartbeat_staleness",
    "rescue_interval",
    "promote_interval",
    "leader_election_interval",
    "leader_lease",
    "cleanup_interval",
    "completed_retention",
    "failed_retention",
    "history_retention",
    "drain_timeout",
    "completion_flush",
)
SECONDS_SETTINGS = frozenset(QUEUE_SECONDS + WORKER_SECONDS)
# Per-queue options the worker CLI accepts as NAME[:N][:key=value,...], with their types.
QUEUE_OPTION_TYPES: dict[str, type] = {
    "max_workers": int,
    "deadline": float,
    "poll_interval": float,
    "max_rate": float,
    "burst": int,
    "min_workers": int,
    "weight": int,
    "priority_aging": float,
    "executor": str,
    "max_tasks_per_child": int,
}


@dataclass(frozen=True)
class QueueConfig:
    """One queue this worker runs.

    ``max_rate`` (jobs per second) and ``burst`` rate-limit this worker's
    claims on the queue (a token bucket per worker process). ``min_workers``
    and ``weight`` apply when the worker has a global limit
    (``WorkerConfig.global_max_workers``): the queue is guaranteed
    ``min_workers`` slots and shares the rest by ``weight``. A job waiting
    longer than ``priority_aging`` seconds gains one priority level per
    interval (never above 1); 0 disables aging.
    """

    name: str
    max_workers: int = DEFAULT_MAX_WORKERS
    deadline: float = DEFAULT_DEADLINE_SECONDS
    poll_interval: float = DEFAULT_POLL_INTERVAL_SECONDS
    max_rate: float | None = None
    burst: int | None = None
    min_workers: int = 0
    weight: int = 1
    priority_aging: float = DEFAULT_PRIORITY_AGING_SECONDS
    executor: str = "thread"
    max_tasks_per_child: int | None = None

    def __post_init__(self) -> None:
        check_name("queue", self.name)
        prefix = f"queues[{self.name}]"
        check_count(f"{prefix}.max_workers", self.max_workers, minimum=1)
        as_seconds(f"{prefix}.deadline", self.deadline)
        as_seconds(f"{prefix}.poll_interval", self.poll_interval)
        bad_rate = (
            isinstance(self.max_rate, bool)
            or not isinstance(self.max_rate, (int, float))
            or not 0 < self.max_rate < math.inf
        )
        if self.max_rate is not None and bad_rate:
            raise ValidationError(
                f"{prefix}.max_rate", f"must be a positive number of jobs per second, got {self.max_rate!r}"
            )
        if self.burst is not None:
            if self.max_rate is None:
                raise ValidationError(f"{prefix}.burst", "needs max_rate (burst is the rate limit's bucket size)")
            check_count(f"{prefix}.burst", self.burst, minimum=1)
        check_count(f"{prefix}.min_workers", self.min_workers, minimum=0)
        if self.min_workers > self.max_workers:
            raise ValidationError(
                f"{prefix}.min_workers", f"is {self.min_workers}, more than max_workers ({self.max_workers})"
            )
        check_count(f"{prefix}.weight", self.weight, minimum=1)
        as_seconds(f"{prefix}.priority_aging", self.priority_aging, allow_zero=True)  # 0 disables aging
        if self.executor not in EXECUTORS:
            raise ValidationError(f"{prefix}.executor", f"must be one of {', '.join(EXECUTORS)}, got {self.executor!r}")
        if self.max_tasks_per_child is not None:
            check_count(f"{prefix}.max_tasks_per_child", self.max_tasks_per_child, minimum=1)

    @property
    def bucket_size(self) -> int:
        """The rate limit's burst: as given, else one second's worth (at least 1)."""
        return self.burst if self.burst is not None else max(1, int(self.max_rate or 1))

    @classmethod
    def parse(cls, spec: str | tuple[str, int] | QueueConfig) -> QueueConfig:
        """Accept ``"name"``, ``"name:N"``, ``"name[:N]:key=value,..."``, ``("name", N)`` or a QueueConfig.

        The options are those of QueueConfig (``email:20:deadline=60,executor=process``).
        """
        if isinstance(spec, QueueConfig):
            return spec
        if isinstance(spec, tuple):
            return cls(spec[0], max_workers=spec[1])
        name, options = split_queue_spec(spec)
        return cls(name, **options)


def split_queue_spec(spec: str) -> tuple[str, dict[str, Any]]:
    """``NAME[:N][:key=value,...]`` -> (name, options); a ValidationError names what is wrong."""
    usage = "expected NAME, NAME:N or NAME[:N]:key=value,... with N a positive integer"
    parts = spec.split(":")
    options: dict[str, Any] = {}
    if len(parts) > 1 and "=" in parts[-1]:
        for item in parts.pop().split(","):
            key, sep, raw = item.partition("=")
            key = key.strip()
            if not sep or key not in QUEUE_OPTION_TYPES:
                known = ", ".join(QUEUE_OPTION_TYPES)
                raise ValidationError("queue", f"{spec!r}: unknown option {key!r} (options: {known})")
            try:
                options[key] = QUEUE_OPTION_TYPES[key](raw.strip())
            except ValueError:
                kind = QUEUE_OPTION_TYPES[key].__name__
                raise ValidationError(f"queue.{key}", f"{spec!r}: {raw!r} is not a {kind}") from None
    if len(parts) > 1:
        count = parts.pop()
        if not count.isdigit():
            raise ValidationError("queue", f"{spec!r}: {usage}")
        options["max_workers"] = int(count)
    return ":".join(parts), options


@dataclass(frozen=True)
class WorkerConfig:
    """Process-wide timings. The heartbeat staleness must be at least 3 heartbeats.

    The maintenance leader renews its lease (``leader_lease`` seconds) every
    ``leader_election_interval``; a leader that stops renewing is replaced
    within ``leader_lease + leader_election_interval``.
    """

    heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL_SECONDS
    heartbeat_staleness: float = DEFAULT_HEARTBEAT_STALENESS_SECONDS
    rescue_interval: float = DEFAULT_RESCUE_INTERVAL_SECONDS
    promote_interval: float = DEFAULT_PROMOTE_INTERVAL_SECONDS
    leader_election_interval: float = DEFAULT_LEADER_ELECTION_INTERVAL_SECONDS
    leader_lease: float = DEFAULT_LEADER_LEASE_SECONDS
    cleanup_interval: float = DEFAULT_CLEANUP_INTERVAL_SECONDS
    completed_retention: float = DEFAULT_COMPLETED_RETENTION_SECONDS
    failed_retention: float = DEFAULT_FAILED_RETENTION_SECONDS
    history_retention: float = DEFAULT_HISTORY_RETENTION_SECONDS
    drain_timeout: float = DEFAULT_DRAIN_TIMEOUT_SECONDS
    claim_batch: int = DEFAULT_CLAIM_BATCH
    completion_batch: int = DEFAULT_COMPLETION_BATCH
    completion_flush: float = DEFAULT_COMPLETION_FLUSH_SECONDS
    maintenance: bool = True
    global_max_workers: int | None = None
    event_loop: str = "asyncio"

    def __post_init__(self) -> None:
        for name in WORKER_SECONDS:
            as_seconds(name, getattr(self, name))
        if self.heartbeat_staleness < 3 * self.heartbeat_interval:
            raise ValidationError(
                "heartbeat_staleness",
                f"must be at least 3 x heartbeat_interval ({3 * self.heartbeat_interval} s), "
                f"got {self.heartbeat_staleness} s: a live worker would be rescued",
            )
        if self.leader_lease < 2 * self.leader_election_interval:
            raise ValidationError(
                "leader_lease",
                f"must be at least 2 x leader_election_interval ({2 * self.leader_election_interval} s), "
                f"got {self.leader_lease} s: the leader renews its lease every election interval",
            )
        if self.global_max_workers is not None:
            check_count("global_max_workers", self.global_max_workers, minimum=1)
        for name in ("claim_batch", "completion_batch"):
            check_count(name, getattr(self, name), minimum=1)
        if self.event_loop not in EVENT_LOOPS:
            raise ValidationError("event_loop", f"must be one of {', '.join(EVENT_LOOPS)}, got {self.event_loop!r}")
        if self.event_loop == "uvloop" and loop_factory("uvloop") is None:
            raise ValidationError("event_loop", "is 'uvloop' but uvloop is not installed (pip install uvloop)")


def check_setup(handlers: Iterable[Handler], queues: Sequence[QueueConfig], config: WorkerConfig) -> None:
    """What a worker with these handlers, queues and settings cannot run, refused before it connects.

    ``Client.start`` (through the runtime) and ``Client.check`` both call it, so a command can
    refuse a bad setup before it prints or opens anything.
    """
    import pickle

    if not queues:
        raise ValueError("a worker needs at least one queue")
    floors = sum(q.min_workers for q in queues)
    if config.global_max_workers is not None and floors > config.global_max_workers:
        raise ValidationError(
            "global_max_workers",
            f"is {config.global_max_workers}, less than the queues' min_workers together ({floors})",
        )
    by_name = {q.name: q for q in queues}
    for handler in handlers:
        # A handler the process executor runs must be importable by name in a child.
        queue = by_name.get(handler.queue)
        on_queue = queue is not None and queue.executor == "process" and handler.executor is None
        if handler.is_async or handler.transactional or not (on_queue or handler.executor == "process"):
            continue
        try:
            pickle.dumps(handler.fn)
        except Exception:
            field_name = "executor" if handler.executor == "process" else f"queues[{handler.queue}].executor"
            raise ValidationError(
                field_name,
                f"'process' runs handlers in child processes, which import them by name: the handler of "
                f"{handler.kind!r} is not a module-level function",
            ) from None
