"""The connections handlers use, apart from the runtime's own pool.

A handler holds its connection for its whole run; sharing the pool used for
claims and completions would let slow handlers starve them. So transactional
handlers (async: an asyncpg pool; sync: a psycopg pool) and completion effects
get pools of their own, each created on first use, and sync handlers on a
``executor="process"`` queue get that queue's child processes.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from ..drivers.connect import create_pool, create_sync_pool
from .config import QueueConfig

if TYPE_CHECKING:
    from ..drivers.asyncpg import AsyncpgPool
    from ..drivers.psycopg import PsycopgPool


#: Connections per handler pool at most, whatever the slots: more slots wait for one.
MAX_HANDLER_CONNECTIONS = 20


class HandlerPools:
    def __init__(self, database_url: str, queues: Mapping[str, QueueConfig]) -> None:
        self.database_url = database_url
        self.queues = queues
        self.size = max(2, min(sum(q.max_workers for q in queues.values()), MAX_HANDLER_CONNECTIONS))
        self._sync_pool: PsycopgPool | None = None
        self._sync_lock = threading.Lock()
        self._tx_pool: AsyncpgPool | None = None
        self._tx_lock = asyncio.Lock()
        self._process_pools: dict[str, Any] = {}
        self._process_lock = threading.Lock()

    async def transaction_pool(self) -> AsyncpgPool:
        """The asyncpg pool of async transactional handlers (``acquire()`` yields adapters)."""
        async with self._tx_lock:
            if self._tx_pool is None:
                self._tx_pool = await create_pool(
                    self.database_url, min_size=1, max_size=self.size, application_name="awa-handler-async"
                )
        return self._tx_pool

    def _sync_handler_pool(self) -> PsycopgPool:
        with self._sync_lock:
            if self._sync_pool is None:
                self._sync_pool = create_sync_pool(
                    self.database_url, min_size=1, max_size=self.size, application_name="awa-handler-sync"
                )
            return self._sync_pool

    @contextlib.contextmanager
    def sync_connection(self) -> Iterator[Any]:
        """A psycopg connection for sync transactional handlers (pooled)."""
        with self._sync_handler_pool().connection() as conn:
            yield conn

    @contextlib.contextmanager
    def sync_transaction(self) -> Iterator[Any]:
        """The default transaction of sync transactional handlers: psycopg, from the pool."""
        with self._sync_handler_pool().transaction() as conn:
            yield conn

    def process_pool(self, queue: str) -> Any:
        """The child processes of ``queue`` (created on first use; see ``processes``)."""
        from .processes import ProcessPool

        with self._process_lock:
            pool = self._process_pools.get(queue)
            if pool is None:
                config = self.queues.get(queue)
                per_child = config.max_tasks_per_child if config is not None else None
                pool = self._process_pools[queue] = ProcessPool(queue, per_child)
        return pool

    async def close(self, timeout: float | None = None) -> None:
        """Close the pools; the async one waits ``timeout`` at most for a connection a handler still holds."""
        for pool in self._process_pools.values():
            pool.shutdown()
        if self._tx_pool is not None:
            await self._tx_pool.close(timeout)
        if self._sync_pool is not None:
            self._sync_pool.close()
