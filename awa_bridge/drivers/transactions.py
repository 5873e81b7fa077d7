"""Short transactions of the bridge's own on the caller's connection, committed on a clean exit.

``awa_bridge.receipts.external_effect`` needs two of them around a provider
call: the claim must be committed BEFORE the request (so a crash after it
leaves a trace) and the outcome after it. That is only honest when the
connection is not already inside a transaction of the caller's: a nested
block would be a savepoint whose "commit" means nothing until the caller's
outer transaction commits. So each helper first checks, per driver, that no
transaction is open, and raises ``ValidationError`` (field ``conn``) before
writing anything if one is.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from ..errors import ValidationError
from .detect import _classify, _unsupported, wrong_mode


def _in_transaction(conn: Any, what: str) -> ValidationError:
    return ValidationError(
        "conn",
        f"is inside a transaction ({what}); {type(conn).__name__} must be outside any transaction here: "
        "the claim has to be committed before the provider is called and the outcome after it, "
        "so this call opens and commits its own short transactions",
    )


@contextmanager
def committed_transaction(conn: Any) -> Iterator[None]:
    """``with committed_transaction(conn):`` runs the body in a transaction of its own and commits it."""
    kind = _classify(conn)
    if kind == "sqlalchemy-scoped":
        conn, kind = conn(), "sqlalchemy"  # the registry's Session, the one the statements run on
    if kind == "psycopg":
        from psycopg.pq import TransactionStatus

        if conn.info.transaction_status != TransactionStatus.IDLE:
            raise _in_transaction(conn, f"psycopg status {conn.info.transaction_status.name}")
        with conn.transaction():
            yield
    elif kind == "sqlalchemy":
        if conn.in_transaction():
            raise _in_transaction(conn, "SQLAlchemy in_transaction() is true")
        with conn.begin():
            yield
    elif kind == "django":
        from django.db import transaction

        if conn.in_atomic_block or not conn.get_autocommit():
            raise _in_transaction(conn, "Django atomic() block or autocommit off")
        with transaction.atomic(using=conn.alias):
            yield
    else:
        raise wrong_mode(conn, "use the async form") if kind else _unsupported(conn)


@asynccontextmanager
async def committed_transaction_async(conn: Any) -> AsyncIterator[None]:
    """``async with committed_transaction_async(conn):`` the async form of ``committed_transaction``."""
    kind = _classify(conn)
    if kind == "sqlalchemy-async-scoped":
        conn, kind = conn(), "sqlalchemy-async"
    if kind == "asyncpg":
        if conn.is_in_transaction():
            raise _in_transaction(conn, "asyncpg is_in_transaction() is true")
        async with conn.transaction():
            yield
    elif kind == "psycopg-async":
        from psycopg.pq import TransactionStatus

        if conn.info.transaction_status != TransactionStatus.IDLE:
            raise _in_transaction(conn, f"psycopg status {conn.info.transaction_status.name}")
        async with conn.transaction():
            yield
    elif kind == "sqlalchemy-async":
        if conn.in_transaction():
            raise _in_transaction(conn, "SQLAlchemy in_transaction() is true")
        async with conn.begin():
            yield
    else:
        raise wrong_mode(conn, "use the sync form") if kind else _unsupported(conn)
