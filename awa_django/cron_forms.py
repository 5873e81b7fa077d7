"""The admin's form for database-only cron schedules, and a schedule's next fire time.

The form checks nothing itself: it builds an ``awa_bridge.cron.PeriodicJob``
(croniter for the expression, ``zoneinfo`` for the timezone, the job options
as at insert) and puts a ``ValidationError`` on the field it names, so the
admin accepts exactly what ``AWA["PERIODIC"]`` and ``awa_cron create``
accept.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django import forms
from django.utils import timezone

from awa_bridge import cron
from awa_bridge.errors import ValidationError

from .models import CronJob


class ScheduleForm(forms.Form):
    name = forms.CharField(max_length=200)
    cron_expr = forms.CharField(label="Cron expression", max_length=200, help_text="e.g. 30 2 * * * or @hourly")
    timezone = forms.CharField(initial="UTC", max_length=100, help_text="an IANA name, e.g. Europe/London")
    kind = forms.CharField(max_length=200)
    queue = forms.CharField(initial="default", max_length=200)
    args = forms.CharField(initial="{}", widget=forms.Textarea(attrs={"rows": 4}), help_text="a JSON object")
    priority = forms.IntegerField(initial=2, help_text="1 (highest) to 4")
    max_attempts = forms.IntegerField(initial=25, help_text="1 to 1000")
    missed_fire_policy = forms.ChoiceField(choices=[(p, p) for p in cron.MISSED_FIRE_POLICIES], initial="coalesce")

    def __init__(self, *args: Any, editing: CronJob | None = None, **kwargs: Any) -> None:
        if editing is not None and "initial" not in kwargs:
            kwargs["initial"] = {field: getattr(editing, field) for field in self.base_fields if field != "args"} | {
                "args": json.dumps(editing.args, indent=2, sort_keys=True)
            }
        super().__init__(*args, **kwargs)
        self.editing = editing
        if editing is not None:
            self.fields["name"].disabled = True
        self.schedule: cron.PeriodicJob | None = None

    def clean(self) -> dict[str, Any]:
        data: dict[str, Any] = super().clean() or {}
        if self.errors:
            return data
        try:
            args = json.loads(data["args"])
        except ValueError as exc:
            self.add_error("args", f"not JSON: {exc}")
            return data
        if not isinstance(args, dict):
            self.add_error("args", "must be a JSON object")
            return data
        extra = {}
        if self.editing is not None:
            extra = {"tags": list(self.editing.tags), "metadata": self.editing.metadata}
        try:
            self.schedule = cron.PeriodicJob(
                data["name"],
                data["cron_expr"],
                args,
                kind=data["kind"],
                timezone=data["timezone"],
                queue=data["queue"],
                priority=data["priority"],
                max_attempts=data["max_attempts"],
                missed_fire_policy=data["missed_fire_policy"],
                **extra,
            )
        except ValidationError as exc:
            field = exc.field.split(".")[0]
            self.add_error(field if field in self.fields else None, exc.message)
        return data


def next_fire(row: CronJob, now: datetime | None = None) -> datetime | None:
    """The schedule's next fire time (UTC), None while paused or when it cannot be evaluated."""
    if row.paused_at is not None:
        return None
    base = max(row.last_enqueued_at or row.created_at, now or timezone.now())
    try:
        return cron.next_fire_time(row.cron_expr, row.timezone, base)
    except Exception:
        return None
