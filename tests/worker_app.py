"""The worker application the subprocess and chaos tests run.

    DATABASE_URL=... python -m awa_bridge worker tests.worker_app:client --queue NAME[:N]

Job kinds ("roles"); every execution records one row in
``t_ledger(job_id, attempt, run_lease, worker, at)``, committed on its own
connection before the handler goes on:

- ``ledger``: record and return.
- ``noop`` (async): nothing, not even a ledger row (the job's own row is the record).
- ``hang``: record, then wait until ``job.cancelled`` (deadline or drain
  timeout) while ``job.attempt < AWA_HANG_UNTIL_ATTEMPT`` (default 2); with
  ``AWA_HANG_CLEANUP_SECONDS``, then sleep that long and record ``<worker>:cleaned-up``;
  from that attempt on it records and completes, so a successor can finish
  what a killed worker left.
- ``deaf`` (async): record, then, while ``job.attempt < AWA_HANG_UNTIL_ATTEMPT``, sleep
  ``AWA_DEAF_SECONDS`` (default 60) catching every ``CancelledError`` and going on.
- ``slow`` (async): sleep ``AWA_SLOW_SECONDS`` (default 1), then record.
- ``crash``: record, then ``os._exit(1)``: the process dies mid-attempt.
- ``block_async``: first blocks the worker's event loop with
  ``time.sleep(AWA_BLOCK_SECONDS)`` (default 5) while ``job.attempt <
  AWA_HANG_UNTIL_ATTEMPT`` (handler code that is stuck, not dead), then records.
- ``block_sync``: records, then blocks its thread the same way, ignoring ``job.cancelled``.
- ``pid_ledger``: records with ``worker`` = ``<worker>:<pid>`` (which process
  ran it: the process executor's children have pids of their own).
- ``proc_overrun``: registered with ``executor="process"``; records like
  ``pid_ledger``, then sleeps 60 s while ``job.attempt < AWA_HANG_UNTIL_ATTEMPT``.
- with ``AWA_PRINT_HOOKS`` set, the ``completed`` and ``started`` hooks print ``hook completed job N``
  and ``hook started job N``.
- ``tx_effect`` (sync) and ``tx_effect_async``: transactional; insert one row
  into ``t_effects(job_id)`` through ``job.conn``, then sleep a random
  0 to ``AWA_TX_MAX_SLEEP`` s (default 0.02) inside the transaction.
- ``tx_lost_connection``: transactional (sync); records, then its transaction's
  backend is terminated under it, as in a failover.
- ``tx_metadata`` (sync) and ``tx_metadata_async``: transactional; add ``attempt_<n>: true`` to the
  job's metadata (``job.update_metadata``) and insert one row into ``t_effects(job_id)``.
- ``effect_on_complete``: a plain handler; records, and registers a completion effect
  (``job.on_complete``) inserting one row into ``t_effects(job_id)``, committed with the completion.
- ``effect_lost_connection``: the same, but while ``job.attempt < AWA_HANG_UNTIL_ATTEMPT`` the
  effect first terminates its own backend, as in a failover mid-completion.
- ``gc_state``: records, and keeps the process's garbage-collector settings in the
  job's metadata (``gc_threshold``, ``gc_frozen``): what ``Client.run`` tuned.
- ``loop_state`` (async): records, and keeps the class of the loop it runs on in the job's
  metadata (``event_loop``, e.g. ``uvloop.Loop``): what ``Client.run`` chose. ``AWA_EVENT_LOOP``
  sets the client's ``event_loop`` (default ``asyncio``, as ``WorkerConfig``'s).

Timings come from the environment (``AWA_HEARTBEAT_INTERVAL``...), defaulting
to the short values of the scenario conventions of docs/reliability.md. Ledger
connections are named ``ledger-<worker>`` so that tests terminating the
worker's own backends (``awa-%``) leave them alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import sys
import threading
import time
from typing import Any

import psycopg

from awa_bridge.worker import Client


def _env_float(name: str, default: float) -> float:
    value = os.environ.get(name)
    return float(value) if value else default


DATABASE_URL = os.environ["DATABASE_URL"]
WORKER = os.environ.get("AWA_WORKER_NAME") or f"pid-{os.getpid()}"
SLOW_SECONDS = _env_float("AWA_SLOW_SECONDS", 1.0)
HANG_UNTIL_ATTEMPT = int(os.environ.get("AWA_HANG_UNTIL_ATTEMPT") or 2)
TX_MAX_SLEEP = _env_float("AWA_TX_MAX_SLEEP", 0.02)
BLOCK_SECONDS = _env_float("AWA_BLOCK_SECONDS", 5.0)
DEAF_SECONDS = _env_float("AWA_DEAF_SECONDS", 60.0)
CLEANUP_SECONDS = _env_float("AWA_HANG_CLEANUP_SECONDS", 0.0)
APPLICATION_NAME = f"ledger-{WORKER}"[:63]

client = Client(
    DATABASE_URL,
    heartbeat_interval=_env_float("AWA_HEARTBEAT_INTERVAL", 0.05),
    heartbeat_staleness=_env_float("AWA_HEARTBEAT_STALENESS", 0.25),
    rescue_interval=_env_float("AWA_RESCUE_INTERVAL", 0.1),
    promote_interval=_env_float("AWA_PROMOTE_INTERVAL", 0.05),
    leader_election_interval=_env_float("AWA_LEADER_ELECTION_INTERVAL", 0.2),
    leader_lease=_env_float("AWA_LEADER_LEASE", 2.0),
    drain_timeout=_env_float("AWA_DRAIN_TIMEOUT", 5.0),
    completion_flush=_env_float("AWA_COMPLETION_FLUSH", 0.002),
    event_loop=os.environ.get("AWA_EVENT_LOOP") or "asyncio",
)

LEDGER_SQL = "INSERT INTO t_ledger (job_id, attempt, run_lease, worker) VALUES (%s, %s, %s, %s)"

# -- the ledger, from worker threads (psycopg) and the event loop (asyncpg) -----

_local = threading.local()


def record(job: Any, worker: str = WORKER) -> None:
    """Commit one ledger row for this execution (one reconnect if the server dropped us)."""
    for retry in (False, True):
        conn = getattr(_local, "conn", None)
        if conn is None or conn.closed or conn.broken:
            conn = _local.conn = psycopg.connect(DATABASE_URL, autocommit=True, application_name=APPLICATION_NAME)
        try:
            conn.execute(LEDGER_SQL, (job.id, job.attempt, job.run_lease, worker))
            return
        except psycopg.OperationalError:
            if retry:
                raise


_async_conn: Any = None
_async_lock: asyncio.Lock | None = None


async def record_async(job: Any) -> None:
    import asyncpg

    global _async_conn, _async_lock
    if _async_lock is None:
        _async_lock = asyncio.Lock()
    async with _async_lock:
        for retry in (False, True):
            if _async_conn is None or _async_conn.is_closed():
                _async_conn = await asyncpg.connect(
                    DATABASE_URL, server_settings={"application_name": APPLICATION_NAME}
                )
            try:
                await _async_conn.execute(
                    "INSERT INTO t_ledger (job_id, attempt, run_lease, worker) VALUES ($1, $2, $3, $4)",
                    job.id,
                    job.attempt,
                    job.run_lease,
                    WORKER,
                )
                return
            except Exception:
                if retry or not _async_conn.is_closed():
                    raise
                _async_conn = None


# -- roles ---------------------------------------------------------------------


@client.task("ledger")
def ledger(job: Any) -> None:
    record(job)


@client.task("noop")
async def noop(job: Any) -> None:
    """Nothing: for runs too large for a ledger row (a commit) per job; the job rows say what ran."""


@client.task("gc_state")
def gc_state(job: Any) -> None:
    import gc

    record(job)
    job.update_metadata({"gc_threshold": list(gc.get_threshold()), "gc_frozen": gc.get_freeze_count()})


@client.task("loop_state")
async def loop_state(job: Any) -> None:
    loop = asyncio.get_running_loop()
    await record_async(job)
    job.update_metadata({"event_loop": f"{type(loop).__module__}.{type(loop).__name__}"})


@client.task("hang")
def hang(job: Any) -> None:
    record(job)
    if job.attempt >= HANG_UNTIL_ATTEMPT:
        return
    while not job.cancelled:
        time.sleep(0.01)
    if CLEANUP_SECONDS:  # its own clean-up once told to stop, then a second ledger row says it ended
        time.sleep(CLEANUP_SECONDS)
        record(job, f"{WORKER}:cleaned-up")


@client.task("deaf")
async def deaf(job: Any) -> None:
    await record_async(job)
    if job.attempt >= HANG_UNTIL_ATTEMPT:
        return
    end = time.monotonic() + DEAF_SECONDS
    while time.monotonic() < end:
        with contextlib.suppress(asyncio.CancelledError):  # deaf to its cancellation: stuck code, not dead
            await asyncio.sleep(end - time.monotonic())


@client.task("slow")
async def slow(job: Any) -> None:
    await asyncio.sleep(SLOW_SECONDS)
    await record_async(job)


@client.task("crash")
def crash(job: Any) -> None:
    record(job)
    os._exit(1)


@client.task("block_async")
async def block_async(job: Any) -> None:
    if job.attempt < HANG_UNTIL_ATTEMPT:
        time.sleep(BLOCK_SECONDS)  # blocks the event loop on purpose, before any await
    await record_async(job)


@client.task("block_sync")
def block_sync(job: Any) -> None:
    record(job)
    if job.attempt < HANG_UNTIL_ATTEMPT:
        time.sleep(BLOCK_SECONDS)  # never looks at job.cancelled


@client.task("pid_ledger")
def pid_ledger(job: Any) -> None:
    record(job, f"{WORKER}:{os.getpid()}")


@client.task("proc_overrun", executor="process")
def proc_overrun(job: Any) -> None:
    record(job, f"{WORKER}:{os.getpid()}")
    if job.attempt < HANG_UNTIL_ATTEMPT:
        time.sleep(60)


if os.environ.get("AWA_PRINT_HOOKS"):

    @client.on("completed")
    def print_completed(job: Any) -> None:
        sys.stdout.write(f"hook completed job {job.id}\n")  # one write: no other line lands inside it
        sys.stdout.flush()

    @client.on("started")
    def print_started(job: Any) -> None:
        sys.stdout.write(f"hook started job {job.id}\n")
        sys.stdout.flush()


@client.task("tx_effect", transactional=True)
def tx_effect(job: Any) -> None:
    job.conn.execute("INSERT INTO t_effects (job_id) VALUES (%s)", (job.id,))
    time.sleep(random.uniform(0, TX_MAX_SLEEP))


@client.task("tx_effect_async", transactional=True)
async def tx_effect_async(job: Any) -> None:
    await job.conn.execute("INSERT INTO t_effects (job_id) VALUES ($1)", job.id)
    await asyncio.sleep(random.uniform(0, TX_MAX_SLEEP))


@client.task("tx_metadata", transactional=True)
def tx_metadata(job: Any) -> None:
    job.update_metadata({f"attempt_{job.attempt}": True})
    job.conn.execute("INSERT INTO t_effects (job_id) VALUES (%s)", (job.id,))


@client.task("tx_metadata_async", transactional=True)
async def tx_metadata_async(job: Any) -> None:
    job.update_metadata({f"attempt_{job.attempt}": True})
    await job.conn.execute("INSERT INTO t_effects (job_id) VALUES ($1)", job.id)


@client.task("tx_lost_connection", transactional=True)
def tx_lost_connection(job: Any) -> None:
    record(job)
    job.conn.execute("SELECT pg_terminate_backend(pg_backend_pid())")


def _insert_effect(job: Any) -> Any:
    return lambda conn: conn.execute("INSERT INTO t_effects (job_id) VALUES (%s)", (job.id,))


@client.task("effect_on_complete")
def effect_on_complete(job: Any) -> None:
    record(job)
    job.on_complete(_insert_effect(job))


@client.task("effect_lost_connection")
def effect_lost_connection(job: Any) -> None:
    record(job)
    if job.attempt < HANG_UNTIL_ATTEMPT:
        job.on_complete(lambda conn: conn.execute("SELECT pg_terminate_backend(pg_backend_pid())"))
    job.on_complete(_insert_effect(job))


class GatewayTimeout(Exception):
    """What a flaky upstream raises; the worker's log must name it."""


@client.task("flaky_upstream")
def flaky_upstream(job: Any) -> None:
    record(job)
    raise GatewayTimeout("upstream answered 504")
