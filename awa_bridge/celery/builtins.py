"""Celery's built-in tasks that canvas needs: ``celery.map`` and ``celery.starmap``.

``task.map(items)``, ``task.starmap(items)`` and each part of
``task.chunks(items, n)`` are one job of these kinds: the worker calls the
task's function for every item, in order, inside that one job, and the job's
result is the list of values, as Celery's ``xmap`` / ``xstarmap`` do (the
signature's own arguments are not used, as in Celery). Every app has them and
installs them on its workers beside its own tasks; they are not listed in
``app.tasks``.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .app import Awa
    from .task import Task

MAP, STARMAP = "celery.map", "celery.starmap"

_built: weakref.WeakKeyDictionary[Any, dict[str, Task]] = weakref.WeakKeyDictionary()


def builtin_tasks(app: Awa) -> dict[str, Task]:
    """The built-in tasks of ``app`` (made once per app)."""
    found = _built.get(app)
    if found is None:
        from .task import build_task

        found = {
            MAP: build_task(_runner(app, star=False), app, {"name": MAP, "typing": False}),
            STARMAP: build_task(_runner(app, star=True), app, {"name": STARMAP, "typing": False}),
        }
        _built[app] = found
    return found


def _runner(app: Awa, star: bool) -> Callable[..., list[Any]]:
    def run(task: dict[str, Any], it: list[Any]) -> list[Any]:
        from .canvas import from_dict

        fun = from_dict(task, app).type
        return [fun(*item) if star else fun(item) for item in it]

    run.__name__ = run.__qualname__ = "xstarmap" if star else "xmap"
    return run
