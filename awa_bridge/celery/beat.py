"""Celery beat schedules as awa cron schedules.

A ``beat_schedule`` entry::

    "nightly-report": {
        "task": "proj.tasks.report",
        "schedule": crontab(hour=2, minute=30),   # or timedelta(minutes=5), or 300 (seconds)
        "args": (1,), "kwargs": {"fmt": "pdf"},
        "options": {"queue": "reports", "priority": 7, "expires": 600},
    }

becomes the awa schedule ``nightly-report`` (``awa.cron_jobs``), fired by
the maintenance leader exactly once per occurrence, in the app's
``timezone`` (default UTC). There is no beat process to run.

* ``crontab(...)``: each field is expanded the way Celery reads it (``*``,
  ``*/15``, ``1-5``, ``mon-fri``, wrap-around ranges such as ``fri-mon``,
  lists, sets of ints) and written back as an explicit cron field. A crontab
  restricting both ``day_of_month`` and ``day_of_week`` is refused: Celery
  fires when BOTH match, cron when EITHER does.
* An interval (``timedelta``, seconds, ``schedule(run_every=...)``) becomes a
  clock-aligned cron expression when it divides a minute, an hour or a day
  evenly (every 10 s, 5 min, 2 h, 1 day); anything else (7 min, 90 s,
  3 days) is refused, because cron cannot fire at that period. Celery counts
  intervals from when beat started; here they are aligned to the clock.
* ``options``: ``queue``, ``priority`` (Celery's 0-9) and ``expires`` (seconds
  after each fire time; a later job is cancelled, not run). Other options and
  ``relative=True`` are refused.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..errors import ValidationError
from .errors import UnsupportedOption
from .options import awa_priority, check_call_options, seconds

if TYPE_CHECKING:
    from ..cron import PeriodicJob
    from .app import Awa

_DAY_NAMES = ("sunday", "monday", "tuesday", "wednesday", "thursday", "friday", "saturday")
_MONTH_NAMES = (
    "january", "february", "march", "april", "may", "june",
    "july", "august", "september", "october", "november", "december",
)  # fmt: skip
_DAYS = {**{d[:3]: i for i, d in enumerate(_DAY_NAMES)}, **{d: i for i, d in enumerate(_DAY_NAMES)}}
_MONTHS = {**{m[:3]: i + 1 for i, m in enumerate(_MONTH_NAMES)}, **{m: i + 1 for i, m in enumerate(_MONTH_NAMES)}}
_FIELDS = {
    # name: (lowest, highest, names)
    "minute": (0, 59, {}),
    "hour": (0, 23, {}),
    "day_of_month": (1, 31, {}),
    "month_of_year": (1, 12, _MONTHS),
    "day_of_week": (0, 6, _DAYS),
}
_PART = re.compile(r"^(?P<start>\*|\w+)(?:-(?P<end>\w+))?(?:/(?P<step>\d+))?$")


def _value(token: str, field: str) -> int:
    low, high, names = _FIELDS[field]
    text = token.strip().lower()
    if text in names:
        return names[text]
    if not text.isdigit():
        raise ValidationError(field, f"{token!r} is not a valid {field.replace('_', ' ')}")
    number = int(text)
    if field == "day_of_week" and number == 7:
        return 0  # Sunday, as in cron
    if not low <= number <= high:
        raise ValidationError(field, f"{number} is out of range {low}-{high}")
    return number


def expand(value: Any, field: str) -> set[int]:
    """The set of values a Celery crontab field matches."""
    low, high, _ = _FIELDS[field]
    if isinstance(value, bool):
        raise ValidationError(field, f"must be an int, a string or a set of them, got {value!r}")
    if isinstance(value, int):
        return {_value(str(value), field)}
    if not isinstance(value, str):
        if not isinstance(value, Iterable):
            raise ValidationError(field, f"must be an int, a string or a set of them, got {value!r}")
        result: set[int] = set()
        for item in value:
            result |= expand(item, field)
        if not result:
            raise ValidationError(field, "matches nothing")
        return result
    result = set()
    for part in value.split(","):
        match = _PART.match(part.strip().lower())
        if not match:
            raise ValidationError(field, f"{part!r} is not a crontab field (expected *, */n, a, a-b or a-b/n)")
        start, end, step = match["start"], match["end"], match["step"]
        step_n = int(step) if step else 1
        if step_n < 1:
            raise ValidationError(field, f"{part!r}: the step must be at least 1")
        if start == "*":
            if end:
                raise ValidationError(field, f"{part!r} is not a crontab field")
            values = list(range(low, high + 1))
        else:
            first = _value(start, field)
            last = (high if step else first) if end is None else _value(end, field)
            if first <= last:
                values = list(range(first, last + 1))
            else:  # a wrap-around range, such as fri-mon
                values = list(range(first, high + 1)) + list(range(low, last + 1))
        result |= set(values[::step_n])
    if not result:
        raise ValidationError(field, "matches nothing")
    return result


def _cron_field(values: set[int], field: str) -> str:
    low, high, _ = _FIELDS[field]
    if values == set(range(low, high + 1)):
        return "*"
    ordered = sorted(values)
    parts: list[str] = []
    start = prev = ordered[0]
    for number in [*ordered[1:], None]:
        if number is not None and number == prev + 1:
            prev = number
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if number is not None:
            start = prev = number
    return ",".join(parts)


class crontab:
    """Celery's ``crontab`` schedule; ``cron_expr`` is the equivalent 5-field cron expression."""

    def __init__(
        self,
        minute: Any = "*",
        hour: Any = "*",
        day_of_week: Any = "*",
        day_of_month: Any = "*",
        month_of_year: Any = "*",
        **options: Any,
    ) -> None:
        for key in options:
            reason = {
                "nowfun": "awa evaluates schedules on the database's clock",
                "tz": "set the app's timezone (app.conf.timezone) instead",
                "app": "not needed",
            }.get(key, "not a crontab argument")
            raise UnsupportedOption(key, f"crontab(): {reason}")
        self.minute = expand(minute, "minute")
        self.hour = expand(hour, "hour")
        self.day_of_week = expand(day_of_week, "day_of_week")
        self.day_of_month = expand(day_of_month, "day_of_month")
        self.month_of_year = expand(month_of_year, "month_of_year")
        self._given = (minute, hour, day_of_week, day_of_month, month_of_year)
        dom = _cron_field(self.day_of_month, "day_of_month")
        dow = _cron_field(self.day_of_week, "day_of_week")
        if dom != "*" and dow != "*":
            raise UnsupportedOption(
                "day_of_month",
                f"crontab(day_of_month={day_of_month!r}, day_of_week={day_of_week!r}): Celery runs when both "
                "match, cron when either does, so awa cannot express it; keep one of the two and check the "
                "other inside the task",
            )
        self.cron_expr = " ".join(
            (
                _cron_field(self.minute, "minute"),
                _cron_field(self.hour, "hour"),
                dom,
                _cron_field(self.month_of_year, "month_of_year"),
                dow,
            )
        )

    def __repr__(self) -> str:
        minute, hour, dow, dom, moy = self._given
        return f"<crontab: {minute} {hour} {dom} {moy} {dow} (m/h/dM/MY/d)>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, crontab) and other.cron_expr == self.cron_expr

    def __hash__(self) -> int:
        return hash(self.cron_expr)


