"""Which driver errors mean "the connection or the server went away" (asyncpg and psycopg).

One place for the worker (retry a batch, read an uncertain commit back) and
the CLI (one line instead of a traceback), so both drivers are judged alike.
"""

from __future__ import annotations

import re
import socket

from ..errors import sqlstate_of

_ASYNCPG_LOST = ("CannotConnectNowError", "AdminShutdownError", "InternalClientError")


def is_transient(exc: BaseException) -> bool:
    """A lost connection or server (or a serialization failure), as opposed to an error in the statement."""
    if isinstance(exc, (OSError, ConnectionError, TimeoutError)):
        return True
    name = type(exc).__name__
    module = type(exc).__module__ or ""
    if module.startswith("asyncpg") and ("Connection" in name or "Interface" in name or name in _ASYNCPG_LOST):
        return True
    state = sqlstate_of(exc)
    # Class 08: connection exceptions; 57P: operator intervention (shutdown, terminated backend);
    # 53300: too many connections (the server's max_connections or a role's or database's limit).
    return state is not None and (state.startswith("08") or state.startswith("57P") or state in ("40001", "53300"))


def is_operational(exc: BaseException) -> bool:
    """psycopg's ``OperationalError``: the connection or the server failed, not the statement (sync
    paths). psycopg_pool's ``PoolTimeout`` (no connection in time: the server refusing new ones
    makes that) is one too, declared in its own module."""
    if type(exc).__module__.split(".")[0] not in ("psycopg", "psycopg_pool"):
        return False
    import psycopg

    return isinstance(exc, psycopg.OperationalError)


def is_connection_failure(exc: BaseException) -> bool:
    """The connection was refused or lost, as opposed to an error of a statement or of the caller's
    code, on either driver; also when a framework wraps the driver's error (Django's
    ``OperationalError`` carries it as its cause)."""
    return any(e is not None and (is_transient(e) or is_operational(e)) for e in (exc, exc.__cause__))


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, or its class name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def describe_connection_failure(exc: BaseException) -> str | None:
    """One line for a failure to reach the database or a malformed URL; ``None`` for anything else."""
    refused = _UNSUPPORTED_PARAMETER.search(first_line(exc))
    if refused is not None:  # PgBouncer refuses the session settings the worker connects with
        return (
            f"the server refused the startup parameter {refused['name']}: this looks like PgBouncer; the worker "
            "needs a direct connection to PostgreSQL (LISTEN/NOTIFY, session settings): give it the server's "
            "own URL (docs/howto/scaling.md)"
        )
    if type(exc).__module__.split(".")[0] == "psycopg":
        import psycopg

        first = first_line(exc)
        if isinstance(exc, psycopg.OperationalError):
            return f"cannot reach the database: {first}"
        if isinstance(exc, psycopg.ProgrammingError) and "connection" in first:
            return f"the database URL is not valid: {first}"
    if isinstance(exc, (ConnectionError, socket.gaierror)):  # asyncpg's connect: refused, unknown host
        return f"cannot reach the database: {exc}"
    state = sqlstate_of(exc) or ""
    if type(exc).__module__.split(".")[0] == "asyncpg" and (state[:2] in ("08", "28") or state in _CONNECT_REFUSED):
        return f"cannot reach the database: {exc}"
    return None


# What a server answers a connection attempt with, besides class 08 (connection exception) and
# 28 (invalid authorization): no such database, too many connections, starting up / shutting down.
_CONNECT_REFUSED = ("3D000", "53300", "57P01", "57P02", "57P03")

# PgBouncer's answer to a startup packet carrying a setting it does not pass on (the worker sends
# plan_cache_mode, jit...): "unsupported startup parameter: NAME".
_UNSUPPORTED_PARAMETER = re.compile(r"unsupported startup parameter(?: in options)?: (?P<name>[\w.]+)")
