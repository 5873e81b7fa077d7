"""Canvas on awa jobs: signatures, ``chain``, ``group`` and ``chord`` (``celery.canvas``).

::

    from awa_bridge.celery import chain, chord, group, signature

    (fetch.s(url) | parse.s() | store.s()).delay()
    chord(resize.s(i) for i in images)(publish.s())

A signature is a dict (task, args, kwargs, options, subtask_type, immutable),
as Celery's is, and is stored that way in the metadata of the job it follows:

* ``chain``: the first step is enqueued now, carrying the remaining steps
  (``celery.chain``); each step, when it completes, enqueues the next with its
  return value prepended (``.si()``: not), in the transaction that records
  its completion. A group followed by more steps becomes a chord, as in
  Celery.
* ``group``: every member is enqueued now, in one transaction.
* ``chord``: its counter row (``awa.celery_chords``) and the header's members
  are written in one transaction; the member whose completion brings the
  counter to zero enqueues the callback with the header's results in group
  order, in its completion transaction. So the callback is enqueued exactly
  once, whenever a worker dies. The first member failing for good fails the
  callback with ``ChordError`` (and removes the counter).
* ``link`` / ``link_error``: callbacks applied on success (with the value)
  and on failure (errbacks taking ``(request, exc, traceback)`` are called
  inline, others are enqueued with the task id), as Celery's.
* Nesting as Celery's: a group inside a group or a chord's header is
  unrolled into it; a chord inside a chord's header hands its slot in the
  outer counter to its callback, which reports there when it completes (or
  fails the outer chord when it fails).
* ``xmap`` / ``xstarmap`` (``task.map``, ``task.starmap``): one job of the
  built-in kinds (builtins.py); ``chunks``: a group of ``xstarmap`` parts.

Task ids are given when the signature is frozen (uuids, as in Celery): a
later step's ``AsyncResult`` reads PENDING until its job exists (FAILURE when
a step before it failed: worker.py records it, as Celery's backend does).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..errors import ValidationError
from .errors import UnsupportedOption
from .options import check_using
from .result import AsyncResult, EagerResult, GroupResult
from .serialization import decode, encode

if TYPE_CHECKING:
    from .app import Awa
    from .task import Task


class Signature(dict[str, Any]):
    """A task call to make later: ``task.s(2)``, ``signature("proj.add", args=(2,))``."""

    subtask_type: str | None = None

    def __init__(
        self,
        task: Any = None,
        args: Any = None,
        kwargs: Any = None,
        options: Mapping[str, Any] | None = None,
        type: Any = None,
        subtask_type: str | None = None,
        immutable: bool = False,
        app: Awa | None = None,
        **ex: Any,
    ) -> None:
        self._app = app
        self._type = None
        if isinstance(task, Mapping):
            super().__init__(task)
            return
        name = task
        if task is not None and not isinstance(task, str):
            name = task.name
            self._type = task
            self._app = app or getattr(task, "_app", None)
        super().__init__(
            task=name,
            args=tuple(args or ()),
            kwargs=dict(kwargs or {}),
            options={**(options or {}), **ex},
            subtask_type=subtask_type or self.subtask_type,
            immutable=bool(immutable),
        )

    # -- fields ----------------------------------------------------------------------------

    @property
    def task(self) -> str:
        return str(self["task"])

    name = task

    @property
    def args(self) -> tuple[Any, ...]:
        return tuple(self["args"])

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self["kwargs"])

    @property
    def options(self) -> dict[str, Any]:
        options: dict[str, Any] = self["options"]
        return options

    @property
    def immutable(self) -> bool:
        return bool(self.get("immutable"))

    @property
    def id(self) -> str | None:
        return self.options.get("task_id")

    @property
    def app(self) -> Awa:
        from .app import current_app

        return self._app or getattr(self._type, "_app", None) or current_app()

    @property
    def type(self) -> Task:
        """The task this signature calls (one of the app's, or a stand-in that enqueues by name)."""
        if self._type is None:
            from .app import _by_name
            from .builtins import builtin_tasks

            app = self.app
            self._type = app.tasks.get(self.task) or builtin_tasks(app).get(self.task) or _by_name(app, self.task)
        return self._type

    def __repr__(self) -> str:
        args = ", ".join([*(repr(a) for a in self.args), *(f"{k}={v!r}" for k, v in self.kwargs.items())])
        return f"{self.task}({args}){'!' if self.immutable else ''}"

    # -- building ----------------------------------------------------------------------------

    def _merge(self, args: Any = None, kwargs: Any = None, options: Mapping[str, Any] | None = None) -> Any:
        """Celery's partial application: new args go first, kwargs and options are merged."""
        options = {**self.options, **(options or {})}
        if self.immutable:
            return self.args, self.kwargs, options
        return (*(args or ()), *self.args), {**self.kwargs, **(kwargs or {})}, options

    def clone(self, args: Any = None, kwargs: Any = None, **options: Any) -> Signature:
        args, kwargs, merged = self._merge(args, kwargs, options)
        clone = type(self)._from_fields(self, args, kwargs, merged)
        clone._app, clone._type = self._app, self._type
        return clone

    partial = clone

    @classmethod
    def _from_fields(cls, base: Signature, args: Any, kwargs: Any, options: dict[str, Any]) -> Signature:
        fields = dict(base)
        fields.update(args=tuple(args), kwargs=dict(kwargs), options=dict(options))
        return cls(fields)

    def set(self, immutable: bool | None = None, **options: Any) -> Signature:
        """Set call options (``queue=``, ``countdown=``...) on this signature; returns it."""
        if immutable is not None:
            self["immutable"] = bool(immutable)
        self.options.update(options)
        return self

    def set_immutable(self, immutable: bool) -> None:
        self["immutable"] = bool(immutable)

    def freeze(self, _id: str | None = None, **ignored: Any) -> Any:
        """Give the signature its task id now (a uuid) and return its result handle."""
        task_id = self.options.setdefault("task_id", _id or str(uuid.uuid4()))
        return AsyncResult(task_id, app=self.app, task_name=self.task)

    def link(self, callback: Signature) -> Signature:
        """Apply ``callback`` with this task's return value when it succeeds."""
        self.options.setdefault("link", []).append(callback)
        return callback

    def link_error(self, errback: Signature) -> Signature:
        """Apply ``errback`` when this task fails for good."""
        self.options.setdefault("link_error", []).append(errback)
        return errback

    def on_error(self, errback: Signature) -> Signature:
        """``link_error`` that returns this signature, for chaining (as Celery's)."""
        self.link_error(errback)
        return self

    def __or__(self, other: Any) -> Signature:  # type: ignore[override]
        if isinstance(other, Signature):
            return chain(self, other, app=self._app)
        return NotImplemented

    def __ior__(self, other: Any) -> Signature:  # type: ignore[override]
        """``flow |= step`` chains, as ``|`` does (not dict's in-place merge), as in Celery."""
        return self.__or__(other)

    # -- calling -------------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the task here and now (Celery's ``Signature.__call__``)."""
        args, kwargs, _ = self._merge(args, kwargs, None)
        return self.type(*args, **kwargs)

    def delay(self, *args: Any, **kwargs: Any) -> Any:
        return self.apply_async(args, kwargs)

    def apply_async(self, args: Any = None, kwargs: Any = None, route_name: Any = None, **options: Any) -> Any:
        args, kwargs, options = self._merge(args, kwargs, options)
        return self.type.apply_async(args, kwargs, **options)

    def apply(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        """Run eagerly, here (as ``Task.apply``)."""
        args, kwargs, options = self._merge(args, kwargs, options)
        return self.type.apply(args, kwargs, task_id=options.get("task_id"))

    def _check(
        self, args: Any = None, kwargs: Any = None, options: Mapping[str, Any] | None = None, later: bool = False
    ) -> None:
        """Raise what ``apply_async(args, kwargs, **options)`` would raise, writing nothing.

        A canvas calls it for every job it writes, now or later (``later``: by the worker,
        when the step before completes, with its value as the one argument added; ``None``
        stands for it, and ``task_routes`` is not asked, see ``Task.prepare``). So a bad
        option of any step is refused at the call that starts the canvas, before anything is
        written, not in the worker, where the refusal would fail the step before. The checks
        are the direct call's own (``Task._check_call``); eager mode makes them before it runs
        anything, so a unit test refuses the canvas production refuses.
        """
        args, kwargs, merged = self._merge((None,) if later else args, kwargs, options)
        self.type._check_call(args, kwargs, merged, routed=not later)

    # -- storage ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """The JSON form kept in a job's metadata (arguments in Celery's JSON encoding)."""
        return {
            "task": self.task,
            "args": encode(list(self.args), "args"),
            "kwargs": encode(self.kwargs, "kwargs"),
            "options": _options_to_json(self.options),
            "subtask_type": self.get("subtask_type"),
            "immutable": self.immutable,
        }


def _options_to_json(options: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in options.items():
        if key in ("link", "link_error"):
            out[key] = [maybe_signature(v).to_dict() for v in value]
        elif key == "chain":
            out[key] = [v if isinstance(v, dict) and not isinstance(v, Signature) else v.to_dict() for v in value]
        elif key in ("connection", "using"):
            continue
        else:
            out[key] = encode(value, f"options.{key}")
    return out


def from_dict(data: Mapping[str, Any], app: Awa | None = None) -> Signature:
    """A signature (or chain, group, chord) back from its stored form."""
    kind = data.get("subtask_type")
    options = dict(data.get("options") or {})
    for key in ("link", "link_error"):
        if key in options:
            options[key] = [from_dict(v, app) for v in options[key]]
    if kind == "chain":
        return chain(*(from_dict(t, app) for t in data["kwargs"]["tasks"]), app=app, **options)
    if kind == "group":
        return group(*(from_dict(t, app) for t in data["kwargs"]["tasks"]), app=app, **options)
    if kind == "chunks":
        kwargs = data["kwargs"]
        return chunks(from_dict(kwargs["task"], app), decode(kwargs["it"]), kwargs["n"], app=app, **options)
    if kind == "chord":
        kwargs = data["kwargs"]
        return chord([from_dict(t, app) for t in kwargs["header"]], from_dict(kwargs["body"], app), app=app, **options)
    return Signature(
        data["task"],
        decode(data.get("args") or []),
        decode(data.get("kwargs") or {}),
        options,
        immutable=bool(data.get("immutable")),
        app=app,
    )


def signature(varies: Any, *args: Any, **kwargs: Any) -> Signature:
    """``signature("proj.add", args=(2, 2), kwargs={}, options={})``, or a dict / signature as it is."""
    app = kwargs.pop("app", None)
    if isinstance(varies, Signature):
        return varies.clone() if not kwargs and not args else varies.clone(*args, **kwargs)
    if isinstance(varies, Mapping):
        return from_dict(varies, app)
    sig = Signature(varies, *args, **kwargs)
    sig._app = app or sig._app
    return sig


subtask = signature


def maybe_signature(value: Any, app: Awa | None = None) -> Signature:
    if isinstance(value, Signature):
        return value
    if isinstance(value, Mapping):
        return from_dict(value, app)
    raise TypeError(f"expected a signature, got {value!r}")


# -- where several jobs are written together -----------------------------------------------------


@contextlib.contextmanager
def _one_transaction(app: Awa, options: dict[str, Any]) -> Iterator[None]:
    """Make the jobs written inside share one transaction: the caller's when given or
    current, else one of the app's own (``options["connection"]`` is set for the members)."""
    from .transaction import current_connection

    if options.get("connection") is not None:
        yield
        return
    conn = current_connection(options.pop("using", None))
    if conn is not None:
        options["connection"] = conn
        yield
        return
    own = app.connection()
    with own.transaction():
        options["connection"] = own
        yield


# -- chain ---------------------------------------------------------------------------------------------


class chain(Signature):
    """Tasks run one after another, each getting the previous one's return value."""

    subtask_type = "chain"

    def __init__(self, *tasks: Any, app: Awa | None = None, **options: Any) -> None:
        if len(tasks) == 1 and not isinstance(tasks[0], Mapping) and isinstance(tasks[0], Iterable):
            tasks = tuple(tasks[0])
        steps: list[Signature] = []
        for one in tasks:
            sig = maybe_signature(one, app)
            steps.extend(sig.tasks if isinstance(sig, chain) else [sig])
        super().__init__("celery.chain", (), {"tasks": steps}, options, subtask_type="chain", app=app)
        self._app = app or _app_of(steps)

    @classmethod
    def _from_fields(cls, base: Signature, args: Any, kwargs: Any, options: dict[str, Any]) -> Signature:
        steps = list(base["kwargs"]["tasks"])
        if steps and args and not steps[0].immutable:
            steps[0] = steps[0].clone(args)
        return cls(*steps, **options)

    @property
    def tasks(self) -> list[Signature]:
        return list(self["kwargs"]["tasks"])

    def __or__(self, other: Any) -> Signature:  # type: ignore[override]
        if isinstance(other, Signature):
            return chain(*self.tasks, other, app=self._app, **self.options)
        return NotImplemented

    def __repr__(self) -> str:
        return " | ".join(repr(t) for t in self.tasks)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.apply_async(args, kwargs)

    def link(self, callback: Signature) -> Signature:
        return self.tasks[-1].link(callback) if self.tasks else callback

    def link_error(self, errback: Signature) -> Signature:
        for step in self.tasks:
            step.link_error(errback)
        return errback

    def _steps(self) -> list[Signature]:
        """The steps as they run: a group followed by a step becomes a chord with that step (Celery's upgrade)."""
        steps: list[Signature] = []
        for step in self.tasks:
            if steps and isinstance(steps[-1], group) and not isinstance(steps[-1], chord):
                steps[-1] = chord(steps[-1].tasks, step, app=self._app)
            else:
                steps.append(step)
        return steps

    def freeze(self, _id: str | None = None, **ignored: Any) -> Any:
        result = None
        for step in self._steps():
            frozen = step.freeze()
            _attach_parent(frozen, result)
            result = frozen
        return result

    def apply_async(self, args: Any = None, kwargs: Any = None, route_name: Any = None, **options: Any) -> Any:
        app = self.app
        steps = self._steps()
        if not steps:
            return None
        self._check(args, kwargs, options)  # every step, before anything is written (or run, in eager mode)
        if app.conf.task_always_eager:
            check_using({**steps[0].options, **self.options, **options})  # where the first step is written
            return self.apply(args, kwargs, **options)
        options = {**self.options, **options}
        chord_slot = options.pop("chord", None)
        if chord_slot is not None:
            steps[-1] = steps[-1].clone(chord=chord_slot)
        # Freeze every step first, so each has its id and the results link up as parents.
        results: list[Any] = []
        for step in steps:
            results.append(_attach_parent(step.freeze(), results[-1] if results else None))
        first, rest = steps[0], steps[1:]
        if rest:
            options["chain"] = [s.to_dict() for s in rest]
        first.apply_async(args, kwargs, **options)
        return results[-1]

    def _check(
        self, args: Any = None, kwargs: Any = None, options: Mapping[str, Any] | None = None, later: bool = False
    ) -> None:
        """Check every step as ``apply_async`` writes it (see ``Signature._check``): the first with
        the chain's arguments and options, the others later, by the worker, each with the value
        of the step before (and the last in the chord slot of the header this chain is in)."""
        steps = self._steps()
        options = {**self.options, **(options or {})}
        chord_slot = options.pop("chord", None)
        if chord_slot is not None and steps and isinstance(steps[-1], group):
            raise UnsupportedOption(
                "chord", "a chain ending in a group inside a chord's header is not supported on awa; end it with a task"
            )
        for index, step in enumerate(steps):
            first = index == 0
            step_options = dict(options) if first else {}
            if chord_slot is not None and index == len(steps) - 1:
                step_options["chord"] = chord_slot
            step._check(args if first else None, kwargs if first else None, step_options, later or not first)

    def apply(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        """Eagerly, as Celery: each step runs with the previous value (a failed step raises here)."""
        last: Any = None
        first_args = tuple(args or ())
        for index, step in enumerate(self._steps()):
            step_args = first_args if index == 0 else (last.get(),)
            result = step.apply(step_args, kwargs if index == 0 else None)
            result.parent, last = last, result
        return last


def _app_of(signatures: list[Signature]) -> Awa | None:
    """The app of a canvas built without ``app=``: its members' (as Celery takes it from the tasks)."""
    for sig in signatures:
        found = sig._app or getattr(sig._type, "_app", None)
        if found is not None:
            return found
    return None


def _attach_parent(result: Any, parent: Any) -> Any:
    """Set ``parent`` on a chain step's result (a chord's result: on the header's group result)."""
    target = result
    while getattr(target, "parent", None) is not None:
        target = target.parent
    if target is not result or parent is not None:
        target.parent = parent
    return result


# -- group ------------------------------------------------------------------------------------------------


class group(Signature):
    """Tasks run in parallel; ``GroupResult.get()`` returns their values in the group's order."""

    subtask_type = "group"

    def __init__(self, *tasks: Any, app: Awa | None = None, **options: Any) -> None:
        if len(tasks) == 1 and not isinstance(tasks[0], Mapping) and isinstance(tasks[0], Iterable):
            tasks = tuple(tasks[0])
        members = [maybe_signature(t, app) for t in tasks]
        super().__init__("celery.group", (), {"tasks": members}, options, subtask_type="group", app=app)
        self._app = app or _app_of(members)

    @classmethod
    def _from_fields(cls, base: Signature, args: Any, kwargs: Any, options: dict[str, Any]) -> Signature:
        members = [m.clone(args) if args else m for m in base["kwargs"]["tasks"]]
        return cls(*members, **options)

    @property
    def tasks(self) -> list[Signature]:
        return list(self["kwargs"]["tasks"])

    def __len__(self) -> int:
        return len(self.tasks)

    def __iter__(self) -> Any:
        return iter(self.tasks)

    def __repr__(self) -> str:
        return f"group([{', '.join(repr(t) for t in self.tasks)}])"

    def __or__(self, other: Any) -> Signature:  # type: ignore[override]
        if isinstance(other, Signature) and not isinstance(other, group):
            return chord(self.tasks, other, app=self._app)
        return super().__or__(other)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.apply_async(args, kwargs)

    def link(self, callback: Signature) -> Signature:
        for member in self.tasks:
            member.link(callback)
        return callback

    def link_error(self, errback: Signature) -> Signature:
        for member in self.tasks:
            member.link_error(errback)
        return errback

    def _members(self) -> list[Signature]:
        """The members as they run: a group inside a group is unrolled into it, as Celery does."""
        return _unrolled(self.tasks)

    def freeze(self, _id: str | None = None, **ignored: Any) -> Any:
        group_id = self.options.setdefault("task_id", _id or str(uuid.uuid4()))
        return GroupResult(group_id, [m.freeze() for m in self._members()], app=self._app)

    def apply_async(self, args: Any = None, kwargs: Any = None, route_name: Any = None, **options: Any) -> Any:
        app = self.app
        self._check(args, kwargs, options)  # every member, before the first is written (or run, in eager mode)
        if app.conf.task_always_eager:
            check_using({**self.options, **options})  # where _one_transaction writes them
            return self.apply(args, kwargs, **options)
        options = {**self.options, **options}
        options.pop("chain", None)  # a group is never followed in a chain: it became a chord
        group_id = options.pop("task_id", None) or str(uuid.uuid4())
        results = []
        with _one_transaction(app, options):
            for index, member in enumerate(self._members()):
                # A chord member keeps its own header's group id.
                place = {} if isinstance(member, chord) else {"group_id": group_id, "group_index": index}
                results.append(member.apply_async(args, kwargs, **place, **options))
        return GroupResult(group_id, results, app=app)

    def _check(
        self, args: Any = None, kwargs: Any = None, options: Mapping[str, Any] | None = None, later: bool = False
    ) -> None:
        """Check every member as ``apply_async`` writes it (see ``Signature._check``)."""
        options = {k: v for k, v in {**self.options, **(options or {})}.items() if k not in ("chain", "task_id")}
        for member in self._members():
            member._check(args, kwargs, options, later)

    def apply(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        group_id = options.get("task_id") or self.options.get("task_id") or str(uuid.uuid4())
        return GroupResult(group_id, [m.apply(args, kwargs) for m in self._members()], app=self._app)


def _unrolled(members: list[Signature]) -> list[Signature]:
    """Members with every nested group (not chord) replaced by its own members, in order."""
    flat: list[Signature] = []
    for member in members:
        if isinstance(member, group):
            flat.extend(member._members())
        else:
            flat.append(member)
    return flat


# -- chord ------------------------------------------------------------------------------------------------


class chord(Signature):
    """A group (the header) whose results, in order, are passed to one callback (the body)."""

    subtask_type = "chord"

    def __init__(self, header: Any, body: Any = None, app: Awa | None = None, **options: Any) -> None:
        members = header.tasks if isinstance(header, group) else [maybe_signature(t, app) for t in header]
        body_sig = maybe_signature(body, app) if body is not None else None
        super().__init__(
            "celery.chord", (), {"header": members, "body": body_sig}, options, subtask_type="chord", app=app
        )
        self._app = app or _app_of([*members, *([body_sig] if body_sig is not None else [])])

    @classmethod
    def _from_fields(cls, base: Signature, args: Any, kwargs: Any, options: dict[str, Any]) -> Signature:
        members = [m.clone(args) if args else m for m in base["kwargs"]["header"]]
        return cls(members, base["kwargs"]["body"], **options)

    @property
    def tasks(self) -> list[Signature]:
        return list(self["kwargs"]["header"])

    def _members(self) -> list[Signature]:
        """The header as it runs: nested groups unrolled into it, as Celery does."""
        return _unrolled(self.tasks)

    @property
    def body(self) -> Signature | None:
        body: Signature | None = self["kwargs"]["body"]
        return body

    def __repr__(self) -> str:
        return f"chord([{', '.join(repr(t) for t in self.tasks)}], {self.body!r})"

    def __call__(self, body: Any = None, **options: Any) -> Any:
        return self.apply_async((), {}, body=body, **options)

    def link(self, callback: Signature) -> Signature:
        return self._need_body().link(callback)

    def link_error(self, errback: Signature) -> Signature:
        return self._need_body().link_error(errback)

    def _need_body(self) -> Signature:
        if self.body is None:
            raise ValueError("this chord has no body (callback): chord(header)(body) or chord(header, body)")
        return self.body

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["kwargs"] = {"header": [m.to_dict() for m in self.tasks], "body": self._need_body().to_dict()}
        return data

    def freeze(self, _id: str | None = None, **ignored: Any) -> Any:
        body = self._need_body()
        result = body.freeze(_id)
        group_id = self.options.setdefault("group_id", str(uuid.uuid4()))
        result.parent = GroupResult(group_id, [m.freeze() for m in self._members()], app=self._app)
        return result

    def apply_async(
        self, args: Any = None, kwargs: Any = None, route_name: Any = None, body: Any = None, **options: Any
    ) -> Any:
        app = self.app
        if body is not None:
            self["kwargs"]["body"] = maybe_signature(body, app)
            self._app = self._app or _app_of([self["kwargs"]["body"]])
            app = self.app
        self._check(args, kwargs, options)  # the callback and every member, before anything is written (or run)
        if app.conf.task_always_eager:
            check_using({**self.options, **options})  # where _one_transaction writes them
            return self.apply(args, kwargs, **options)
        callback, options = self._callback(options)
        result = callback.freeze()
        group_id = options.pop("group_id", None) or str(uuid.uuid4())
        options.pop("task_id", None)
        members = self._members()
        if not members:
            return _attach_parent(callback.apply_async(([],), **options), GroupResult(group_id, [], app=app))
        member_results = []
        with _one_transaction(app, options):
            _create_chord(options["connection"], result.id, callback, len(members))
            for index, member in enumerate(members):
                place: dict[str, Any] = {"chord": {"id": result.id, "index": index}}
                if not isinstance(member, chord):  # a chord member keeps its own header's group id
                    place.update(group_id=group_id, group_index=index)
                member_results.append(member.apply_async(args, kwargs, **place, **options))
        result.parent = GroupResult(group_id, member_results, app=app)
        return result

    def _callback(self, options: Mapping[str, Any]) -> tuple[Signature, dict[str, Any]]:
        """The callback as the last member's completion enqueues it (it takes the chord's place in
        a chain or an outer chord's header, and its links), and the options left for the members."""
        callback = self._need_body().clone()
        options = {**self.options, **options}
        # Inside another chord's header (or at the end of a chain that is): the callback reports to it.
        slot = options.pop("chord", None)
        if slot is not None:
            callback.options["chord"] = slot
        for key in ("chain", "link", "link_error"):
            if key in options:
                callback.options[key] = [*callback.options.get(key, []), *options.pop(key)]
        return callback, options

    def _check(
        self, args: Any = None, kwargs: Any = None, options: Mapping[str, Any] | None = None, later: bool = False
    ) -> None:
        """Check the callback (enqueued later with the header's values) and every member, each
        in its slot of this chord, as ``apply_async`` writes them (see ``Signature._check``)."""
        callback, options = self._callback(options or {})
        callback._check(later=True)
        options = {k: v for k, v in options.items() if k not in ("group_id", "task_id")}
        for index, member in enumerate(self._members()):
            member._check(args, kwargs, {**options, "chord": {"id": "", "index": index}}, later)

    def apply(self, args: Any = None, kwargs: Any = None, propagate: bool = True, **options: Any) -> Any:
        """Eagerly, as Celery: the header runs, then the body with its values (a failed member raises here)."""
        values = group(self._members(), app=self._app).apply(args, kwargs).get(propagate=propagate)
        return self._need_body().apply((values,))


# -- map, starmap, chunks ------------------------------------------------------------------------------------


def xmap(task: Any, it: Iterable[Any], app: Awa | None = None) -> Signature:
    """``task.map(items)``: one job calling the task for every item; its value is the list of results."""
    return _mapping("celery.map", "xmap", task, it, app)


def xstarmap(task: Any, it: Iterable[Any], app: Awa | None = None) -> Signature:
    """``task.starmap(items)``: as ``xmap``, each item being the arguments of one call."""
    return _mapping("celery.starmap", "xstarmap", task, it, app)


def _mapping(name: str, kind: str, task: Any, it: Iterable[Any], app: Awa | None) -> Signature:
    sig = _as_signature(task, app)
    target: dict[str, Any] = {
        "task": sig.task,
        "args": [],
        "kwargs": {},
        "options": {},
        "subtask_type": None,
        "immutable": False,
    }
    items = [list(item) if isinstance(item, tuple) else item for item in it]
    owner = app or sig._app
    # Routed as the task it calls (Celery sends it with route_name=task.name): its workers have it.
    options = {"queue": owner.queue_of(sig.type)} if owner is not None else {}
    return Signature(name, (), {"task": target, "it": items}, options, subtask_type=kind, immutable=True, app=owner)


def _as_signature(task: Any, app: Awa | None) -> Signature:
    if isinstance(task, Signature):
        return task
    return maybe_signature(task, app) if isinstance(task, Mapping) else task.s()


class chunks(Signature):
    """``task.chunks(items, n)``: the items in parts of ``n``, each part one ``starmap`` job, run as a group."""

    subtask_type = "chunks"

    def __init__(self, task: Any, it: Iterable[Any] = (), n: int = 1, app: Awa | None = None, **options: Any) -> None:
        if isinstance(task, Mapping) and not isinstance(task, Signature) and "kwargs" in task:
            fields, options = task["kwargs"], {**task.get("options", {}), **options}  # rebuilt by clone()
            task, it, n = fields["task"], fields["it"], fields["n"]
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValidationError("n", f"chunks(): the part size must be a positive integer, got {n!r}")
        sig = _as_signature(task, app)
        kwargs = {"task": sig, "it": [list(i) if isinstance(i, tuple) else i for i in it], "n": n}
        super().__init__("celery.chunks", (), kwargs, options, subtask_type="chunks", immutable=True, app=app)
        self._app = app or sig._app

    def group(self) -> group:
        """The group of ``starmap`` parts (``chunks(...).group()``, as Celery's)."""
        kwargs = self["kwargs"]
        items, n = kwargs["it"], kwargs["n"]
        parts = [items[i : i + n] for i in range(0, len(items), n)]
        return group((xstarmap(kwargs["task"], part, self._app) for part in parts), app=self._app, **self.options)

    def __call__(self, **options: Any) -> Any:
        return self.apply_async(**options)

    def apply_async(self, args: Any = None, kwargs: Any = None, route_name: Any = None, **options: Any) -> Any:
        return self.group().apply_async(**options)

    def _check(
        self, args: Any = None, kwargs: Any = None, options: Mapping[str, Any] | None = None, later: bool = False
    ) -> None:
        self.group()._check(None, None, options, later)

    def apply(self, args: Any = None, kwargs: Any = None, **options: Any) -> Any:
        return self.group().apply(**options)

    def to_dict(self) -> dict[str, Any]:
        data = super().to_dict()
        data["kwargs"] = {**data["kwargs"], "task": self["kwargs"]["task"].to_dict()}
        return data


def _create_chord(conn: Any, chord_id: str, callback: Signature, size: int) -> None:
    import json

    from ..drivers import detect_sync
    from ..sql import QUERIES

    params = {
        "chord_id": chord_id,
        "size": size,
        "results": json.dumps([None] * size),
        "callback": json.dumps(callback.to_dict()),
    }
    detect_sync(conn).fetch_all(QUERIES["create_chord"], params)


__all__ = [
    "EagerResult",
    "Signature",
    "chain",
    "chord",
    "chunks",
    "from_dict",
    "group",
    "maybe_signature",
    "signature",
    "subtask",
    "xmap",
    "xstarmap",
]