class schedule:
    """Celery's interval ``schedule(run_every=...)``."""

    def __init__(self, run_every: Any = None, relative: bool = False, **options: Any) -> None:
        if relative:
            raise UnsupportedOption("relative", "awa schedules are clock-aligned cron expressions")
        for key in options:
            raise UnsupportedOption(key, "schedule() takes run_every only")
        self.run_every = run_every
        self.cron_expr = interval_to_cron(run_every)


def interval_to_cron(value: Any) -> str:
    """A cron expression firing every ``value`` (seconds or timedelta), clock-aligned; refused when cron cannot."""
    total = seconds(value, "schedule")
    human = _human(total)
    if total <= 0 or not math.isclose(total, round(total)):
        raise UnsupportedOption("schedule", f"every {human}: intervals must be a whole number of seconds (>= 1)")
    s = round(total)
    if s < 60 and 60 % s == 0:
        return "* * * * * *" if s == 1 else f"*/{s} * * * * *"
    if s % 60 == 0:
        m = s // 60
        if m < 60 and 60 % m == 0:
            return "* * * * *" if m == 1 else f"*/{m} * * * *"
        if m % 60 == 0:
            h = m // 60
            if h < 24 and 24 % h == 0:
                return "0 * * * *" if h == 1 else f"0 */{h} * * *"
            if h == 24:
                return "0 0 * * *"
    raise UnsupportedOption(
        "schedule",
        f"every {human}: cron fires on clock-aligned times, so an interval must divide a minute, an hour or a "
        "day evenly (for example 10 seconds, 5 minutes, 2 hours, 1 day); use crontab(...) for anything else",
    )


