"""Handlers by job kind, and decoding args into the handler's type."""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from ..args import derive_kind
from ..errors import ValidationError
from .config import EXECUTORS


class ArgsDecodeError(Exception):
    """The job's args do not fit the handler's declared type (the job fails at once)."""


@dataclass(frozen=True)
class Handler:
    kind: str
    fn: Callable[..., Any]
    args_type: type | None  # None: the handler takes the args dict
    queue: str
    is_async: bool
    transactional: bool
    # For sync transactional handlers: opens the finalization transaction and
    # yields its connection (None: a psycopg connection from the worker's pool).
    transaction: Callable[[], AbstractContextManager[Any]] | None = None
    # "thread" or "process" for a sync handler; None: the queue's executor.
    executor: str | None = None

    def decode(self, args: Any) -> Any:
        """Build the handler's args object from the stored JSON."""
        if self.args_type is None:
            return args
        try:
            if dataclasses.is_dataclass(self.args_type):
                if not isinstance(args, dict):
                    raise TypeError(f"expected a JSON object, got {type(args).__name__}")
                return self.args_type(**args)
            validate = getattr(self.args_type, "model_validate", None)
            if validate is not None:
                return validate(args)
            return self.args_type(args)
        except Exception as exc:
            raise ArgsDecodeError(
                f"args of job kind {self.kind!r} do not decode into {self.args_type.__name__}: {exc}"
            ) from exc


class Registry:
    """Kind → handler. One handler per kind."""

    def __init__(self) -> None:
        self.handlers: dict[str, Handler] = {}

    def register(
        self,
        target: type | str,
        fn: Callable[..., Any],
        *,
        kind: str | None = None,
        queue: str = "default",
        transactional: bool = False,
        transaction: Callable[[], AbstractContextManager[Any]] | None = None,
        executor: str | None = None,
    ) -> Handler:
        if isinstance(target, str):
            args_type, resolved = None, kind or target
        elif isinstance(target, type):
            args_type, resolved = target, kind or derive_kind(target.__name__)
        else:
            raise TypeError("task() takes an args type (dataclass or pydantic model) or a kind name")
        is_async = inspect.iscoroutinefunction(fn)
        if transaction is not None and (is_async or not transactional):
            raise ValueError("transaction= is for sync handlers registered with transactional=True")
        if executor is not None and executor not in EXECUTORS:
            raise ValidationError("executor", f"must be one of {', '.join(EXECUTORS)}, got {executor!r}")
        if executor == "process" and (is_async or transactional):
            raise ValidationError(
                "executor", "'process' is for plain sync handlers (not async, not transactional=True)"
            )
        if resolved in self.handlers:
            raise ValidationError("kind", f"a handler for {resolved!r} is already registered")
        handler = Handler(
            kind=resolved,
            fn=fn,
            args_type=args_type,
            queue=queue,
            is_async=is_async,
            transactional=transactional,
            transaction=transaction,
            executor=executor,
        )
        self.handlers[resolved] = handler
        return handler

    def get(self, kind: str) -> Handler | None:
        return self.handlers.get(kind)