def _human(total: float) -> str:
    if total >= 3600 and total % 3600 == 0:
        return f"{int(total // 3600)} h"
    if total >= 60 and total % 60 == 0:
        return f"{int(total // 60)} min"
    return f"{total:g} s"


def cron_expression(value: Any) -> str:
    """The cron expression of a beat ``schedule`` value."""
    if isinstance(value, (crontab, schedule)):
        return value.cron_expr
    if isinstance(value, (timedelta, int, float)) and not isinstance(value, bool):
        return interval_to_cron(value)
    kind = type(value).__name__
    if kind == "solar":
        raise UnsupportedOption("schedule", "solar schedules are not supported")
    raise UnsupportedOption("schedule", f"must be crontab(...), a timedelta or a number of seconds, got {kind}")


_ENTRY_KEYS = ("task", "schedule", "args", "kwargs", "options", "relative")


def translate(beat_schedule: Mapping[str, Any], *, timezone: str = "UTC", app: Awa | None = None) -> list[PeriodicJob]:
    """Each beat entry as an awa ``PeriodicJob`` (validated; ``ValidationError`` names the entry and field)."""

    if not isinstance(beat_schedule, Mapping):
        raise ValidationError("beat_schedule", f"must be a dict of entries, got {type(beat_schedule).__name__}")
    jobs = []
    for name, entry in beat_schedule.items():
        where = f"beat_schedule[{name!r}]"
        if not isinstance(entry, Mapping):
            raise ValidationError(where, "must be a dict with 'task' and 'schedule'")
        for key in entry:
            if key not in _ENTRY_KEYS:
                raise UnsupportedOption(
                    f"{where}.{key}", f"unknown beat entry key; the keys are {', '.join(_ENTRY_KEYS)}"
                )
        if entry.get("relative"):
            raise UnsupportedOption(f"{where}.relative", "awa schedules are clock-aligned cron expressions")
        for key in ("task", "schedule"):
            if key not in entry:
                raise ValidationError(f"{where}.{key}", "is required")
        try:
            jobs.append(_entry(str(name), entry, timezone, app))
        except ValidationError as exc:
            raise type(exc)(f"{where}.{exc.field}", exc.message) from None
    return jobs


def _entry(name: str, entry: Mapping[str, Any], timezone: str, app: Awa | None) -> PeriodicJob:
    from ..cron import PeriodicJob

    task_name = entry["task"]
    if not isinstance(task_name, str):
        raise ValidationError("task", f"must be a task name, got {task_name!r}")
    args = entry.get("args") or ()
    kwargs = entry.get("kwargs") or {}
    if not isinstance(args, (list, tuple)):
        raise ValidationError("args", f"must be a list or tuple, got {type(args).__name__}")
    if not isinstance(kwargs, Mapping):
        raise ValidationError("kwargs", f"must be a dict, got {type(kwargs).__name__}")
    options = dict(entry.get("options") or {})
    check_call_options(options, "options")
    for key in options:
        if key not in ("queue", "priority", "expires"):
            raise UnsupportedOption(key, "beat entries take the options queue, priority and expires")
    task = app.tasks.get(task_name) if app is not None else None
    route = app.route(task_name) if app is not None else {}
    queue = options.get("queue") or route.get("queue") or (task.queue if task else None)
    queue = queue or (app.conf.task_default_queue if app is not None else "default")
    priority = options.get("priority")
    if priority is None:
        priority = route.get("priority", task.priority if task else None)
    if priority is None and app is not None:
        priority = app.conf.task_default_priority
    order = app.conf.priority_order if app is not None else "higher_first"
    metadata = None
    if options.get("expires") is not None:
        metadata = {"celery": {"expires_in": seconds(options["expires"], "expires")}}
    return PeriodicJob(
        name,
        cron_expression(entry["schedule"]),
        {"args": list(args), "kwargs": dict(kwargs)},
        kind=task_name,
        timezone=timezone,
        queue=queue,
        priority=2 if priority is None else awa_priority(priority, order),
        max_attempts=task.max_attempts if task else 4,
        metadata=metadata,
    )
